"""``rlinf sft`` as a flow of the one driver (:mod:`rlinf_algos.runtime.driver`): supervised
fine-tuning gets resume, SIGTERM and Ctrl-C, the ``runner.loggers``, ``rlinf plot`` and the
summary the way every other run gets them.

- :class:`SFTFlow`: the flow ``sft``, one role: ``actor`` (the learner), whose body
  (:class:`SFTLearner`) holds the model and its AdamW and takes one gradient step per call;
- :class:`SFTRun`: what the driver runs (:class:`~rlinf_algos.flow.FlowRun`): in its
  :meth:`~SFTRun.start` the data are checked and tokenized, the ``model.init`` folder is built
  (``base_model/``) and ``config.yaml`` written; each :meth:`~SFTRun.step` is one gradient step
  on the batch it picks (the data position, the learning rate and the metrics windows are the
  run's); :meth:`~SFTRun.finish` evaluates and writes ``policy/``. In one process
  (``runner.scheduler: local``, what ``rlinf sft`` runs) the body is called directly; placed by
  a scheduler, it is the body of an :class:`~rlinf_algos.runtime.workers.ActorWorker` and the
  same calls go to it.

A checkpoint (``checkpoints/step_<n>/``) holds the learner (weights, optimiser, torch random
stream) and the run (data position, tokens, the loss window of the next metrics row, the
evaluation before training), so a resumed run takes the batches an uninterrupted one takes and
writes the same rows: the same final loss, bit for bit on one device.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlinf_algos.flow import Flow, FlowRun
from rlinf_algos.lm.model_type import load_lm_model
from rlinf_algos.lm.sft_config import SFTRunConfig, load_sft_config
from rlinf_algos.lm.sft_data import (
    ExampleSet,
    exact_match,
    load_examples,
    lr_at,
    pack_examples,
    read_texts,
    sft_device,
    token_nll,
    tool_schemas,
)
from rlinf_core.errors import RlinfError

__all__ = ["METRIC_COLUMNS", "SFTFlow", "SFTLearner", "SFTRun", "run_sft"]

METRIC_COLUMNS = ("step", "loss", "lr", "tokens", "grad_norm", "wall_s", "val_loss", "val_exact_match")
"""``metrics.csv``: ``loss`` is the mean response-token NLL since the previous row, ``tokens``
the response tokens trained on so far, ``val_loss`` is set on the rows of
``train.eval_interval`` (empty otherwise), ``val_exact_match`` on those rows when
``train.stop_at_exact_match`` is set."""


class SFTFlow(Flow):
    """The ``sft`` flow (see the module docstring). It travels to a worker as the run's sections
    (plain data).

    Args:
        run: the validated sections.
        command: the command line, recorded in ``summary.json``.
    """

    checkpoint_layout = "folder"
    keep_checkpoints = 2

    def __init__(self, run: SFTRunConfig, command: str | None = None) -> None:
        self.data = run.model_dump(mode="json")
        self._run: SFTRunConfig | None = run
        self.command = command

    def __getstate__(self) -> dict[str, Any]:
        return {"data": self.data, "command": self.command}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.data, self.command, self._run = state["data"], state["command"], None

    @property
    def run(self) -> SFTRunConfig:
        if self._run is None:
            self._run = load_sft_config(self.data)
        return self._run

    @property
    def name(self) -> str:
        return "sft"

    @property
    def runner(self) -> Any:
        return self.run.runner

    def local(self, driver: Any) -> FlowRun:
        return SFTRun(driver, self)

    def placed(self, driver: Any) -> FlowRun:
        return SFTRun(driver, self, placed=True)

    def body(self, role: str, host: Any) -> Any:
        if role != "actor":
            raise RlinfError(f"an sft run has no {role!r} role (it has actor, the learner)")
        return SFTLearner(self.run)


class SFTLearner:
    """The learner's body: the model and its AdamW (decoupled weight decay on matrices only). It
    answers the actor worker's calls (:mod:`rlinf_algos.runtime.workers.actor`): ``build``,
    ``train``, ``state`` / ``load``, ``policy``, ``parameters``; ``version`` stays 0 and
    ``weights`` is empty (no role loads the weights while the run lasts)."""

    version = 0

    def __init__(self, run: SFTRunConfig) -> None:
        self.run = run
        self.model: Any = None

    def build(self, spec: Mapping[str, Any], state: dict[str, Any] | None = None, init: Any = None) -> None:
        """Load the model of ``spec["folder"]`` (seeded by ``runner.seed``: LoRA's initial
        weights), keep the examples ``spec`` carries (``train``, ``val``, ``generate``) and make
        the optimiser; with ``state``, continue from it."""
        import torch

        from rlinf_algos.lm.tokens import LMTokenizer

        rcfg, tcfg = self.run.runner, self.run.train
        self.device = sft_device(rcfg.device)
        torch.set_num_threads(rcfg.torch_threads)
        torch.manual_seed(rcfg.seed)
        random.seed(rcfg.seed)
        folder = Path(spec["folder"])
        self.folder = folder
        self.tok = LMTokenizer.from_folder(folder, self.run.model.trust_remote_code)
        self.model = load_lm_model(self.run.model, folder, device=self.device)
        self.train_set, self.val, self.gen_set = (
            list(spec["train"]),
            list(spec["val"]),
            list(spec["generate"]),
        )
        self.max_new = int(spec["max_new_tokens"])
        self.policy_dir = Path(spec["policy_dir"])
        decay = [p for p in self.model.parameters() if p.requires_grad and p.ndim >= 2]
        no_decay = [p for p in self.model.parameters() if p.requires_grad and p.ndim < 2]
        self.params = decay + no_decay
        self.opt = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": tcfg.weight_decay},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=tcfg.lr,
            betas=tcfg.adam_betas,
        )
        if state is not None:
            self.load(state)

    def weights(self) -> dict[str, Any]:
        return {}

    def parameters(self) -> dict[str, int]:
        from rlinf_algos.lm import hf

        trainable, total = hf.parameter_counts(self.model)
        return {"trainable": trainable, "total": total, "lora": int(hf.is_lora(self.model))}

    def train(
        self, gen: int | str, batch: list[int] | None = None, lr: float = 0.0, evaluate: str | None = None
    ) -> dict[str, Any]:
        """One gradient step at ``lr`` on the training examples ``batch`` (indices; none: no
        step), then, when ``evaluate`` is ``loss`` or ``generate``, the validation loss (and the
        greedy exact match on the ``generate`` examples). ``gen`` names the call in errors.
        Returns ``loss_sum`` (summed response-token NLL), ``tokens``, ``grad_norm``;
        ``val_loss``, ``val_tokens``, ``exact_match``, ``outputs``, ``eval_s``."""
        import torch

        from rlinf_algos.lm.hf import sequence_log_probs

        tcfg, out = self.run.train, {}
        if batch:
            for g in self.opt.param_groups:
                g["lr"] = lr
            examples = [self.train_set[i] for i in batch]
            micro = tcfg.micro_batch_size or tcfg.batch_size
            if micro < len(examples):
                examples.sort(key=lambda e: len(e.ids))
            count = sum(sum(e.mask) for e in examples)
            self.model.train()
            self.opt.zero_grad(set_to_none=True)
            step_loss = 0.0
            for i in range(0, len(examples), micro):
                ids, mask = pack_examples(examples[i : i + micro], self.tok.pad_id, self.device)
                nll = -(sequence_log_probs(self.model, ids) * mask).sum()
                (nll / max(count, 1)).backward()
                step_loss += float(nll.detach())
            norm = torch.nn.utils.clip_grad_norm_(self.params, tcfg.grad_clip or float("inf"))
            self.opt.step()
            out.update(loss_sum=step_loss, tokens=count, grad_norm=float(norm))
        if evaluate:
            t = time.perf_counter()
            out["val_loss"], out["val_tokens"] = token_nll(
                self.model, self.val, self.tok.pad_id, tcfg.eval_batch_size
            )
            if evaluate == "generate" and self.gen_set:
                out["exact_match"], out["outputs"] = exact_match(
                    self.model, self.tok, self.gen_set, self.max_new, tcfg.eval_batch_size
                )
                self.model.train()
            out["eval_s"] = time.perf_counter() - t
        return out

    def state(self) -> dict[str, Any]:
        """Weights (the whole model's state dict), optimiser and this process's torch stream."""
        import torch

        return {
            "model": {k: v.detach().to("cpu") for k, v in self.model.state_dict().items()},
            "optimizer": self.opt.state_dict(),
            "torch_rng": torch.get_rng_state(),
        }

    def load(self, state: Mapping[str, Any]) -> None:
        import torch

        self.model.load_state_dict({k: v.to(self.device) for k, v in state["model"].items()})
        self.opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])

    def policy(self) -> dict[str, Any]:
        """Write ``policy/`` (merged with LoRA) and ``adapter/`` beside it (with LoRA)."""
        from rlinf_algos.lm import hf

        self.model.eval()
        lora = hf.is_lora(self.model)
        adapter = self.policy_dir.parent / "adapter" if lora else None
        hf.save_model_folder(self.model, self.folder, self.policy_dir, adapter)
        return {"policy": str(self.policy_dir), "lora": lora}


class _Placed:
    """The learner as the actor worker placed by a scheduler: the body's calls, over the group."""

    def __init__(self, run: SFTRun) -> None:
        import secrets

        from rlinf_algos.runtime.workers import WORKERS

        d = run.driver
        self.timeout = d.timeout
        weights = d.weight_sync(f"rlinf-{secrets.token_hex(4)}-sft", "object_store", ())
        rcfg = run.run.runner
        d.launch(
            {
                "actor": (
                    WORKERS["actor"],
                    (run.flow,),
                    {
                        "timeout": self.timeout,
                        "seed": rcfg.seed,
                        "threads": rcfg.torch_threads,
                        "weights": weights,
                        "device": rcfg.device,
                    },
                )
            }
        )
        self.group = d.groups["actor"]
        if self.group.world_size != 1:
            raise RlinfError(f"an sft run trains on one actor process, got {self.group.world_size}")

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.group.call(method, *args, **kwargs).wait(self.timeout)[0]

    def build(self, spec: Mapping[str, Any]) -> None:
        self._call("configure", dict(spec))

    def train(self, gen: str, **kwargs: Any) -> dict[str, Any]:
        return self._call("train", gen, **kwargs)

    def state(self) -> dict[str, Any]:
        return self._call("state")

    def load(self, state: dict[str, Any]) -> None:
        self._call("load", state)

    def policy(self) -> dict[str, Any]:
        return self._call("policy")

    def parameters(self) -> dict[str, int]:
        return self._call("world")["parameters"]


class SFTRun(FlowRun):
    """A supervised fine-tuning run under the driver (see the module docstring)."""

    unit = "step"
    failure_files = "the policy"
    checkpoint_on_hard_stop = False  # a second Ctrl-C may land inside an optimiser step

    def __init__(self, driver: Any, flow: SFTFlow, placed: bool = False) -> None:
        super().__init__(driver)
        self.flow, self.run, self.is_placed = flow, flow.run, placed
        if placed:
            self.roles = {"actor": "never"}
            self.holds = {"actor": "the model and its optimiser state"}
        self.log_interval = self.run.runner.log_interval
        self.learner: Any = None
        self.steps_planned = 0
        self.t_start = time.perf_counter()

    def columns(self) -> tuple[str, ...]:
        return METRIC_COLUMNS

    def say(self, msg: str) -> None:
        self.driver.say(msg)

    # -- start -------------------------------------------------------------------------------------
    def start(self, state: dict[str, Any] | None) -> None:
        """Tokenize the data (building ``base_model/`` for ``model.init``), write ``config.yaml``
        (once the examples are ready: a configuration mistake leaves no run behind), build the
        learner and, for a new run, evaluate it before training."""
        import yaml
        from transformers import AutoTokenizer

        from rlinf_algos.lm import hf
        from rlinf_algos.lm.folder import folder_context_length
        from rlinf_algos.lm.tokens import LMTokenizer
        from rlinf_algos.rundir import check_resume_config
        from rlinf_core.compose import mask_secrets
        from rlinf_core.errors import ConfigError
        from rlinf_core.io import atomic_write_text

        run, d = self.run, self.driver
        tcfg, rcfg, dcfg = run.train, run.runner, run.data
        folder = Path(run.model.path) if run.model.path is not None else d.run_dir / "base_model"
        if run.model.init is not None and not (state is not None and (folder / "config.json").is_file()):
            corpus = [t for pair in read_texts(dcfg, "train", tool_schemas(run)) for t in pair]
            hf.new_model_folder(folder, run.model.init, seed=rcfg.seed, corpus=corpus)
            self.say(
                f"built a {run.model.init.architecture} model and its {run.model.init.tokenizer} tokenizer in {folder}"
            )
        self.folder = folder
        tok = LMTokenizer.from_folder(folder, run.model.trust_remote_code)
        hf_tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=run.model.trust_remote_code)
        context = folder_context_length(folder)
        max_length = tcfg.max_length or run.model.max_seq_len or context
        if max_length > context:
            key = "train.max_length" if tcfg.max_length else "model.max_seq_len"
            raise ConfigError(f"{max_length} exceeds the model's context of {context} tokens ({folder})", key)
        self.max_length = max_length
        schemas = tool_schemas(run)
        self.train_set = load_examples(dcfg, "train", tok, hf_tok, max_length, schemas)
        self.val_set = (
            load_examples(dcfg, "val", tok, hf_tok, max_length, schemas)
            if dcfg.val_files
            else ExampleSet([], "val")
        )
        saved = mask_secrets(run.model_dump(mode="json"))  # no ${oc.env:...} value in the run directory
        if state is not None:  # a resumed run keeps its model
            check_resume_config(d.run_dir / "config.yaml", saved)
        atomic_write_text(d.run_dir / "config.yaml", yaml.safe_dump(saved, sort_keys=False))
        for ds in (self.train_set, self.val_set):
            if ds.filtered:
                self.say(
                    f"{ds.split}: left out {ds.filtered} of {ds.rows} rows ({'; '.join(ds.filter_reasons)})"
                )

        n = self.n = len(self.train_set)
        self.steps_planned = tcfg.steps or math.ceil((tcfg.epochs or 1) * n / tcfg.batch_size)
        self.budget = None if tcfg.steps else (tcfg.epochs or 1) * n
        val = self.val_set.examples
        self.gen_set = [e for e in val if e.prompt_len > 0][: tcfg.eval_generate]
        longest = max(
            (t - s for e in self.gen_set for s, t in (e.turns or [(e.prompt_len, len(e.ids))])), default=0
        )
        spec = {
            "folder": str(folder),
            "train": self.train_set.examples,
            "val": val,
            "generate": self.gen_set,
            "max_new_tokens": tcfg.max_new_tokens or longest + 8,
            "policy_dir": str(d.run_dir / "policy"),
        }
        self.learner = _Placed(self) if self.is_placed else SFTLearner(run)
        self.learner.build(spec)
        p = self.learner.parameters()
        self.params = (int(p["trainable"]), int(p["total"]))
        self.say(
            f"sft: {n} training examples, {len(val)} validation; {self.steps_planned} steps of {tcfg.batch_size}; "
            f"{self.params[0]:,} trainable of {self.params[1]:,} parameters{' (LoRA)' if p['lora'] else ''}"
        )
        self.pos = self.tokens_seen = self.window_tokens = 0
        self.window_loss = 0.0
        self.last_loss: float | None = None
        self.stopped_at: float | None = None
        self.seconds0 = self.eval_s = 0.0
        self.after: dict[str, Any] | None = None
        if state is None:
            res = self.learner.train("before", evaluate="generate")
            self.before = {
                "val_loss": _num(res["val_loss"]),
                "val_tokens": int(res["val_tokens"]),
                "exact_match": res.get("exact_match"),
                "outputs": list(res.get("outputs", [])),
            }
            self.eval_s = float(res["eval_s"])
            if val:
                em = self.before["exact_match"]
                self.say(
                    f"validation before: loss {res['val_loss']:.4f} on {res['val_tokens']} response tokens"
                    + (f", exact match {em:.3f} on {len(self.gen_set)}" if em is not None else "")
                )

    def load(self, state: dict[str, Any]) -> None:
        s = state["sft"]
        self.learner.load(state["learner"])
        self.pos, self.tokens_seen = int(s["pos"]), int(s["tokens"])
        self.window_loss, self.window_tokens = float(s["window_loss"]), int(s["window_tokens"])
        self.last_loss, self.stopped_at = s["last_loss"], s["stopped_at"]
        self.before, self.eval_s, self.seconds0 = dict(s["before"]), float(s["eval_s"]), float(s["seconds"])
        self.say(
            f"resuming from {self.driver.run_dir} (step {state['run']['steps']} of {self.steps_planned})"
        )

    def state(self) -> dict[str, Any]:
        return {
            "learner": self.learner.state(),
            "sft": {
                "pos": self.pos,
                "tokens": self.tokens_seen,
                "window_loss": self.window_loss,
                "window_tokens": self.window_tokens,
                "last_loss": self.last_loss,
                "stopped_at": self.stopped_at,
                "before": self.before,
                "eval_s": self.eval_s,
                "seconds": self.seconds(),
            },
        }

    def seconds(self) -> float:
        return self.seconds0 + time.perf_counter() - self.t_start

    # -- the steps ---------------------------------------------------------------------------------
    def done(self) -> bool:
        return self.driver.steps >= self.steps_planned or self.stopped_at is not None

    def _batch(self) -> list[int]:
        """The indices of the next batch: ``train.batch_size`` from the data position, a fresh
        permutation every epoch (drawn from ``data.seed`` and ``runner.seed``)."""
        tcfg, dcfg, n = self.run.train, self.run.data, self.n
        end = (
            self.pos + tcfg.batch_size
            if self.budget is None
            else min(self.pos + tcfg.batch_size, self.budget)
        )
        out, order, order_epoch = [], [], -1
        for p in range(self.pos, end):
            epoch, offset = divmod(p, n)
            if epoch != order_epoch:
                order = list(range(n))
                if dcfg.shuffle:
                    random.Random(f"rlinf-sft:{dcfg.seed}:{self.run.runner.seed}:{epoch}").shuffle(order)
                order_epoch = epoch
            out.append(order[offset])
        self.pos = end
        return out

    def step(self) -> None:
        d, tcfg, rcfg = self.driver, self.run.train, self.run.runner
        steps = self.steps_planned
        k = d.steps
        done = k + 1
        lr = lr_at(k, steps, tcfg)
        check = bool(
            tcfg.eval_interval and done % tcfg.eval_interval == 0 and done < steps and self.val_set.examples
        )
        evaluate = None
        if check:
            evaluate = "generate" if tcfg.stop_at_exact_match is not None and self.gen_set else "loss"
        res = self.learner.train(f"step {done}", batch=self._batch(), lr=lr, evaluate=evaluate)
        self.tokens_seen += int(res["tokens"])
        self.window_loss += float(res["loss_sum"])
        self.window_tokens += int(res["tokens"])
        self.eval_s += float(res.get("eval_s", 0.0))
        val_now, em_now = res.get("val_loss"), res.get("exact_match")
        if em_now is not None and em_now >= (tcfg.stop_at_exact_match or math.inf):
            self.stopped_at = em_now
        d.steps = d.iteration = done
        if (
            done % rcfg.log_interval == 0
            or done == steps
            or val_now is not None
            or self.stopped_at is not None
        ):
            self.last_loss = self.window_loss / max(self.window_tokens, 1)
            row = {
                "loss": self.last_loss,
                "lr": lr,
                "tokens": self.tokens_seen,
                "grad_norm": res["grad_norm"],
            }
            if val_now is not None:
                row["val_loss"] = val_now
            if em_now is not None:
                row["val_exact_match"] = em_now
            out = d.row(done, row, force=True)
            self.say(
                f"sft step {done}/{steps}  loss {self.last_loss:.4f}  lr {lr:.2e}  "
                + (f"val {val_now:.4f}  " if val_now is not None else "")
                + (f"exact match {em_now:.3f}  " if em_now is not None else "")
                + f"({out['wall_s'] if out else 0.0:.0f}s)"
            )
            self.window_loss, self.window_tokens = 0.0, 0
        if self.stopped_at is not None:
            self.say(
                f"sft: validation exact match {self.stopped_at:.3f} reached train.stop_at_exact_match="
                f"{tcfg.stop_at_exact_match} at step {done} of {steps}; stopping"
            )

    # -- the end -----------------------------------------------------------------------------------
    def finish(self, interrupted: bool, error: str | None) -> dict[str, Any]:
        """Evaluate (unless stopped or failed), write ``policy/`` (and ``adapter/``),
        ``val_generations.json``; return the summary."""
        if self.learner is None:
            raise RlinfError("the run ended before its learner started")
        d, tcfg, rcfg, dcfg = self.driver, self.run.train, self.run.runner, self.run.data
        val = self.val_set.examples
        after: dict[str, Any] = {"val_loss": None, "exact_match": None, "outputs": []}
        if not interrupted and error is None:
            res = self.learner.train("after", evaluate="generate")
            self.eval_s += float(res["eval_s"])
            after = {"val_loss": _num(res["val_loss"]), "exact_match": res.get("exact_match")}
            after["outputs"] = list(res.get("outputs", []))
        lora = bool(self.learner.policy()["lora"])
        before = self.before
        if self.gen_set and after["outputs"]:
            _write_json(
                d.run_dir / "val_generations.json",
                [
                    {"source": e.source, "target": e.response, "before": b, "after": a}
                    for e, b, a in zip(self.gen_set, before["outputs"], after["outputs"], strict=True)
                ],
            )
        seconds = self.seconds()
        train_s = d.rec.wall_s
        if val and after["val_loss"] is not None:
            text = f"sft: val loss {before['val_loss']:.4f} -> {after['val_loss']:.4f}"
            if before["exact_match"] is not None:
                text += f", exact match {before['exact_match']:.3f} -> {after['exact_match']:.3f}"
        else:
            last = "nan" if self.last_loss is None else f"{self.last_loss:.4f}"
            text = f"sft: train loss {last}" + (" (no data.val_files)" if not val else " (stopped)")
        text += f" in {d.steps} steps, {seconds:.0f}s; policy: {d.run_dir / 'policy'}"
        n = self.n
        return {
            "algorithm": "sft",
            "command": self.flow.command,
            "model": str(self.folder),
            "lora": lora,
            "val_loss_before": before["val_loss"],
            "val_loss_after": after["val_loss"],
            "val_tokens": before["val_tokens"],
            "val_exact_match_before": before["exact_match"],
            "val_exact_match_after": after["exact_match"],
            "val_generate": len(self.gen_set),
            "train_loss_last": _num(self.last_loss),
            "steps": d.steps,
            "steps_planned": self.steps_planned,
            "stopped_at_exact_match": self.stopped_at,
            "interrupted": interrupted,
            "epochs": round(min(self.pos, self.budget or self.pos) / max(n, 1), 4),
            "batch_size": tcfg.batch_size,
            "tokens": self.tokens_seen,
            "train_examples": n,
            "val_examples": len(val),
            "rows": {"train": self.train_set.rows, "val": self.val_set.rows},
            "filtered": {"train": self.train_set.filtered, "val": self.val_set.filtered},
            "filter_reasons": {"train": self.train_set.filter_reasons, "val": self.val_set.filter_reasons},
            "max_length": self.max_length,
            "seconds": round(seconds, 3),
            "train_seconds": round(train_s, 3),
            "eval_seconds": round(self.eval_s, 3),
            "tokens_per_s": round(self.tokens_seen / max(train_s, 1e-9), 1),
            "trainable_params": self.params[0],
            "total_params": self.params[1],
            "seeds": {"runner.seed": rcfg.seed, "data.seed": dcfg.seed},
            "device": str(sft_device(rcfg.device)),
            "torch_threads": rcfg.torch_threads,
            "policy": "policy",
            "adapter": "adapter" if lora else None,
            "summary_text": text,
        }

    def model(self) -> Any:
        """The trained model, when the learner is in this process (``None`` otherwise)."""
        return getattr(self.learner, "model", None)


def _num(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 6)


def _write_json(path: Path, data: Any) -> None:
    import json

    from rlinf_core.io import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def run_sft(
    run: SFTRunConfig,
    run_dir: Path,
    *,
    say: Callable[[str], None],
    resume: bool,
    command: str | None,
    progress: Callable[[dict[str, Any]], None] | None,
    scheduler: Any = None,
) -> tuple[dict[str, Any], Any]:
    """Run the ``sft`` flow with the one driver (``scheduler=None``: in this process); the
    ``runner.loggers`` other than csv get every row, ``progress`` too (with ``total_steps``).
    Returns the summary and the trained model (``None`` when placed)."""
    from rlinf_algos.rundir import make_sinks
    from rlinf_algos.runtime.driver import Driver

    rcfg = run.runner
    sinks = make_sinks([n for n in rcfg.loggers if n != "csv"], run_dir, run.model_dump(mode="json"))
    holder: dict[str, Any] = {}

    def on_row(row: dict[str, Any]) -> None:
        sinks.add(row)
        if progress is not None:
            progress({**row, "total_steps": holder["driver"].flow_run.steps_planned})

    driver = Driver(SFTFlow(run, command), scheduler, run_dir, resume=resume, progress=on_row, say=say)
    holder["driver"] = driver
    try:
        summary = driver.run()
    finally:
        sinks.close()
    return summary, driver.flow_run.model()

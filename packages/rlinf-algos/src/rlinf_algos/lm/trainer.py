"""The in-process GRPO loop over the four components, and held-out evaluation.

:func:`train_lm` runs, in one process and in order: the supervised warm start, an evaluation of
the warm-started policy on the held-out set, ``algorithm.iterations`` GRPO iterations, and a
final evaluation. One iteration is the macro flow a distributed runner spreads over workers::

    problems --agent + RolloutWorker.generate--> episodes (token sequences)     "generate"
    final responses --RewardWorker.compute--> rewards                          "reward"
    sequences --ReferenceWorker.compute_log_probs--> ref log-probs             "reference"
    batch --ActorWorker.update--> new weights --RolloutWorker.set_weights      "update", "sync"

The run directory gets ``metrics.jsonl`` and ``metrics.csv`` (one row per iteration: reward,
response length, KL, clip fraction, bytes per weight publish, the seconds of each phase),
``base_model/`` (when ``model.init`` built it), ``warm_start/`` (the warm start's ``rlinf sft``
run: its data, ``config.yaml`` and model folder ``policy/``: :mod:`~rlinf_algos.lm.sft`),
``policy/`` (a model folder ``from_pretrained`` loads, merged when LoRA), ``adapter/`` (the peft adapter, with LoRA),
``checkpoints/iter_N/`` when ``runner.checkpoint_interval`` is set,
``eval_before.json``/``eval_after.json`` (per-problem outcomes) and ``summary.json``
(``accuracy_before``/``_after``, ``val_score_before``/``_after``, timings). Every folder and
file is written beside its place and renamed into it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.agents import EpisodeBatch, HierarchicalAgent, SingleAgent, episode_metrics, make_agent
from rlinf_algos.lm.checkpoint import (
    DeferredStop,
    load_lm_checkpoint,
    rng_state,
    save_lm_checkpoint,
    set_rng_state,
)
from rlinf_algos.lm.config import LMRunConfig, resolved_lm_config
from rlinf_algos.lm.engines import make_rollout
from rlinf_algos.lm.folder import context_length
from rlinf_algos.lm.reward import RewardWorker
from rlinf_algos.lm.sft import warm_start
from rlinf_algos.lm.task import max_response_tokens
from rlinf_algos.lm.tasks import is_arith, make_task, task_tokenizer
from rlinf_algos.lm.tokens import ARITH_MARKERS, LMTokenizer
from rlinf_algos.lm.workers import ReferenceWorker, make_actor, pack_batch
from rlinf_core.io import atomic_write_text
from rlinf_core.rollout import RolloutEngine

__all__ = [
    "LocalComponents",
    "ascii_curve",
    "evaluate",
    "evaluate_components",
    "grpo_loop",
    "max_response_tokens",
    "plot_accuracy",
    "policy_to_train",
    "resolve_model",
    "train_lm",
]

PHASES = ("generate", "reward", "reference", "update", "sync")


def evaluate(
    agent: SingleAgent | HierarchicalAgent,
    rollout: RolloutEngine,
    reward: RewardWorker,
    problems: Sequence[Any],
    temperature: float = 0.0,
    chunk: int = 256,
) -> dict[str, Any]:
    """Exact-match accuracy of the rollout engine's policy on ``problems`` (one episode each,
    greedy at ``temperature=0``). Returns ``accuracy``, ``well_formed`` (fractions) and
    per-problem ``outcomes``."""

    def gen(prompts: list[list[int]], n: int, stop: Sequence[int]) -> list[list[int]]:
        return rollout.generate(prompts, n, stop, temperature=temperature)

    correct: list[bool] = []
    formed: list[bool] = []
    scores: list[float] = []
    for i in range(0, len(problems), chunk):
        eps = agent.run(problems[i : i + chunk], 1, gen)
        r = reward.compute({"response_ids": eps.final_responses, "answers": eps.answers})
        correct += [bool(c) for c in r["correct"]]
        formed += [bool(w) for w in r["well_formed"]]
        scores += [float(x) for x in r["rewards"]]
    return _accuracy_report(
        agent.task, problems, {"correct": correct, "well_formed": formed, "rewards": scores}
    )


def _accuracy_report(task: Any, problems: Sequence[Any], r: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """``accuracy`` (reward 1), ``score`` (mean reward), ``well_formed`` (fractions of
    ``problems``) and per-problem ``outcomes``."""
    n = max(len(problems), 1)
    return {
        "accuracy": sum(bool(c) for c in r["correct"]) / n,
        "score": sum(float(x) for x in r["rewards"]) / n,
        "well_formed": sum(bool(w) for w in r["well_formed"]) / n,
        "outcomes": [
            {**task.describe(p), "correct": bool(c), "reward": float(x)}
            for p, c, x in zip(problems, r["correct"], r["rewards"], strict=True)
        ],
    }


def ascii_curve(
    values: Sequence[float], width: int = 60, height: int = 8, lo: float = 0.0, hi: float = 1.0
) -> str:
    """A small text plot of ``values`` (resampled to ``width`` columns) between ``lo`` and ``hi``."""
    if not values:
        return "(no data)"
    cols = [
        values[min(len(values) - 1, int(i * len(values) / width))] for i in range(min(width, len(values)))
    ]
    rows = []
    for h in range(height, 0, -1):
        level = lo + (hi - lo) * (h - 0.5) / height
        label = f"{lo + (hi - lo) * h / height:5.2f} |"
        rows.append(label + "".join("#" if v >= level else " " for v in cols))
    rows.append("      +" + "-" * len(cols))
    return "\n".join(rows)


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2))


class LocalComponents:
    """The rollout, reward, reference and actor components (and the agent) in this process:
    what ``runner.scheduler: local`` runs. :class:`rlinf_algos.lm.distributed.RemoteComponents`
    is the same interface over placed workers.

    Args:
        run: the validated sections (``model.path`` set: see :func:`resolve_model`).
        tok: the tokenizer.
        model: the warm-started policy (the actor trains it in place).
    """

    def __init__(self, run: LMRunConfig, tok: LMTokenizer, model: Any, task: Any) -> None:
        alg, rcfg = run.algorithm, run.runner
        self.tok = tok
        self.task = task
        self.agent = make_agent(
            task, tok, task.max_new_tokens(), run.task.max_calls, context_length(run.model)
        )
        self.rollout = make_rollout(run, seed=rcfg.seed, pad_id=tok.pad_id)
        self.reward = RewardWorker(task)
        self.actor = make_actor(model, run)
        weights, version = self.actor.get_weights()
        self.rollout.set_weights(weights, version)
        self.reference = None
        if alg.kl_coef > 0:
            # with LoRA the reference is the actor's own base weights (adapter disabled)
            self.reference = (
                ReferenceWorker(model=model, temperature=alg.temperature)
                if hf.is_lora(model)
                else ReferenceWorker(run.model, weights, temperature=alg.temperature)
            )
        self.placement = {"everything": "in the rlinf process (runner.scheduler: local)"}

    def episodes(
        self, problems: Sequence[Any], group_size: int, temperature: float | None = None
    ) -> EpisodeBatch:
        """``group_size`` episodes of every problem, sampled by the rollout worker."""

        def gen(prompts: list[list[int]], n: int, stop: Sequence[int]) -> list[list[int]]:
            return self.rollout.generate(prompts, n, stop, temperature=temperature)

        return self.agent.run(problems, group_size, gen)

    def iterate(self, problems: Sequence[Any], group_size: int) -> dict[str, Any]:
        """One GRPO iteration on ``problems``: generate, reward, reference, update, sync.
        Returns ``rewards``/``correct``/``well_formed`` (per episode), ``sequences``,
        ``generated_tokens``, the actor's ``stats`` and the seconds of each ``phase``."""
        phase: dict[str, float] = {}
        tokens0 = self.rollout.tokens
        t = time.perf_counter()
        eps = self.episodes(problems, group_size)
        phase["generate"] = time.perf_counter() - t
        t = time.perf_counter()
        r = self.reward.compute({"response_ids": eps.final_responses, "answers": eps.answers})
        phase["reward"] = time.perf_counter() - t
        batch = pack_batch(eps.sequences, eps.loss_masks, self.tok.pad_id)
        batch["episode_index"] = torch.tensor(eps.episode_index, dtype=torch.long)
        batch["rewards"] = torch.as_tensor(r["rewards"], dtype=torch.float32)
        t = time.perf_counter()
        if self.reference is not None:
            batch.update(self.reference.compute_log_probs(batch))
        phase["reference"] = time.perf_counter() - t
        t = time.perf_counter()
        stats = self.actor.update(batch)
        phase["update"] = time.perf_counter() - t
        t = time.perf_counter()
        weights, version = self.actor.get_weights()
        self.rollout.set_weights(weights, version)
        phase["sync"] = time.perf_counter() - t
        return {
            "rewards": r["rewards"],
            "correct": r["correct"],
            "well_formed": r["well_formed"],
            "sequences": len(eps.sequences),
            "generated_tokens": self.rollout.tokens - tokens0,
            "stats": stats,
            "phase": phase,
            **({"reward_failures": int(r["failures"])} if "failures" in r else {}),
            "agent_metrics": episode_metrics(eps, r["correct"]),  # tool-calling episodes' figures
        }

    def evaluate(self, problems: Sequence[Any], temperature: float = 0.0) -> dict[str, list[Any]]:
        """One episode per problem at ``temperature``: per problem ``correct``, ``well_formed``
        and ``rewards``."""
        out: dict[str, list[Any]] = {"correct": [], "well_formed": [], "rewards": []}
        for i in range(0, len(problems), 256):
            eps = self.episodes(problems[i : i + 256], 1, temperature)
            r = self.reward.compute({"response_ids": eps.final_responses, "answers": eps.answers})
            out["correct"] += [bool(c) for c in r["correct"]]
            out["well_formed"] += [bool(w) for w in r["well_formed"]]
            out["rewards"] += [float(x) for x in r["rewards"]]
        return out

    def policy(self) -> Any:
        return self.actor.model

    def publish_bytes(self) -> int:
        return self.actor.publish_bytes

    def state(self) -> dict[str, Any]:
        """The components' part of a checkpoint: the actor's state and the rollout engine's
        sampling generator (an engine without a torch ``generator`` keeps none)."""
        out: dict[str, Any] = {"actor": self.actor.state_dict()}
        gen = getattr(self.rollout, "generator", None)
        if isinstance(gen, torch.Generator):
            out["rollout"] = {"generator": gen.get_state()}
        return out

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state`: the actor's, then its weights to the rollout engine."""
        self.actor.load_state_dict(dict(state["actor"]))
        weights, version = self.actor.get_weights()
        self.rollout.set_weights(weights, version)
        gen = getattr(self.rollout, "generator", None)
        if isinstance(gen, torch.Generator) and "rollout" in state:
            gen.set_state(state["rollout"]["generator"])

    def close(self) -> None:
        pass


def evaluate_components(comps: Any, problems: Sequence[Any], temperature: float = 0.0) -> dict[str, Any]:
    """Accuracy and mean reward on ``problems`` through ``comps`` (one episode each, greedy at
    ``temperature=0``): ``accuracy``, ``score``, ``well_formed`` and per-problem ``outcomes``."""
    r = comps.evaluate(problems, temperature)
    return _accuracy_report(comps.task, problems, r)


def resolve_model(run: LMRunConfig, run_dir: Path, log: Callable[[str], None] | None = None) -> LMRunConfig:
    """``run`` with ``model.path`` set to the folder every component loads like a user's:

    - a ``model.init`` is built (seeded by ``runner.seed``) into ``RUN_DIR/base_model``;
    - a user's folder for the arithmetic task whose tokenizer lacks the task's markers
      (``<step>``, ``<ans>``, ``<call>``, ``<ret>``) is copied there with them added as special
      tokens (:func:`~rlinf_algos.lm.hf.add_tokens_folder`), so any causal LM runs the task in
      every mode, multi-agent included;
    - otherwise ``model.path`` is used as it is."""
    if run.model.init is None:
        if not is_arith(run):
            return run
        added = hf.add_tokens_folder(run.model, run_dir / "base_model", ARITH_MARKERS, seed=run.runner.seed)
        if not added:
            return run
        if log is not None:
            log(
                f"model.path {run.model.path}: added the task's tokens {' '.join(added)} to its "
                f"tokenizer; training from the copy in {run_dir / 'base_model'}"
            )
        return run.model_copy(
            update={"model": run.model.model_copy(update={"path": str(run_dir / "base_model")})}
        )
    corpus = None
    if run.data is not None:
        from rlinf_algos.lm.data import load_dataset

        plain = run.data.model_copy(update={"apply_chat_template": False, "max_prompt_length": None})
        corpus = [t for s in load_dataset(plain, "train") for t in (s.prompt_text, s.answer)]
    folder = hf.new_model_folder(run_dir / "base_model", run.model.init, seed=run.runner.seed, corpus=corpus)
    model = run.model.model_copy(update={"path": str(folder), "init": None})
    return run.model_copy(update={"model": model})


def policy_to_train(run: LMRunConfig) -> tuple[Any, LMTokenizer]:
    """The model folder ``run.model`` (the warm-started one, see :func:`warm_start`) and its
    tokenizer, loaded for training; torch and ``random`` are seeded from ``runner.seed`` first."""
    torch.manual_seed(run.runner.seed)
    random.seed(run.runner.seed)
    return hf.load_causal_lm(run.model), task_tokenizer(run)


def prepare_models(
    run: LMRunConfig, run_dir: Path, say: Callable[[str], None], state: Mapping[str, Any] | None
) -> tuple[LMRunConfig, LMRunConfig, dict[str, Any]]:
    """``(run with model.path resolved, run with the policy's folder, warm-start stats)``: a new
    run builds its base model and runs the warm start (:func:`resolve_model`,
    :func:`~rlinf_algos.lm.sft.warm_start`); a resumed one (``state``: its checkpoint) reuses
    the ``base_model/`` and ``warm_start/policy/`` folders the run wrote, so the reference and
    the tokenizer are the ones it trained with."""
    if state is None:
        run = resolve_model(run, run_dir, say)
        policy_run, sft_stats = warm_start(run, run_dir, say)
        return run, policy_run, sft_stats
    if (run_dir / "base_model" / "config.json").is_file():
        model = run.model.model_copy(update={"path": str(run_dir / "base_model"), "init": None})
        run = run.model_copy(update={"model": model})
    elif run.model.init is not None:
        run = resolve_model(run, run_dir, say)
    policy_run = run
    folder = run_dir / "warm_start" / "policy"
    if folder.is_dir() and int(state["loop"]["sft_stats"].get("steps") or 0) > 0:
        model = run.model.model_copy(update={"path": str(folder), "init": None})
        policy_run = run.model_copy(update={"model": model})
    return run, policy_run, dict(state["loop"]["sft_stats"])


def train_lm(
    run: LMRunConfig,
    run_dir: str | Path,
    log: Callable[[str], None] | None = print,
    progress: Callable[[dict[str, Any]], None] | None = None,
    cluster: Mapping[str, Any] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Warm start, evaluate, GRPO, evaluate, all in this process; write the run directory;
    return the summary. ``progress`` is called with every metrics row (``step`` = iteration);
    ``cluster`` (the YAML section, for ``config.yaml``) is only recorded. ``resume``: continue
    from the newest checkpoint of ``run_dir`` (:mod:`rlinf_algos.lm.checkpoint`)."""
    say = log or (lambda _msg: None)
    torch.set_num_threads(run.runner.torch_threads)
    t_start = time.perf_counter()
    cpu_start = time.process_time()
    run_dir = Path(run_dir)
    state = _resume_state(run, run_dir, say) if resume else None
    config_run = run
    run, policy_run, sft_stats = prepare_models(run, run_dir, say, state)
    model, tok = policy_to_train(policy_run)
    comps = LocalComponents(
        policy_run, tok, model, make_task(policy_run, tok, reward_log=run_dir / "logs" / "reward-local.log")
    )
    return grpo_loop(
        run,
        run_dir,
        comps,
        tok,
        sft_stats,
        say,
        progress=progress,
        t_start=t_start,
        cpu_s=lambda: time.process_time() - cpu_start,
        cluster=cluster,
        scheduler="local",
        config_run=config_run,
        resume_state=state,
    )


def _resume_state(run: LMRunConfig, run_dir: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """The newest checkpoint of ``run_dir`` that loads (damaged ones skipped with a warning)."""
    folder, state = load_lm_checkpoint(run_dir, run.algorithm.name)
    for skipped in state.get("skipped_checkpoints", []):
        say(f"warning: skipped the damaged checkpoint {skipped}")
    say(f"resuming from {folder} (iteration {state['loop']['iteration']})")
    state["folder"] = str(folder)
    return state


def _write_rows(run_dir: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """``metrics.csv`` of the rows so far: ``step`` (the iteration) first, then every key."""
    if not rows:
        return
    keys = ["step", *dict.fromkeys(k for row in rows for k in row)]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows({"step": row["iteration"], **row} for row in rows)
    atomic_write_text(run_dir / "metrics.csv", buf.getvalue())


def grpo_loop(
    run: LMRunConfig,
    run_dir: Path,
    comps: Any,
    tok: LMTokenizer,
    sft_stats: dict[str, Any],
    say: Callable[[str], None],
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
    t_start: float,
    cpu_s: Callable[[], float],
    cluster: Mapping[str, Any] | None = None,
    scheduler: str = "local",
    config_run: LMRunConfig | None = None,
    resume_state: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate the warm-started policy, run ``algorithm.iterations`` GRPO iterations through
    ``comps`` (:class:`LocalComponents` or the distributed runner's), evaluate again, write
    the run directory (``config.yaml``, ``metrics.csv``/``.jsonl``, ``summary.json``,
    ``accuracy.png``, ``policy/``, ``adapter/`` with LoRA, ``checkpoints/step_<n>/``...) and
    return the summary.

    ``config_run``: the sections as the user gave them (``config.yaml``; default ``run``);
    ``resume_state``: a checkpoint to continue from (its iterations are not run again).
    SIGTERM or Ctrl-C during the iterations ends the one in flight, writes a checkpoint,
    ``metrics.csv``, ``policy/`` and ``summary.json`` and raises
    :class:`~rlinf_algos.runtime.training.TrainingInterrupted`."""
    alg, rcfg = run.algorithm, run.runner
    task = comps.task
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_config(run_dir, config_run or run, cluster)
    heldout = task.heldout()
    sampler = task.sampler(rcfg.seed + 1000)
    model = comps.policy()
    trainable, total = hf.parameter_counts(model)
    say(
        f"task {task.mode}: {total:,} parameters ({trainable:,} trainable), "
        f"max {task.max_new_tokens()} new tokens per turn, held-out set of {len(heldout)}"
    )
    report = task.data_report() if hasattr(task, "data_report") else None
    for split, r in (report or {}).items():
        if r["filtered"]:
            why = "; ".join(f"{n} {reason}" for reason, n in r["filter_reasons"].items())
            say(f"data {split}: left out {r['filtered']} of {r['rows']} prompts ({why})")
    tok_dir = Path(run.model.path or "")

    if resume_state is None:
        t_eval = time.perf_counter()
        before = evaluate_components(comps, heldout, rcfg.eval_temperature)
        eval_s = time.perf_counter() - t_eval
        _write_json(run_dir / "eval_before.json", before)
        before = {k: before[k] for k in ("accuracy", "score", "well_formed")}
        evals: list[dict[str, Any]] = [{"iteration": 0, "accuracy": before["accuracy"]}]
        rows: list[dict[str, Any]] = []
        wall0 = grpo0 = 0.0
        resumed_from = None
    else:
        loop = resume_state["loop"]
        comps.load_state(resume_state)
        sampler.load_state(resume_state["sampler"])
        before, evals, rows = dict(loop["before"]), list(loop["evals"]), [dict(r) for r in loop["rows"]]
        eval_s, wall0, grpo0 = float(loop["eval_s"]), float(loop["wall_s"]), float(loop["grpo_s"])
        resumed_from = int(loop["iteration"])
        set_rng_state(resume_state["rng"])  # last: setting up consumed the global streams
    say(
        f"held-out accuracy after the warm start: {before['accuracy']:.3f} (well-formed {before['well_formed']:.3f})"
    )

    def wall() -> float:
        return wall0 + time.perf_counter() - t_start

    def grpo_seconds() -> float:
        return grpo0 + time.perf_counter() - t_grpo

    def checkpoint(it: int) -> Path:
        state = {
            "algorithm": alg.name,
            **comps.state(),
            "sampler": sampler.state(),
            "loop": {
                "iteration": it,
                "rows": rows,
                "evals": evals,
                "before": before,
                "sft_stats": sft_stats,
                "eval_s": eval_s,
                "wall_s": wall(),
                "grpo_s": grpo_seconds(),
            },
            "rng": rng_state(),
        }
        return save_lm_checkpoint(run_dir, it, state)

    # a resumed run rewrites the rows its checkpoint holds: each iteration's row exactly once
    jsonl = (run_dir / "metrics.jsonl").open("w", encoding="utf-8")
    for row in rows:
        jsonl.write(json.dumps(row) + "\n")
    jsonl.flush()
    t_grpo = time.perf_counter()
    stopped_early = False
    last_ckpt: tuple[int, Path] | None = None
    stop = DeferredStop()
    with stop:
        try:
            for it in range(len(rows) + 1, alg.iterations + 1):
                if stop.requested:
                    break
                if rcfg.time_limit_s is not None and time.perf_counter() - t_start > rcfg.time_limit_s:
                    stopped_early = True
                    say(
                        f"runner.time_limit_s={rcfg.time_limit_s} reached; stopping after {it - 1} iterations"
                    )
                    break
                problems = sampler.sample(alg.prompts_per_iter)
                res = comps.iterate(problems, alg.group_size)
                phase, st = res["phase"], res["stats"]
                gen_tokens = res["generated_tokens"]
                row: dict[str, Any] = {
                    "iteration": it,
                    "wall_s": round(wall(), 3),
                    "reward_mean": float(np.mean(res["rewards"])),
                    "train_accuracy": float(np.mean(res["correct"])),
                    "well_formed": float(np.mean(res["well_formed"])),
                    "sequences": res["sequences"],
                    "generated_tokens": gen_tokens,
                    "response_length": gen_tokens / max(len(res["rewards"]), 1),
                    "tokens_per_s": gen_tokens / max(phase["generate"], 1e-9),
                    "publish_bytes": comps.publish_bytes(),
                    **({"reward_failures": res["reward_failures"]} if "reward_failures" in res else {}),
                    **{k: round(v, 6) for k, v in st.items()},
                    **res.get("agent_metrics", {}),
                    **{f"{k}_s": round(phase[k], 4) for k in PHASES},
                }
                if rcfg.eval_interval and it % rcfg.eval_interval == 0 and it != alg.iterations:
                    acc = evaluate_components(comps, heldout, rcfg.eval_temperature)["accuracy"]
                    row["heldout_accuracy"] = acc
                    evals.append({"iteration": it, "accuracy": acc})
                rows.append(row)
                jsonl.write(json.dumps(row) + "\n")
                jsonl.flush()
                if progress is not None:
                    progress({"step": it, **row})
                if it % rcfg.log_interval == 0:
                    extra = f"  held-out {row['heldout_accuracy']:.3f}" if "heldout_accuracy" in row else ""
                    say(
                        f"iter {it:4d}  reward {row['reward_mean']:.3f}  train acc {row['train_accuracy']:.3f}  "
                        f"kl {st['kl']:.4f}  gen {phase['generate']:.2f}s ({row['tokens_per_s']:.0f} tok/s)  "
                        f"update {phase['update']:.2f}s  [{row['wall_s']:.0f}s]{extra}"
                    )
                if (rcfg.checkpoint_interval and it % rcfg.checkpoint_interval == 0) or stop.requested:
                    last_ckpt = (it, checkpoint(it))
        finally:
            jsonl.close()
        grpo_s = grpo_seconds()
        if rows and (last_ckpt is None or last_ckpt[0] != len(rows)) and len(rows) != resumed_from:
            last_ckpt = (len(rows), checkpoint(len(rows)))
        if "csv" in rcfg.loggers:
            _write_rows(run_dir, rows)
        interrupted = stop.requested
        after = None
        if not interrupted:
            after = evaluate_components(comps, heldout, rcfg.eval_temperature)
            _write_json(run_dir / "eval_after.json", after)
            evals.append({"iteration": len(rows), "accuracy": after["accuracy"]})
        hf.save_model_folder(comps.policy(), tok_dir, run_dir / "policy", run_dir / "adapter")
    total_s = wall()
    n = max(len(rows), 1)
    summary = {
        "algorithm": alg.name,
        "mode": task.mode,
        "scheduler": scheduler,
        "parameters": total,
        "trainable_parameters": trainable,
        "lora": run.model.lora is not None,
        "model_path": run.model.path,
        "publish_bytes": comps.publish_bytes(),
        "accuracy_before": before["accuracy"],
        "accuracy_after": after["accuracy"] if after else None,
        "accuracy_gain_pp": 100.0 * (after["accuracy"] - before["accuracy"]) if after else None,
        "val_score_before": before["score"],
        "val_score_after": after["score"] if after else None,
        "well_formed_before": before["well_formed"],
        "well_formed_after": after["well_formed"] if after else None,
        "eval_size": len(heldout),
        "eval_temperature": rcfg.eval_temperature,
        **({"data": report} if report is not None else {}),
        "train_temperature": alg.temperature,
        "iterations": len(rows),
        "stopped_early": stopped_early,
        "interrupted": interrupted,
        "resumed_from_iteration": resumed_from,
        "checkpoint": str(last_ckpt[1]) if last_ckpt else None,
        "sft_steps": sft_stats["steps"],
        "sft_loss": sft_stats["loss"],
        "sft_val_exact_match": sft_stats["exact_match"],
        "sft_s": round(sft_stats["seconds"], 2),
        "eval_s": round(eval_s, 2),
        "grpo_s": round(grpo_s, 2),
        "total_s": round(total_s, 2),
        "wall_s": round(total_s, 2),
        "cpu_s": round(cpu_s(), 2),
        "load_average": _load_average(),
        "tokens_per_s": sum(r["generated_tokens"] for r in rows)
        / max(sum(r["generate_s"] for r in rows), 1e-9),
        "phase_s_mean": {k: sum(r[f"{k}_s"] for r in rows) / n for k in PHASES},
        "placement": comps.placement,
        "learner_world_size": int(getattr(comps, "learner_world_size", 1)),
        "evals": evals,
        **getattr(comps, "fault_counters", {}),
        "reward_failures": max((int(r.get("reward_failures", 0)) for r in rows), default=0),
    }
    _write_json(run_dir / "summary.json", summary)
    if interrupted:
        from rlinf_algos.runtime.training import TrainingInterrupted

        say(
            f"{stop.reason}: stopped after iteration {len(rows)}; wrote a checkpoint, metrics.csv, policy/ and summary.json"
        )
        raise TrainingInterrupted(run_dir, last_ckpt[1] if last_ckpt else None)
    plot = plot_accuracy(run_dir, summary, rows)
    say("train accuracy per iteration:\n" + ascii_curve([r["train_accuracy"] for r in rows]))
    say(
        f"held-out exact-match accuracy: before {before['accuracy']:.3f} -> after {after['accuracy']:.3f} "
        f"({summary['accuracy_gain_pp']:+.1f} pp) in {total_s:.0f}s ({len(rows)} iterations)"
        + (f"; plot: {plot}" if plot else "")
    )
    return summary


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on this platform
        return None


def _write_config(run_dir: Path, run: LMRunConfig, cluster: Mapping[str, Any] | None) -> None:
    """``config.yaml``: every section as validated (defaults filled in)."""
    import yaml

    data = resolved_lm_config(run, cluster)
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(data, sort_keys=False))


def plot_accuracy(
    run_dir: Path, summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
) -> Path | None:
    """``run_dir/accuracy.png``: held-out accuracy before, during (``runner.eval_interval``) and
    after GRPO, and the training accuracy of every iteration's samples. ``None`` when matplotlib
    is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    evals = summary["evals"]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    if rows:
        ax.plot(
            [r["iteration"] for r in rows],
            [r["train_accuracy"] for r in rows],
            color="tab:gray",
            alpha=0.6,
            label=f"training samples (temperature {summary.get('train_temperature', 'rollout')}) correct",
        )
    ax.plot(
        [e["iteration"] for e in evals],
        [e["accuracy"] for e in evals],
        "o-",
        color="tab:blue",
        label=f"held-out exact match ({summary['eval_size']} problems, greedy)",
    )
    ax.axhline(summary["accuracy_before"], color="tab:red", ls="--", lw=1, label="warm start (before)")
    ax.set_title(
        f"GRPO ({summary['mode']}): {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f} "
        f"({summary['accuracy_gain_pp']:+.1f} pp) in {summary['total_s']:.0f} s"
    )
    ax.set_xlabel("GRPO iteration")
    ax.set_ylabel("exact-match accuracy")
    ax.set_ylim(0.0, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path = run_dir / "accuracy.png"
    tmp = run_dir / ".accuracy.png.tmp"
    fig.savefig(tmp, format="png")
    plt.close(fig)
    os.replace(tmp, path)
    return path

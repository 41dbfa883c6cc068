"""Language-model GRPO: rlinf (``train_lm``, ``runner.scheduler: local``) beside TRL's
``GRPOTrainer`` on the same model folder, data, reward function and settings, full fine-tuning
and LoRA, in one run.

What one run does:

1. takes the data and reward of ``examples/grpo_verl_format`` (verl's schema: two-digit sums and
   differences as chat messages, answered with a worked answer that ends ``#### N``; the training
   demonstrations are a careless teacher's that forgets a carry 60% of the time) as JSON lines,
   and its ``compute_score.py`` as a TRL-style callable, ``answer_reward(completions, answer,
   **kwargs)``: 1 for the right number, 0.1 for a well-formed wrong one;
2. builds ONE model folder with that example's ``sft.yaml`` model (Qwen2, hidden 128, 4 layers,
   a byte-level BPE tokenizer trained on the data, ChatML template) and warm start
   (``rlinf_algos.lm.finetune.train_sft``); both sides start from that folder, which has the
   teacher's slip for GRPO to remove;
3. runs, for every seed and for full fine-tuning and LoRA (r=8, alpha 16, all linear layers on
   both), each side in its own subprocess with ``OMP_NUM_THREADS=1`` and one torch thread, for the
   same number of iterations: prompts per step, group size (``num_generations``),
   ``max_new_tokens`` (``max_completion_length``), learning rate (constant, no warm-up), AdamW
   betas (0.9, 0.99), gradient clip 1.0, clip 0.2/0.28 (DAPO's clip-higher, TRL's
   ``epsilon``/``epsilon_high``), token-mean loss over the batch (TRL's ``dapo``), group-std
   scaled advantages, no KL (``beta=0``), temperature 1.0, top-p 1.0, one optimiser step per batch
   of ``prompts x group`` completions; rlinf keeps groups with equal rewards in the batch
   (``skip_uniform_groups: false``) as TRL does;
4. evaluates the policy every few iterations on the held-out prompts (greedy, the mean reward),
   with one evaluator for both sides (``rlinf_algos.lm.hf.generate`` at temperature 0, the
   completions decoded by the model folder's tokenizer, scored by the same reward function); the
   evaluation's seconds are left out of the training clock;
5. prints and records samples/s (completions per second of training), generated tokens/s,
   seconds per iteration (median), where the seconds go (generation, update, the rest) and the
   validation score at equal wall time: each side's score at the shorter side's training time
   (linear between evaluations), and the mean score over training time up to then (the area
   under the curve), per seed, with medians and the spread over seeds. With
   ``--rlinf-iterations`` above ``--iterations`` (e.g. twice), rlinf goes on training past its
   ``--iterations`` and the shorter side is TRL: both are then compared on TRL's whole run time,
   what a user with that much time would get from each.

Usage::

    uv run --group bench python benchmarks/grpo_lm_vs_trl.py            # 3 seeds, ~15 min on 2 cores
    uv run --group bench python benchmarks/grpo_lm_vs_trl.py --quick    # one seed, a smoke (~2 min)
    uv run --group bench python benchmarks/grpo_lm_vs_trl.py --rlinf-iterations 80  # at TRL's end
    uv run --group bench python benchmarks/grpo_lm_vs_trl.py --json benchmarks/results/grpo_lm_vs_trl.json

The rlinf side is ``rlinf_algos.lm.flow.train_lm`` as ``rlinf train`` runs it in process; the
benchmark only watches it: it subclasses ``LocalComponents`` to see the policy (for the
evaluations) and when the GRPO loop starts, and takes per-iteration times from the ``progress``
callback. The TRL side is ``trl.GRPOTrainer`` with a ``TrainerCallback`` for the same purpose, and
timers around its ``_generate_and_score_completions`` / ``_generate`` to split its step into
generation, scoring and update.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "grpo_lm_vs_trl.json"
SIDES = ("rlinf", "trl")
MODES = ("full", "lora")

THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "PYTHONWARNINGS": "ignore",
}

EXAMPLE = HERE.parent / "examples" / "grpo_verl_format"

REWARD_FILE = '''"""The verl-format example's reward as a TRL-style callable (rlinf loads the same file through
reward.path): examples/grpo_verl_format/compute_score.py, 1.0 for the right number after the last
####, 0.1 for a well-formed wrong one, 0 otherwise."""

import importlib.util

_spec = importlib.util.spec_from_file_location("verl_compute_score", {score_file!r})
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)


def answer_reward(completions, answer, **kwargs):
    out = []
    for c, a in zip(completions, answer):
        text = c[-1]["content"] if isinstance(c, list) else str(c)
        out.append(_module.compute_score("rlinf/arith_word", text, a))
    return out
'''


# -- settings --------------------------------------------------------------------------------------


def settings(quick: bool) -> dict[str, Any]:
    """Everything both sides share (and the warm start): the model and warm start of
    ``examples/grpo_verl_format/sft.yaml``, the GRPO settings of its ``grpo.yaml`` and
    ``grpo_lora.yaml`` (no KL here: TRL's ``beta=0`` is its fastest path)."""
    import yaml

    sft_yaml = yaml.safe_load((EXAMPLE / "sft.yaml").read_text(encoding="utf-8"))
    grpo = yaml.safe_load((EXAMPLE / "grpo.yaml").read_text(encoding="utf-8"))["algorithm"]
    lora = yaml.safe_load((EXAMPLE / "grpo_lora.yaml").read_text(encoding="utf-8"))
    train = sft_yaml["train"]
    s = {
        "train_rows": None,  # all of train.parquet
        "val_rows": None,  # all of val.parquet
        "model": dict(sft_yaml["model"]["init"]),
        "sft": {
            k: train[k] for k in ("steps", "batch_size", "lr", "warmup_steps", "min_lr_ratio", "weight_decay")
        },
        "group_size": grpo["group_size"],
        "prompts_per_iter": grpo["prompts_per_iter"],
        "max_new_tokens": grpo["max_new_tokens"],
        "iterations": grpo["iterations"],
        "rlinf_iterations": grpo["iterations"],  # --rlinf-iterations: more, to give rlinf TRL's time
        "eval_every": 5,
        "lr": {"full": grpo["lr"], "lora": lora["algorithm"]["lr"]},
        "lora": {**lora["model"]["lora"], "alpha": float(lora["model"]["lora"]["alpha"])},
        "seeds": [0, 1, 2],
    }
    if quick:
        s.update(train_rows=256, val_rows=32, iterations=4, rlinf_iterations=4, eval_every=2, seeds=[0])
        s["sft"] = {**s["sft"], "steps": 40}
    return s


# -- data ------------------------------------------------------------------------------------------


def write_data(root: Path, cfg: dict[str, Any]) -> dict[str, str]:
    """``train.jsonl`` / ``val.jsonl`` from the example's ``train.parquet`` / ``val.parquet``
    (chat-message ``prompt``, ``answer`` = ``reward_model.ground_truth``, ``response`` = the
    demonstration the warm start trains on) and ``reward.py`` under ``root``."""
    import pyarrow.parquet as pq

    files = {}
    for name, limit in (("train", cfg["train_rows"]), ("val", cfg["val_rows"])):
        rows = pq.read_table(EXAMPLE / f"{name}.parquet").to_pylist()[:limit]
        out = [
            {"prompt": r["prompt"], "answer": r["reward_model"]["ground_truth"], "response": r["response"]}
            for r in rows
        ]
        path = root / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in out), encoding="utf-8")
        files[name] = str(path)
    reward = root / "reward.py"
    reward.write_text(REWARD_FILE.format(score_file=str(EXAMPLE / "compute_score.py")), encoding="utf-8")
    files["reward"] = str(reward)
    return files


def _rows(path: str) -> int:
    return len(read_jsonl(path))


def read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_reward_fn(path: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_reward", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.answer_reward


# -- the children ----------------------------------------------------------------------------------


def child_sft(spec: dict[str, Any]) -> dict[str, Any]:
    """Build the model folder and warm-start it (``rlinf_algos.lm.finetune.train_sft``)."""
    import torch

    torch.set_num_threads(int(spec.get("threads", 1)))
    from rlinf_algos.lm.finetune import load_sft_config, train_sft

    cfg = spec["settings"]
    run = load_sft_config(
        {
            "model": {"init": cfg["model"]},
            "data": {
                "train_files": [spec["files"]["train"]],
                "val_files": [spec["files"]["val"]],
                "response_key": "response",
                "answer_key": "answer",
                "apply_chat_template": True,
                "seed": 0,
            },
            "train": {**cfg["sft"], "eval_generate": 128, "max_new_tokens": cfg["max_new_tokens"]},
            "runner": {"seed": 0, "torch_threads": int(spec.get("threads", 1)), "log_interval": 50},
        }
    )
    res = train_sft(run, spec["run_dir"], log=lambda m: print(f"  [sft] {m}", flush=True))
    return {"policy": str(Path(spec["run_dir"]) / "policy"), "summary": res.summary}


class Evaluator:
    """Greedy decoding of the held-out prompts and their mean reward: the same code for both
    sides (``rlinf_algos.lm.hf.generate`` at temperature 0; the model folder's tokenizer)."""

    def __init__(self, folder: str, files: dict[str, str], max_new_tokens: int) -> None:
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(folder)
        rows = read_jsonl(files["val"])
        self.prompts = [
            list(
                self.tok.apply_chat_template(
                    r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True
                )["input_ids"]
            )
            for r in rows
        ]
        self.answers = [r["answer"] for r in rows]
        self.reward = load_reward_fn(files["reward"])
        self.max_new_tokens = max_new_tokens
        self.seconds = 0.0

    def __call__(self, model: Any) -> dict[str, float]:
        from rlinf_algos.lm.hf import generate

        t = time.perf_counter()
        out = generate(
            model,
            self.prompts,
            self.max_new_tokens,
            [self.tok.eos_token_id],
            pad_id=self.tok.pad_token_id,
            temperature=0.0,
        )
        texts = self.tok.batch_decode(out.tokens, skip_special_tokens=True)
        scores = self.reward([[{"role": "assistant", "content": x}] for x in texts], answer=self.answers)
        self.seconds += time.perf_counter() - t
        n = max(len(scores), 1)
        return {"score": sum(scores) / n, "exact": sum(s >= 1.0 for s in scores) / n}


def rlinf_algorithm(cfg: dict[str, Any], lr: float) -> dict[str, Any]:
    """rlinf's ``algorithm`` section for the shared settings ``cfg`` (TRL's are :func:`trl_args`)."""
    return {
        "name": "grpo_lm",
        "group_size": cfg["group_size"],
        "prompts_per_iter": cfg["prompts_per_iter"],
        "iterations": cfg["rlinf_iterations"],
        "lr": lr,
        "lr_warmup_iters": 0,
        "update_epochs": 1,
        "minibatch_size": cfg["group_size"] * cfg["prompts_per_iter"],
        "kl_coef": 0.0,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": cfg["max_new_tokens"],
        "clip_low": 0.2,
        "clip_high": 0.28,
        "scale_advantages": True,
        "skip_uniform_groups": False,
        "max_grad_norm": 1.0,
    }


def child_rlinf(spec: dict[str, Any], t_process: float) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from rlinf_algos.lm.config import load_lm_sections

    cfg, mode, seed = spec["settings"], spec["mode"], spec["seed"]
    model: dict[str, Any] = {"path": spec["folder"], "dtype": "float32"}
    if mode == "lora":
        model["lora"] = cfg["lora"]
    run = load_lm_sections(
        {
            "algorithm": rlinf_algorithm(cfg, cfg["lr"][mode]),
            "model": model,
            "data": {
                "train_files": [spec["files"]["train"]],
                "val_files": [spec["files"]["val"]],
                "prompt_key": "prompt",
                "answer_key": "answer",
                "apply_chat_template": True,
                "seed": seed,
            },
            "reward": {"path": spec["files"]["reward"], "name": "answer_reward"},
            "runner": {
                "scheduler": "local",
                "seed": seed,
                "torch_threads": 1,
                "eval_interval": 0,
                "log_interval": 10_000,
            },
        }
    )
    evaluator = Evaluator(spec["folder"], spec["files"], cfg["max_new_tokens"])
    return watch_rlinf(run, spec, evaluator, t_process)


def watch_rlinf(run: Any, spec: dict[str, Any], evaluator: Any, t_process: float) -> dict[str, Any]:
    """Run ``train_lm(run)`` as ``rlinf train`` does and watch it: per-iteration times and
    counts (tool calls too, for a ``tools`` task), and ``evaluator(policy)`` every
    ``eval_every`` iterations off the training clock."""
    from rlinf_algos.lm import learner as lm_workers
    from rlinf_algos.lm import placed as lm_placed
    from rlinf_algos.lm.flow import train_lm

    cfg = spec["settings"]
    state: dict[str, Any] = {"evals": [], "iters": []}

    class Watched(lm_placed.LMPlacedRun):
        """The run's workers (in this process: ``runner.scheduler: local``) unchanged, but seen:
        the policy for the evaluations, and the end of the evaluation before the loop (when GRPO
        starts)."""

        def components(self) -> Any:
            out = super().components()
            state["comps"] = self
            return out

        def policy(self) -> Any:
            """The actor's model: with ``runner.scheduler: local`` its worker is in this process."""
            return self.groups["actor"].workers[0].body.learner.model

        async def evaluate(self, problems: Any, temperature: float = 0.0) -> Any:
            out = await super().evaluate(problems, temperature)
            if "t0" not in state:
                state["evals"].append({"iteration": 0, "train_s": 0.0, **evaluator(self.policy())})
                state["t0"] = state["mark"] = time.perf_counter()
                state["train_s"] = 0.0
            return out

    def progress(row: dict[str, Any]) -> None:
        now = time.perf_counter()
        dt = now - state["mark"]
        state["train_s"] += dt
        it = int(row["iteration"])
        state["iters"].append(
            {
                "iteration": it,
                "iter_s": dt,
                "train_s": state["train_s"],
                "samples": int(row["sequences"]),
                "generated_tokens": int(row["generated_tokens"]),
                # tools tasks: calls per episode in the row
                "tool_calls": float(row.get("tool_calls", 0.0)) * int(row["sequences"]),
                "generate_s": row["generate_s"],
                "reward_s": row["reward_s"],
                "update_s": row["update_s"] + row.get("reference_s", 0.0),
                "recompute_s": state["old_lp_s"],
                "sync_s": row["sync_s"],
                "reward_mean": row["reward_mean"],
            }
        )
        if it % cfg["eval_every"] == 0 or it in (cfg["iterations"], cfg["rlinf_iterations"]):
            state["evals"].append(
                {"iteration": it, "train_s": state["train_s"], **evaluator(state["comps"].policy())}
            )
        state["old_lp_s"] = 0.0
        state["mark"] = time.perf_counter()

    # time the actor's recomputation of the sampling policy's log-probs (part of its update)
    lp_name = "log_probs_chunked" if hasattr(lm_workers, "log_probs_chunked") else "_log_probs_chunked"
    lp_chunked = getattr(lm_workers, lp_name)

    def timed_log_probs(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        out = lp_chunked(*a, **k)
        state["old_lp_s"] += time.perf_counter() - t
        return out

    setattr(lm_workers, lp_name, timed_log_probs)
    state["old_lp_s"] = 0.0
    lm_placed.LMPlacedRun = Watched  # type: ignore[misc]
    summary = train_lm(run, spec["run_dir"], log=None, progress=progress)
    return {
        "startup_s": state.get("t0", t_process) - t_process,
        "iters": state["iters"],
        "evals": state["evals"],
        "eval_s": evaluator.seconds,
        "own_val_score": [summary["val_score_before"], summary["val_score_after"]],
        "trainable_parameters": summary["trainable_parameters"],
        "parameters": summary["parameters"],
    }


def child_trl(spec: dict[str, Any], t_process: float) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    from trl import GRPOTrainer

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    cfg, mode, seed = spec["settings"], spec["mode"], spec["seed"]
    torch.manual_seed(seed)
    dataset = Dataset.from_list(read_jsonl(spec["files"]["train"]))
    model = AutoModelForCausalLM.from_pretrained(spec["folder"], dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(spec["folder"])
    peft_config = None
    if mode == "lora":
        from peft import LoraConfig

        lc = cfg["lora"]
        peft_config = LoraConfig(
            r=lc["rank"],
            lora_alpha=lc["alpha"],
            lora_dropout=lc["dropout"],
            target_modules=lc["target_modules"],
            task_type="CAUSAL_LM",
        )
    args = trl_args(cfg, cfg["lr"][mode], spec["run_dir"], seed)
    evaluator = Evaluator(spec["folder"], spec["files"], cfg["max_new_tokens"])

    def make_trainer(callbacks: list[Any]) -> Any:
        return GRPOTrainer(
            model=model,
            reward_funcs=load_reward_fn(spec["files"]["reward"]),
            args=args,
            train_dataset=dataset,
            processing_class=tok,
            peft_config=peft_config,
            callbacks=callbacks,
        )

    return watch_trl(make_trainer, spec, evaluator, t_process)


def trl_args(cfg: dict[str, Any], lr: float, run_dir: str, seed: int, **extra: Any) -> Any:
    """TRL's ``GRPOConfig`` for the shared settings ``cfg`` (rlinf's are :func:`rlinf_algorithm`);
    ``extra``: more of its fields."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(Path(run_dir) / "trl_out"),
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=seed,
        data_seed=seed,
        max_steps=cfg["iterations"],
        per_device_train_batch_size=cfg["group_size"] * cfg["prompts_per_iter"],
        gradient_accumulation_steps=1,
        num_generations=cfg["group_size"],
        num_iterations=1,
        max_completion_length=cfg["max_new_tokens"],
        learning_rate=lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="group",
        log_completions=False,
        dataloader_num_workers=0,
        **extra,
    )


def watch_trl(make_trainer: Any, spec: dict[str, Any], evaluator: Any, t_process: float) -> dict[str, Any]:
    """Train ``make_trainer(callbacks)`` (a ``GRPOTrainer``) and watch it as :func:`watch_rlinf`
    watches rlinf: per-step times split into generation, scoring and update, sampled tokens (tool
    results left out), tool calls, and ``evaluator(model)`` every ``eval_every`` steps."""
    from transformers import TrainerCallback

    cfg = spec["settings"]
    state: dict[str, Any] = {"evals": [], "iters": [], "logs": [], "gen_s": 0.0, "score_s": 0.0}
    state["tokens"] = state["tool_calls"] = 0

    class Watch(TrainerCallback):
        def on_train_begin(self, args: Any, st: Any, control: Any, **kw: Any) -> None:
            state["t0"] = state["mark"] = time.perf_counter()
            state["train_s"] = 0.0

        def on_step_end(self, args: Any, st: Any, control: Any, **kw: Any) -> None:
            now = time.perf_counter()
            dt = now - state["mark"]
            state["train_s"] += dt
            it = int(st.global_step)
            state["iters"].append(
                {
                    "iteration": it,
                    "iter_s": dt,
                    "train_s": state["train_s"],
                    "samples": cfg["group_size"] * cfg["prompts_per_iter"],
                    "generated_tokens": state["tokens"],
                    "tool_calls": state["tool_calls"],
                    "generate_s": state["gen_s"],
                    "reward_s": state["score_s"],
                    # from the end of generate-and-score to the end of the step: the loss's
                    # forward, backward, clip, optimiser and scheduler steps
                    "update_s": now - state["gs_end"],
                    "recompute_s": 0.0,
                }
            )
            state["tokens"], state["tool_calls"], state["gen_s"], state["score_s"] = 0, 0, 0.0, 0.0
            if it % cfg["eval_every"] == 0 or it == cfg["iterations"]:
                state["evals"].append(
                    {"iteration": it, "train_s": state["train_s"], **evaluator(trainer.model)}
                )
            state["mark"] = time.perf_counter()

        def on_log(self, args: Any, st: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs:
                state["logs"].append({k: v for k, v in logs.items() if isinstance(v, int | float)})

    trainer = make_trainer([Watch()])
    # split a step: generation (tokenise, generate, decode) vs the rest of
    # _generate_and_score_completions (rewards, advantages) vs the update (forward, backward, step)
    gen, gen_and_score = trainer._generate, trainer._generate_and_score_completions

    def timed_generate(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        out = gen(*a, **k)
        state["gen_s"] += time.perf_counter() - t
        # out: prompt ids, completion ids, tool mask (None without tools: every id was sampled)
        mask = out[2] if len(out) > 2 else None
        state["tokens"] += sum(len(ids) for ids in out[1]) if mask is None else sum(sum(m) for m in mask)
        return out

    loop = getattr(trainer, "_tool_call_loop", None)

    def counted_tool_loop(*a: Any, **k: Any) -> Any:
        out = loop(*a, **k)  # type: ignore[misc]
        state["tool_calls"] += int(out[4])  # (mask, completions, ids, logprobs, calls, failures, images)
        return out

    def timed_gen_and_score(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        g0 = state["gen_s"]
        out = gen_and_score(*a, **k)
        state["gs_end"] = time.perf_counter()
        state["score_s"] += (state["gs_end"] - t) - (state["gen_s"] - g0)
        return out

    trainer._generate = timed_generate  # type: ignore[method-assign]
    trainer._generate_and_score_completions = timed_gen_and_score  # type: ignore[method-assign]
    if loop is not None:
        trainer._tool_call_loop = counted_tool_loop  # type: ignore[method-assign]
    state["evals"].append({"iteration": 0, "train_s": 0.0, **evaluator(trainer.model)})
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in trainer.model.parameters())
    trainer.train()
    return {
        "startup_s": state.get("t0", t_process) - t_process,
        "iters": state["iters"],
        "evals": state["evals"],
        "eval_s": evaluator.seconds,
        "trainable_parameters": trainable,
        "parameters": total,
        "reward_mean": [x.get("reward") for x in state["logs"] if "reward" in x],
    }


def child_main(argv: list[str]) -> None:
    t_process = time.perf_counter()
    spec = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    kind = spec["kind"]
    if kind == "sft":
        res = child_sft(spec)
    elif kind == "rlinf":
        res = child_rlinf(spec, t_process)
    else:
        res = child_trl(spec, t_process)
    out.write_text(json.dumps(res, default=str))


def run_child(
    spec: dict[str, Any], work: Path, name: str, timeout: float, script: Path | None = None
) -> dict[str, Any]:
    """Run ``script --child SPEC OUT`` (default: this file) with one thread; its result dict."""
    spec_file, out_file = work / f"{name}.spec.json", work / f"{name}.out.json"
    spec_file.write_text(json.dumps(spec))
    env = {**os.environ, **THREAD_ENV}
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(script or Path(__file__).resolve()), "--child", str(spec_file), str(out_file)],
        env=env,
        timeout=timeout,
        stdout=None if spec["kind"] == "sft" else subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if proc.returncode != 0 or not out_file.exists():
        tail = (proc.stdout or "")[-4000:]
        raise RuntimeError(f"{name} failed (exit {proc.returncode}):\n{tail}")
    res = json.loads(out_file.read_text())
    res["process_s"] = time.perf_counter() - t
    return res


# -- figures ---------------------------------------------------------------------------------------


def score_at(evals: list[dict[str, Any]], t: float) -> float:
    """The validation score at training time ``t``: linear between the evaluations around it
    (the last one's score past the end)."""
    pts = sorted((e["train_s"], e["score"]) for e in evals)
    if t <= pts[0][0]:
        return pts[0][1]
    for (t0, s0), (t1, s1) in itertools.pairwise(pts):
        if t0 <= t <= t1:
            return s0 if t1 == t0 else s0 + (s1 - s0) * (t - t0) / (t1 - t0)
    return pts[-1][1]


def mean_score(evals: list[dict[str, Any]], t: float, points: int = 512) -> float:
    """The mean of :func:`score_at` over training time ``[0, t]``: the area under the held-out
    curve over the window, which rewards getting there sooner and leans on every evaluation
    rather than the one nearest ``t`` (a task that saturates early leaves only noise there)."""
    return statistics.fmean(score_at(evals, t * i / (points - 1)) for i in range(points))


def run_figures(res: dict[str, Any], iterations: int) -> dict[str, Any]:
    """Throughput and time split of one run; ``val_at_iters``: its score after ``iterations``."""
    iters = res["iters"]
    train_s = iters[-1]["train_s"]
    samples = sum(r["samples"] for r in iters)
    tokens = sum(r["generated_tokens"] for r in iters)
    gen_s = sum(r["generate_s"] for r in iters)
    upd_s = sum(r["update_s"] for r in iters)
    rec_s = sum(r.get("recompute_s", 0.0) for r in iters)
    n = len(iters)
    return {
        "iterations": n,
        "train_s": train_s,
        "samples_per_s": samples / train_s,
        "tokens_per_s": tokens / train_s,
        "gen_tokens_per_s": tokens / max(gen_s, 1e-9),
        "s_per_iter": statistics.median(r["iter_s"] for r in iters),
        "generate_s_per_iter": gen_s / n,
        "update_s_per_iter": upd_s / n,
        "old_logprob_s_per_iter": rec_s / n,
        "other_s_per_iter": (train_s - gen_s - upd_s) / n,
        "tokens_per_completion": tokens / max(samples, 1),
        "val_start": res["evals"][0]["score"],
        "val_end": res["evals"][-1]["score"],
        # the score after the shared iteration count (both sides evaluate there)
        "val_at_iters": next(
            (e["score"] for e in res["evals"] if e["iteration"] == iterations), res["evals"][-1]["score"]
        ),
        "exact_end": res["evals"][-1]["exact"],
        "startup_s": res["startup_s"],
    }


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float], digits: int = 1) -> str:
    return f"{min(xs):.{digits}f} to {max(xs):.{digits}f}" if len(xs) > 1 else ""


def summarise(runs: dict[tuple[str, str, int], dict[str, Any]], cfg: dict[str, Any]) -> dict[str, Any]:
    """Per mode and side: medians over the seeds (and min-max), val at equal wall time, ratios."""
    rows, per_seed = [], []
    for mode in MODES:
        seeds = [s for s in cfg["seeds"] if all((mode, side, s) in runs for side in SIDES)]
        if not seeds:
            continue
        figs = {
            (side, s): run_figures(runs[(mode, side, s)], cfg["iterations"]) for side in SIDES for s in seeds
        }
        for s in seeds:
            t_eq = min(figs[(side, s)]["train_s"] for side in SIDES)
            for side in SIDES:
                f = figs[(side, s)]
                f["t_equal"] = t_eq
                f["val_equal"] = score_at(runs[(mode, side, s)]["evals"], t_eq)
                f["gain_equal"] = f["val_equal"] - f["val_start"]
                f["mean_val_equal"] = mean_score(runs[(mode, side, s)]["evals"], t_eq)
                per_seed.append(
                    {
                        "mode": mode,
                        "side": side,
                        "seed": s,
                        **{k: round(v, 4) for k, v in f.items()},
                        # (iteration, training seconds, held-out score) at every evaluation
                        "curve": [
                            [e["iteration"], round(e["train_s"], 2), round(e["score"], 4)]
                            for e in runs[(mode, side, s)]["evals"]
                        ],
                    }
                )
        for side in SIDES:
            fs = [figs[(side, s)] for s in seeds]
            other = [figs[("trl", s)] for s in seeds]
            col = {k: [f[k] for f in fs] for k in fs[0]}
            rows.append(
                {
                    "mode": mode,
                    "side": side,
                    "samples/s": round(med(col["samples_per_s"]), 1),
                    "samples/s range": spread(col["samples_per_s"]),
                    "x TRL samples/s": round(
                        med(
                            [f["samples_per_s"] / o["samples_per_s"] for f, o in zip(fs, other, strict=True)]
                        ),
                        2,
                    ),
                    "gen tokens/s": round(med(col["tokens_per_s"]), 0),
                    "tokens/s in generation": round(med(col["gen_tokens_per_s"]), 0),
                    "s/iter": round(med(col["s_per_iter"]), 3),
                    "generate s/iter": round(med(col["generate_s_per_iter"]), 3),
                    "update s/iter": round(med(col["update_s_per_iter"]), 3),
                    "of which old log-probs": round(med(col["old_logprob_s_per_iter"]), 3),
                    "other s/iter": round(med(col["other_s_per_iter"]), 3),
                    "tokens/completion": round(med(col["tokens_per_completion"]), 2),
                    "val start": round(med(col["val_start"]), 3),
                    "equal wall s": round(med(col["t_equal"]), 1),
                    "val at equal wall": round(med(col["val_equal"]), 3),
                    "val gain at equal wall": round(med(col["gain_equal"]), 3),
                    "gain range": spread(col["gain_equal"], 3),
                    "mean val to equal wall": round(med(col["mean_val_equal"]), 3),
                    "mean val range": spread(col["mean_val_equal"], 3),
                    "iterations": int(med(col["iterations"])),
                    f"val after {cfg['iterations']} iters": round(med(col["val_at_iters"]), 3),
                    "startup s": round(med(col["startup_s"]), 1),
                }
            )
    return {"rows": rows, "per_seed": per_seed}


def print_table(rows: list[dict[str, Any]], cfg: dict[str, Any]) -> None:
    cols = [
        ("mode", "mode", "{}"),
        ("side", "side", "{}"),
        ("samples/s", "samples/s", "{:.1f}"),
        ("range", "samples/s range", "{}"),
        ("xTRL", "x TRL samples/s", "{:.2f}"),
        ("tok/s", "gen tokens/s", "{:.0f}"),
        ("s/iter", "s/iter", "{:.3f}"),
        ("gen", "generate s/iter", "{:.3f}"),
        ("upd", "update s/iter", "{:.3f}"),
        ("oldlp", "of which old log-probs", "{:.3f}"),
        ("other", "other s/iter", "{:.3f}"),
        ("iters", "iterations", "{}"),
        ("val0", "val start", "{:.3f}"),
        ("T_eq s", "equal wall s", "{:.1f}"),
        ("val@T_eq", "val at equal wall", "{:.3f}"),
        ("gain@T_eq", "val gain at equal wall", "{:+.3f}"),
        ("gain range", "gain range", "{}"),
        ("mean val", "mean val to equal wall", "{:.3f}"),
        (f"val@{cfg['iterations']}it", f"val after {cfg['iterations']} iters", "{:.3f}"),
    ]
    cells = [[h for h, _, _ in cols]] + [[fmt.format(r[k]) for _, k, fmt in cols] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    for i, line in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


# -- main ------------------------------------------------------------------------------------------


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for d in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "rlinf-algos"):
        try:
            out[d] = version(d)
        except PackageNotFoundError:
            out[d] = None
    return out


def machine(load_start: tuple[float, ...], load_end: tuple[float, ...]) -> dict[str, Any]:
    """The JSON's ``machine`` block: CPUs, load averages, threads, package versions."""
    return {
        "cpus": os.cpu_count(),
        "load_at_start": [round(x, 2) for x in load_start],
        "load_at_end": [round(x, 2) for x in load_end],
        "threads": "OMP_NUM_THREADS=1, torch.set_num_threads(1), each side in its own process",
        "versions": versions(),
    }


def bench_args(description: str, default_json: Path, quick_help: str) -> argparse.ArgumentParser:
    """The options both side-by-side LM benchmarks take: --quick, --json, --no-json, --seeds,
    --iterations."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument(
        "--json", type=Path, default=None, help=f"write the figures here (default {default_json})"
    )
    ap.add_argument("--no-json", action="store_true", help="write no JSON")
    ap.add_argument("--seeds", type=str, default=None, help="comma-separated seeds (default 0,1,2)")
    ap.add_argument("--iterations", type=int, default=None, help="GRPO iterations per run")
    return ap


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        return
    ap = bench_args(__doc__.splitlines()[0], DEFAULT_JSON, "one seed, 4 iterations: a ~2-minute smoke")
    ap.add_argument(
        "--rlinf-iterations",
        type=int,
        default=None,
        help="rlinf's iterations (default: --iterations); more lets the faster side fill the slower "
        "side's training time, so 'equal wall' is taken at TRL's end",
    )
    ap.add_argument(
        "--sft-steps",
        type=int,
        default=None,
        help="warm-start SFT steps (default: sft.yaml's); fewer leave GRPO more to learn, so the "
        "two sides are compared before the task saturates",
    )
    ap.add_argument("--modes", type=str, default="full,lora", help="full,lora or one of them")
    ap.add_argument("--keep", type=Path, default=None, help="keep the data, model folders and run dirs here")
    ap.add_argument(
        "--reuse-warm-start",
        action="store_true",
        help="with --keep: reuse the warm-started folder a previous run left there (same settings)",
    )
    args = ap.parse_args()
    try:
        import trl  # noqa: F401
    except ImportError:
        sys.exit("trl is not installed: run with `uv run --group bench python benchmarks/grpo_lm_vs_trl.py`")

    t_start = time.perf_counter()
    cfg = settings(args.quick)
    if args.seeds:
        cfg["seeds"] = [int(s) for s in args.seeds.split(",")]
    if args.iterations:
        cfg["iterations"] = cfg["rlinf_iterations"] = args.iterations
    if args.rlinf_iterations:
        if args.rlinf_iterations < cfg["iterations"]:
            ap.error(f"--rlinf-iterations {args.rlinf_iterations} is below --iterations {cfg['iterations']}")
        cfg["rlinf_iterations"] = args.rlinf_iterations
    if args.sft_steps is not None:
        if args.sft_steps < 1:
            ap.error(f"--sft-steps must be at least 1, got {args.sft_steps}")
        cfg["sft"] = {**cfg["sft"], "steps": args.sft_steps}
    modes = [m for m in args.modes.split(",") if m in MODES]
    load_start = os.getloadavg()
    tmp = None
    if args.keep is not None:
        work = args.keep
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="grpo_lm_vs_trl_")
        work = Path(tmp.name)
    try:
        files = write_data(work, cfg)
        print(
            f"data: {_rows(files['train'])} training and {_rows(files['val'])} held-out prompts in {work}; "
            f"warm start ({cfg['sft']['steps']} SFT steps)...",
            flush=True,
        )
        t = time.perf_counter()
        if args.reuse_warm_start and (work / "sft.out.json").exists():
            sft = json.loads((work / "sft.out.json").read_text())
            print(f"reusing the warm start in {work / 'sft'} (--reuse-warm-start)")
        else:
            sft = run_child(
                {"kind": "sft", "settings": cfg, "files": files, "run_dir": str(work / "sft"), "threads": 2},
                work,
                "sft",
                timeout=900,
            )
            sft["seconds"] = time.perf_counter() - t
        sft_s = sft.get("seconds", time.perf_counter() - t)
        folder = sft["policy"]
        ss = sft["summary"]
        print(
            f"warm start: {sft_s:.0f}s, val loss {ss['val_loss_before']:.3f} -> {ss['val_loss_after']:.3f}, "
            f"exact match {ss['val_exact_match_after']}; model folder {folder}",
            flush=True,
        )
        runs: dict[tuple[str, str, int], dict[str, Any]] = {}
        for i, seed in enumerate(cfg["seeds"]):
            for j, mode in enumerate(modes):
                order = SIDES if (i + j) % 2 == 0 else SIDES[::-1]
                for side in order:
                    name = f"{side}_{mode}_s{seed}"
                    spec = {
                        "kind": side,
                        "mode": mode,
                        "seed": seed,
                        "settings": cfg,
                        "files": files,
                        "folder": folder,
                        "run_dir": str(work / name),
                    }
                    res = run_child(spec, work, name, timeout=1200)
                    runs[(mode, side, seed)] = res
                    f = run_figures(res, cfg["iterations"])
                    print(
                        f"{name:>16}: {f['samples_per_s']:6.1f} samples/s  {f['tokens_per_s']:6.0f} tok/s  "
                        f"{f['s_per_iter']:.3f} s/iter (gen {f['generate_s_per_iter']:.3f}, "
                        f"update {f['update_s_per_iter']:.3f})  val {f['val_start']:.3f} -> {f['val_end']:.3f} "
                        f"in {f['iterations']} iterations, {f['train_s']:.1f}s  [process {res['process_s']:.0f}s, startup {f['startup_s']:.0f}s]",
                        flush=True,
                    )
        summary = summarise(runs, cfg)
        print()
        print_table(summary["rows"], cfg)
    finally:
        if tmp is not None:
            tmp.cleanup()

    wall = time.perf_counter() - t_start
    load_end = os.getloadavg()
    print(
        f"\nload average at start {load_start[0]:.1f}, at end {load_end[0]:.1f} ({os.cpu_count()} CPUs); "
        f"took {wall:.0f} s"
    )
    if args.no_json:
        return
    path = args.json or DEFAULT_JSON
    cmd = "uv run --group bench python benchmarks/grpo_lm_vs_trl.py" + (
        " " + shlex.join(sys.argv[1:]) if sys.argv[1:] else ""
    )
    report = {
        "title": "LLM GRPO: rlinf train_lm beside TRL GRPOTrainer, same model folder, data, reward and settings"
        + (" (--quick)" if args.quick else ""),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, load_end),
        "conditions": (
            f"Qwen2 d{cfg['model']['hidden_size']} x {cfg['model']['num_layers']} layers, BPE vocab "
            f"{cfg['model']['vocab_size']}, warm-started ({cfg['sft']['steps']} SFT steps); "
            f"{cfg['prompts_per_iter']} prompts x group {cfg['group_size']} = "
            f"{cfg['prompts_per_iter'] * cfg['group_size']} completions per iteration, max_new_tokens "
            f"{cfg['max_new_tokens']}, {cfg['iterations']} iterations (rlinf {cfg['rlinf_iterations']}), lr {cfg['lr']['full']} (full) / "
            f"{cfg['lr']['lora']} (LoRA r={cfg['lora']['rank']}), no KL; validation: "
            f"{_rows(files['val'])} held-out prompts, greedy, mean reward (compute_score.py), every "
            f"{cfg['eval_every']} iterations (not timed); 2-core machine shared with other jobs"
        ),
        "command": cmd,
        "seeds": cfg["seeds"],
        "figures": summary["rows"],
        "source": "benchmarks/grpo_lm_vs_trl.py",
        "notes": [
            "samples/s: completions per second of training (evaluations excluded); gen tokens/s: generated "
            "tokens per second of training; tokens/s in generation: per second of the generation phase alone.",
            "val at equal wall: each side's held-out score at the shorter side's training time of that seed "
            "(linear between evaluations); gain: that minus the warm start's score. Medians over seeds, "
            "ranges min-max. With --rlinf-iterations above --iterations, rlinf trains past its "
            "--iterations time so that the shorter side is TRL and both are compared at TRL's end; "
            "'val after N iters' is each side's score after the shared N iterations; 'mean val to equal "
            "wall' is the mean of the held-out score over training time 0 to equal wall (the area under "
            "the curve over that window); per_seed[].curve "
            "holds every evaluation as [iteration, training s, score].",
            "TRL's step is split with timers around GRPOTrainer._generate (generation) and the rest of "
            "_generate_and_score_completions (other); update = the rest of the step. rlinf's phases are its "
            "own metrics.jsonl (update includes its recomputation of the old log-probs).",
            "rlinf runs with its defaults, algorithm.share_prefix included: the update's forward runs each "
            "prompt once and the group's completions on its key/value cache (the same log-probs and "
            "gradients as the packed rows TRL runs; rlinf_algos.lm.prefix).",
            "LoRA: rlinf takes grpo_lora.yaml's model.lora (merged_forward: true, the update's adapted layers "
            "run on W0 + scale B A) and its hf rollout samples from merged weights (its default); TRL runs "
            "peft's adapter forward, which it offers alone. Same adapters, gradients to float rounding "
            "(rlinf_algos.models.lora).",
        ],
        "settings": cfg,
        "warm_start": {
            "seconds": round(sft_s, 1),
            **{
                k: ss.get(k)
                for k in (
                    "val_loss_before",
                    "val_loss_after",
                    "val_exact_match_before",
                    "val_exact_match_after",
                    "steps",
                )
            },
        },
        "per_seed": summary["per_seed"],
        "wall_s": round(wall, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

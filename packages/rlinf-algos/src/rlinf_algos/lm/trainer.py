"""The language-model domain's models and evaluation: the model folder a run trains
(:func:`resolve_model`, :func:`prepare_models`: a built base model, the warm start), the policy
loaded for training (:func:`policy_to_train`), held-out evaluation (:func:`evaluate`,
:func:`evaluate_components`) and the accuracy plot. :func:`~rlinf_algos.lm.flow.train_lm` runs a
language-model run with the one driver.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.agents import HierarchicalAgent, SingleAgent
from rlinf_algos.lm.arith import max_response_tokens
from rlinf_algos.lm.config import LMRunConfig
from rlinf_algos.lm.model_type import load_lm_model
from rlinf_algos.lm.reward import Verifier
from rlinf_algos.lm.sft import warm_start
from rlinf_algos.lm.tasks import is_arith, task_tokenizer
from rlinf_algos.lm.tokens import ARITH_MARKERS, LMTokenizer
from rlinf_core.io import atomic_write_text
from rlinf_core.rollout import RolloutEngine

__all__ = [
    "ascii_curve",
    "evaluate",
    "evaluate_components",
    "max_response_tokens",
    "plot_accuracy",
    "policy_to_train",
    "prepare_models",
    "resolve_model",
]


def evaluate(
    agent: SingleAgent | HierarchicalAgent,
    rollout: RolloutEngine,
    reward: Verifier,
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


async def evaluate_components(
    comps: Any, problems: Sequence[Any], temperature: float = 0.0
) -> dict[str, Any]:
    """Accuracy and mean reward on ``problems`` through ``comps`` (one episode each, greedy at
    ``temperature=0``): ``accuracy``, ``score``, ``well_formed`` and per-problem ``outcomes``
    (``comps.evaluate`` may be a coroutine: a placed run's)."""
    r = comps.evaluate(problems, temperature)
    if hasattr(r, "__await__"):
        r = await r
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


def policy_to_train(run: LMRunConfig, meta: bool = False) -> tuple[Any, LMTokenizer]:
    """The model folder ``run.model`` (the warm-started one, see :func:`warm_start`) and its
    tokenizer, loaded for training; torch and ``random`` are seeded from ``runner.seed`` first.
    ``meta``: the model built on the meta device, its weights not read (a sharded learner's
    skeleton, :meth:`~rlinf_algos.parallel.DataParallel.wrap_loaded`)."""
    torch.manual_seed(run.runner.seed)
    random.seed(run.runner.seed)
    return load_lm_model(run.model, meta=meta), task_tokenizer(run)


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

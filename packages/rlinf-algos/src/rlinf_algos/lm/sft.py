"""The arithmetic examples' supervised warm start, run through ``rlinf sft``.

A teacher's solutions (:func:`~rlinf_algos.lm.arith.sft_example`: a perfect teacher, or a careless
one with ``sft.carry_drop`` / ``sft.answer_slip``) become prompt-response rows of a JSON-lines
file, and :func:`~rlinf_algos.lm.finetune.train_sft` (what ``rlinf sft`` runs) fine-tunes the
model folder on them. ``RUN_DIR/warm_start/`` is then an ordinary ``rlinf sft`` run directory:

- ``data/train.jsonl``: the demonstrations, ``sft.batch_size`` problems per step, in the order
  they are trained on; ``data/val.jsonl``: a perfect teacher's solutions of ``sft.check_size``
  problems drawn apart from the training and held-out problems;
- ``config.yaml``: the ``rlinf sft`` configuration (``rlinf sft RUN_DIR/warm_start/config.yaml``
  repeats the warm start), ``metrics.csv``, ``summary.json`` and ``val_generations.json``;
- ``policy/``: the warm-started model folder, which GRPO starts from.

A stop (SIGTERM, Ctrl-C) during the warm start writes its checkpoint (the run itself has none
yet); ``rlinf train ... --resume RUN_DIR`` then starts the run again in place and the warm start
continues from that checkpoint (:func:`warm_start_left`), keeping the steps it trained; a finished
warm start whose run stopped before its first checkpoint is used as it is.

One row is one trained turn: its prompt is everything the policy has seen at that point and its
response the turn (with ``data.append_eos: false``, as each turn already ends with its own end:
``<eos>``, or ``<ret>`` where a lead hands over to its subagents). A multi-agent problem gives
the lead's two turns (the second after the orchestrator's ``combine_prompt``, which is never
trained on) and one row per subagent chain. The task's ``<bos>``/``<eos>`` marks are written
as the model folder's own bos and eos tokens (:meth:`~rlinf_algos.lm.tokens.LMTokenizer.spell`),
so the rows mean the same to any model folder's tokenizer.

Deliberately short (``sft.steps``), so the policy GRPO starts from is sometimes right: it knows
the format and is partly right on the arithmetic.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlinf_algos.lm.arith import Problem, ProblemSampler, sft_example, step_width
from rlinf_algos.lm.config import LMRunConfig
from rlinf_algos.lm.tokens import LMTokenizer
from rlinf_algos.rundir import existing_run, latest_checkpoint

__all__ = ["NO_WARM_START", "demonstration_rows", "warm_start", "warm_start_config"]

NO_WARM_START: dict[str, Any] = {"steps": 0, "seconds": 0.0, "loss": None, "exact_match": None}
"""The warm-start stats of a run without one."""


def demonstration_rows(
    problem: Problem,
    mode: str,
    width: int,
    tok: LMTokenizer,
    carry_drop: float = 0.0,
    rng: random.Random | None = None,
    answer_slip: float = 0.0,
    slip_scope: str = "final",
) -> list[dict[str, str]]:
    """The ``{"kind", "prompt", "response"}`` rows of one problem's demonstrations (see the
    module docstring), spelled for ``tok``'s model folder."""
    rows = []
    for kind, segments in sft_example(problem, mode, width, carry_drop, rng, answer_slip, slip_scope):
        context = ""
        for text, trained in segments:
            if trained:
                rows.append({"kind": kind, "prompt": tok.spell(context), "response": tok.spell(text)})
            context += text
    return rows


def rows_per_problem(run: LMRunConfig) -> int:
    """Rows a problem gives: the lead's two turns and a chain per group in multi-agent mode, one
    chain otherwise."""
    return 2 + run.task.num_groups if run.task.mode == "multiagent" else 1


def _write_rows(path: Path, rows: Sequence[dict[str, str]]) -> None:
    from rlinf_core.io import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def warm_start_config(run: LMRunConfig, data_dir: Path, val_rows: int) -> dict[str, Any]:
    """The ``rlinf sft`` configuration of ``run``'s warm start on the rows in ``data_dir``:
    ``sft.batch_size`` problems per step (their rows together: the file is not shuffled),
    AdamW with betas (0.9, 0.99), weight decay 0.01, cosine decay to a tenth of ``sft.lr``."""
    cfg, rcfg = run.sft, run.runner
    per = rows_per_problem(run)
    model = run.model.model_dump(mode="json")
    model["init"] = None
    target = cfg.target_accuracy
    return {
        "model": model,
        "data": {
            "train_files": [str(data_dir / "train.jsonl")],
            "val_files": [str(data_dir / "val.jsonl")],
            "prompt_key": "prompt",
            "response_key": "response",
            "apply_chat_template": False,
            "shuffle": False,
            "append_eos": False,
        },
        "train": {
            "steps": cfg.steps,
            "batch_size": cfg.batch_size * per,
            # multi-agent rows differ in length by kind: sorted and split, a micro-batch pads little
            "micro_batch_size": cfg.batch_size if per > 1 else None,
            "lr": cfg.lr,
            "warmup_steps": cfg.warmup_steps,
            "min_lr_ratio": 0.1,
            "weight_decay": 0.01,
            "adam_betas": [0.9, 0.99],
            "grad_clip": 1.0,
            "eval_generate": val_rows,
            "eval_interval": cfg.check_interval if target is not None else 0,
            "stop_at_exact_match": target,
        },
        "runner": {
            "seed": rcfg.seed,
            "torch_threads": rcfg.torch_threads,
            "log_interval": 100,
            "device": "cpu" if rcfg.device == "cpu" else "auto",
            "loggers": list(rcfg.loggers),  # the run's backends: no tensorboardX import without tensorboard
        },
    }


def _release_cuda_cache() -> None:
    """Hand the warm start's cached GPU memory back: the driver ran it, and the learner, the
    rollout and the reference (placed on the same GPU, or in this process under
    ``runner.scheduler: local``) need it. Nothing when CUDA was never initialised here."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def warm_start_left(out: Path) -> str:
    """What an earlier start of the run left of its warm start in ``out``: ``"none"``;
    ``"stopped"``: a stop (SIGTERM, Ctrl-C) ended it before its last step and it wrote a
    checkpoint on the way out, which the run's ``--resume`` (the run itself had no checkpoint yet)
    continues, keeping what it trained; ``"finished"``: it ran to its end (the run stopped later,
    before its first checkpoint), so its policy is used as it is."""
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    finished = summary is not None and not summary.get("interrupted", True) and summary.get("error") is None
    if finished and (out / "policy" / "config.json").is_file():
        return "finished"
    return "stopped" if latest_checkpoint(out) is not None else "none"


def warm_start(
    run: LMRunConfig, run_dir: Path, log: Callable[[str], None] | None = None
) -> tuple[LMRunConfig, dict[str, Any]]:
    """Run the warm start of an arithmetic run whose ``model.path`` is set (see the module
    docstring) into ``run_dir/warm_start``; return ``run`` with ``model.path`` set to the
    warm-started folder and the stats (``steps``, ``seconds``, ``loss``: the last training
    loss, ``exact_match``: the validation exact match after it, ``folder``). A run without a
    warm start (``sft.steps: 0``, or a data set's run) is returned as it is."""
    from rlinf_algos.lm.finetune import load_sft_config, train_sft
    from rlinf_algos.lm.tasks import ArithTask, is_arith, task_tokenizer

    cfg, seed = run.sft, run.runner.seed
    if cfg.steps == 0 or not is_arith(run):
        return run, dict(NO_WARM_START)
    tok = task_tokenizer(run)
    heldout = ArithTask(run, tok).heldout()
    width = step_width(run.task)
    sampler = ProblemSampler(run.task, seed=seed + 1, exclude=heldout)
    teacher = random.Random(sampler.rng.getrandbits(64))
    train = [
        row
        for _ in range(cfg.steps)
        for p in sampler.sample(cfg.batch_size)
        for row in demonstration_rows(
            p, run.task.mode, width, tok, cfg.carry_drop, teacher, cfg.answer_slip, cfg.slip_scope
        )
    ]
    checks = ProblemSampler(run.task, seed=seed + 2, exclude=heldout).sample(cfg.check_size)
    val = [row for p in checks for row in demonstration_rows(p, run.task.mode, width, tok)]
    out = Path(run_dir) / "warm_start"
    _write_rows(out / "data" / "train.jsonl", train)
    _write_rows(out / "data" / "val.jsonl", val)
    sft_run = load_sft_config(warm_start_config(run, out / "data", len(val)))
    say = log or (lambda _msg: None)
    say(f"warm start: rlinf sft on {len(train)} demonstration rows, {cfg.steps} steps -> {out / 'policy'}")
    from rlinf_algos.training import TrainingInterrupted

    left = warm_start_left(out)
    if left == "finished":
        say(f"warm start: using the finished one in {out}")
        s = json.loads((out / "summary.json").read_text())
    else:
        if left == "stopped":
            say(f"warm start: continuing the stopped one from its newest checkpoint in {out}")
        try:
            result = train_sft(
                sft_run, out, say, overwrite=left == "none" and existing_run(out) != [],
                resume=left == "stopped", command=f"rlinf sft {out / 'config.yaml'} (the warm start)",
            )  # fmt: skip
        except TrainingInterrupted:  # its checkpoint is the warm start's: the run itself has none yet
            raise TrainingInterrupted(Path(run_dir), None) from None
        s = result.summary
        del result
    _release_cuda_cache()
    say(s["summary_text"])
    stats = {
        "steps": s["steps"],
        "seconds": s["seconds"],
        "loss": s["train_loss_last"],
        "exact_match": s["val_exact_match_after"],
        "folder": str(out / "policy"),
    }
    model = run.model.model_copy(update={"path": str(out / "policy"), "init": None})
    return run.model_copy(update={"model": model}), stats

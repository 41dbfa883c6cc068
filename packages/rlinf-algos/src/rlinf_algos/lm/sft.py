"""The supervised warm start: next-token cross-entropy on generated reference solutions.

Deliberately short (``sft.steps``), so the policy GRPO starts from is sometimes right: it knows
the format and is partly right on the arithmetic.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from rlinf_algos.lm.config import SFTConfig
from rlinf_algos.lm.hf import sequence_log_probs
from rlinf_algos.lm.task import Problem, ProblemSampler, sft_example
from rlinf_algos.lm.tokens import LMTokenizer
from rlinf_algos.lm.workers import pack_batch

__all__ = ["sft_batch", "warm_start"]


def sft_batch(
    problems: Sequence[Problem],
    mode: str,
    width: int,
    tokenizer: LMTokenizer,
    carry_drop: float = 0.0,
    rng: random.Random | None = None,
    answer_slip: float = 0.0,
    slip_scope: str = "final",
) -> dict[str, Tensor]:
    """Packed ``input_ids``/``loss_mask`` of the reference solutions of ``problems`` (in
    multi-agent mode, one lead trace and one subagent chain per group for each problem);
    ``carry_drop``/``rng``: a careless teacher's solutions (:func:`~rlinf_algos.lm.task.teacher_add`)."""
    return _pack(
        [
            ex
            for p in problems
            for ex in sft_example(p, mode, width, carry_drop, rng, answer_slip, slip_scope)
        ],
        tokenizer,
    )


def _pack(
    examples: Sequence[tuple[str, list[tuple[str, bool]]]], tokenizer: LMTokenizer
) -> dict[str, Tensor]:
    """Packed ``input_ids``/``loss_mask`` of :func:`~rlinf_algos.lm.task.sft_example` output."""
    seqs: list[list[int]] = []
    masks: list[list[int]] = []
    for _kind, segments in examples:
        ids: list[int] = []
        m: list[int] = []
        for text, trained in segments:
            seg = tokenizer.encode(text)
            ids += seg
            m += [int(trained)] * len(seg)
        seqs.append(ids)
        masks.append(m)
    return pack_batch(seqs, masks, tokenizer.pad_id)


def warm_start(
    model: Any,
    tokenizer: LMTokenizer,
    mode: str,
    width: int,
    cfg: SFTConfig,
    sampler: ProblemSampler,
    log: Callable[[str], None] | None = None,
    log_every: int = 100,
    check: Callable[[Any], float] | None = None,
) -> dict[str, Any]:
    """Train ``model`` in place for ``cfg.steps`` steps of ``cfg.batch_size`` problems (AdamW,
    linear warm-up then cosine decay). With ``cfg.target_accuracy`` and a ``check`` (the
    model's accuracy on a validation draw), stop once the check reaches the target, every
    ``cfg.check_interval`` steps. Returns ``steps`` (taken), ``seconds``, the last ``loss`` and
    the last ``check_accuracy`` (or ``None``)."""
    if cfg.steps == 0:
        return {"steps": 0, "seconds": 0.0, "loss": float("nan"), "check_accuracy": None}
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.99))

    def lr_at(step: int) -> float:
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    teacher_rng = random.Random(sampler.rng.getrandbits(64))
    t0 = time.perf_counter()
    model.train()
    loss_v = float("nan")
    acc: float | None = None
    taken = 0
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        problems = sampler.sample(cfg.batch_size)
        if mode == "multiagent":
            # the lead's traces are about three times as long as the subagents' chains: two
            # buckets instead of padding every chain to the lead's length (half the compute)
            examples = [
                ex
                for p in problems
                for ex in sft_example(
                    p, mode, width, cfg.carry_drop, teacher_rng, cfg.answer_slip, cfg.slip_scope
                )
            ]
            buckets = [
                _pack([ex for ex in examples if (ex[0] == "lead") == lead], tokenizer)
                for lead in (True, False)
            ]
        else:
            buckets = [
                sft_batch(
                    problems,
                    mode,
                    width,
                    tokenizer,
                    cfg.carry_drop,
                    teacher_rng,
                    cfg.answer_slip,
                    cfg.slip_scope,
                )
            ]
        total = sum(b["loss_mask"].sum() for b in buckets).clamp(min=1.0)
        loss = (
            -sum((sequence_log_probs(model, b["input_ids"]) * b["loss_mask"]).sum() for b in buckets) / total
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        loss_v = float(loss.detach())
        taken = step + 1
        if log is not None and (taken % log_every == 0 or taken == cfg.steps):
            log(f"sft step {taken}/{cfg.steps}  loss {loss_v:.4f}  ({time.perf_counter() - t0:.0f}s)")
        if check is not None and cfg.target_accuracy is not None and taken % cfg.check_interval == 0:
            acc = check(model)
            model.train()
            if log is not None:
                log(f"sft step {taken}: validation accuracy {acc:.3f} (target {cfg.target_accuracy})")
            if acc >= cfg.target_accuracy:
                break
    model.eval()
    return {"steps": taken, "seconds": time.perf_counter() - t0, "loss": loss_v, "check_accuracy": acc}

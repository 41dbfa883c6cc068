"""GRPO maths as free functions (Shao et al. 2024, DeepSeekMath).

GRPO samples ``G`` responses (or episodes) per prompt (or initial state), scores each with an
outcome reward, and uses the reward normalised within its group as the advantage of every token
(or step) of that response: no critic. The policy loss is PPO's clipped ratio, averaged over the
valid tokens given by a mask, plus a KL penalty to a frozen reference policy estimated with k3.

Shapes: ``P`` groups (prompts), ``G`` samples per group, ``B = P * G`` sequences, ``L`` tokens
(steps) per sequence, padded; ``mask`` is 1 on real tokens.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "aggregation_share",
    "group_advantages",
    "group_advantages_by_id",
    "k3_kl",
    "masked_mean",
    "policy_loss",
]


def group_advantages(rewards: Tensor, group_size: int, eps: float = 1e-6, scale: bool = True) -> Tensor:
    """Group-normalised advantages ``(r - mean_group(r)) / (std_group(r) + eps)``.

    Args:
        rewards: ``[B]`` outcome rewards, laid out group after group (``B = P * group_size``).
        group_size: ``G``, at least 2 when ``scale`` (a standard deviation needs two samples).
        eps: added to the standard deviation (a group of equal rewards gets advantage 0).
        scale: divide by the group's (unbiased) standard deviation; ``False`` only centres
            (Dr. GRPO's variant).

    Returns:
        ``[B]`` advantages.
    """
    if rewards.ndim != 1 or rewards.shape[0] % group_size != 0:
        raise ValueError(
            f"group_advantages: rewards must be [P * group_size] with group_size={group_size}, got {tuple(rewards.shape)}"
        )
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale:
        if group_size < 2:
            raise ValueError("group_advantages: scale=True needs group_size >= 2")
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    return centred.reshape(-1)


def group_advantages_by_id(
    rewards: Tensor, group_ids: Tensor, group_size: int, eps: float = 1e-6, scale: bool = True
) -> Tensor:
    """:func:`group_advantages` for samples in any order, their group given by ``group_ids``
    (what a distributed rollout produces: a group's episodes may come from several workers).

    Args:
        rewards: ``[B]`` outcome rewards.
        group_ids: ``[B]`` integer group of each sample; every group must hold exactly
            ``group_size`` samples.

    Returns:
        ``[B]`` advantages, in the order of ``rewards``.
    """
    if rewards.shape != group_ids.shape or rewards.ndim != 1:
        raise ValueError(
            f"group_advantages_by_id: rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} "
            "must be the same [B]"
        )
    _, counts = torch.unique(group_ids, return_counts=True)
    if (counts != group_size).any():
        raise ValueError(
            f"group_advantages_by_id: every group needs {group_size} samples, got sizes {sorted(set(counts.tolist()))}"
        )
    order = torch.argsort(group_ids, stable=True)
    out = torch.empty_like(rewards)
    out[order] = group_advantages(rewards[order], group_size, eps=eps, scale=scale)
    return out


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over the entries where ``mask`` is 1 (same shapes), over all of them or along
    ``dim``; an all-zero mask gives 0, not NaN."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim=dim) / mask.sum(dim=dim).clamp(min=1.0)


def aggregation_share(part: Tensor, whole: Tensor, aggregation: str = "token-mean") -> float:
    """The part of :func:`policy_loss`'s denominator over the minibatch mask ``whole`` that the
    rows of ``part`` (a subset of its sequences) hold: their valid tokens for ``token-mean``,
    their sequences for ``seq-mean-token-mean``. ``policy_loss(part) * share`` summed over the
    parts of a minibatch is ``policy_loss(whole)`` (how a learner group splits a minibatch)."""
    if aggregation == "seq-mean-token-mean":
        return part.shape[0] / max(whole.shape[0], 1)
    return float(part.sum()) / max(float(whole.sum()), 1.0)


def k3_kl(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """Per-token k3 estimate of ``KL(pi || pi_ref)`` from tokens sampled from ``pi``:
    ``exp(ref - logp) - (ref - logp) - 1`` (Schulman's unbiased, non-negative estimator), same
    shape as the inputs (``[B, L]``)."""
    d = ref_log_prob - log_prob
    return torch.expm1(d) - d


def policy_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ref_log_prob: Tensor | None = None,
    kl_coef: float = 0.0,
    aggregation: Literal["token-mean", "seq-mean-token-mean"] = "token-mean",
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO's clipped-ratio loss with a k3 KL penalty, over masked tokens.

    Per token: ``-min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) + kl_coef * k3``
    where ``ratio = exp(log_prob - old_log_prob)`` and ``A`` is the sequence's advantage.

    Args:
        log_prob: ``[B, L]`` token log-probs under the policy being trained.
        old_log_prob: ``[B, L]`` under the policy that sampled (no gradient).
        advantages: ``[B]`` (one per sequence, broadcast over its tokens) or ``[B, L]``.
        mask: ``[B, L]`` 1 on valid tokens, 0 on padding.
        clip_low, clip_high: the asymmetric clip range (DAPO's "clip-higher" uses ``clip_high > clip_low``).
        ref_log_prob: ``[B, L]`` under the frozen reference policy; needed when ``kl_coef > 0``.
        kl_coef: weight of the KL penalty.
        aggregation: ``"token-mean"`` averages over every valid token of the batch (long
            sequences weigh more; DAPO); ``"seq-mean-token-mean"`` averages within each sequence,
            then over sequences (the original GRPO).

    Returns:
        ``(loss, stats)``: the scalar loss and detached ``stats`` (``kl``, ``clip_fraction``,
        ``ratio_mean``) averaged over valid tokens.
    """
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(1)
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    objective = torch.minimum(
        ratio * advantages, torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    )
    per_token = -objective
    kl = None
    if kl_coef > 0.0:
        if ref_log_prob is None:
            raise ValueError("grpo.policy_loss: kl_coef > 0 needs ref_log_prob")
        kl = k3_kl(log_prob, ref_log_prob)
        per_token = per_token + kl_coef * kl
    elif ref_log_prob is not None:
        kl = k3_kl(log_prob, ref_log_prob)
    if aggregation == "token-mean":
        loss = masked_mean(per_token, mask)
    elif aggregation == "seq-mean-token-mean":
        loss = masked_mean(per_token, mask, dim=1).mean()
    else:
        raise ValueError(f"grpo.policy_loss: unknown aggregation {aggregation!r}")
    with torch.no_grad():
        clipped = ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)).to(log_prob.dtype)
        stats = {
            "clip_fraction": masked_mean(clipped, mask),
            "ratio_mean": masked_mean(ratio, mask),
            "kl": masked_mean(kl, mask) if kl is not None else torch.zeros((), device=log_prob.device),
        }
    return loss, stats

"""GRPO maths as free functions (Shao et al. 2024, DeepSeekMath).

GRPO samples ``G`` responses (or episodes) per prompt (or initial state), scores each with an
outcome reward, and uses the reward normalised within its group as the advantage of every token
(or step) of that response: no critic. The policy loss is PPO's clipped ratio, averaged over the
valid tokens given by a mask, plus a KL penalty to a frozen reference policy estimated with k3.

The functions live with the registered estimators and losses (:mod:`rlinf_algos.objectives`);
this module keeps their GRPO names, and :func:`success_band` (SimpleVLA-RL's group filter).

Shapes: ``P`` groups (prompts), ``G`` samples per group, ``B = P * G`` sequences, ``L`` tokens
(steps) per sequence, padded; ``mask`` is 1 on real tokens.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from rlinf_algos.objectives.advantages import Outcomes, group_advantages, group_advantages_by_id
from rlinf_algos.objectives.losses import LossSettings, aggregation_share, k3_kl, masked_mean, ppo_clip

__all__ = [
    "aggregation_share",
    "group_advantages",
    "group_advantages_by_id",
    "k3_kl",
    "masked_mean",
    "policy_loss",
    "score_episodes",
    "success_band",
]


def success_band(successes: Tensor, group_ids: Tensor, low: float, high: float) -> Tensor:
    """``[B]`` bool: the samples of groups whose success rate lies in ``[low, high]``
    (SimpleVLA-RL, Li et al. 2025, "dynamic sampling": a group all of whose episodes succeed, or
    all fail, has no relative signal and is left out; a band narrower than ``[0, 1]`` drops the
    nearly-solved and nearly-hopeless tasks too).

    Args:
        successes: ``[B]`` bool (or 0/1) outcome of each sample.
        group_ids: ``[B]`` integer group of each sample.
        low, high: the band of the group's success rate kept (inclusive).
    """
    ids, inverse = torch.unique(group_ids, return_inverse=True)
    s = successes.to(torch.float64)
    rate = torch.zeros(len(ids), dtype=torch.float64, device=s.device).index_add_(0, inverse, s)
    count = torch.zeros(len(ids), dtype=torch.float64, device=s.device).index_add_(
        0, inverse, torch.ones_like(s)
    )
    rate = rate / count
    keep = (rate >= low - 1e-12) & (rate <= high + 1e-12)
    return keep[inverse]


def score_episodes(
    estimator: Any, cfg: Any, returns: Tensor, group_ids: Tensor, lengths: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``(advantages [B], keep [B] bool)`` of episodes: ``keep`` marks those of groups inside
    ``cfg.success_band`` (every episode without one; an episode succeeds when its return reaches
    ``success_return``), and the registered ``estimator`` scores the kept episodes alone (a
    batch-wide estimator normalises over what is trained on); dropped episodes get 0.

    Args:
        estimator: an outcome estimator (:mod:`rlinf_algos.objectives`).
        cfg: the ``algorithm`` section (``group_size``, ``success_band``...).
        returns: ``[B]`` episode returns; ``group_ids``: ``[B]`` their groups (any order);
        lengths: ``[B]`` steps of each episode, or ``None``.
    """
    band = getattr(cfg, "success_band", None)
    if band is None:
        keep = torch.ones(returns.shape, dtype=torch.bool, device=returns.device)
    else:
        keep = success_band(returns >= band.success_return, group_ids, band.low, band.high)
    adv = torch.zeros_like(returns)
    if bool(keep.any()):
        sub = None if lengths is None else lengths[keep]
        adv[keep] = estimator(Outcomes(returns[keep], group_ids[keep], cfg.group_size, sub), cfg)
    return adv, keep


def policy_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ref_log_prob: Tensor | None = None,
    kl_coef: float = 0.0,
    aggregation: Literal[
        "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = "token-mean",
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO's clipped-ratio loss with a k3 KL penalty, over masked tokens: the registered
    ``ppo_clip`` loss (:func:`rlinf_algos.objectives.losses.ppo_clip`) with its settings as
    arguments.

    Per token: ``-min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) + kl_coef * k3``
    where ``ratio = exp(log_prob - old_log_prob)`` and ``A`` is the sequence's advantage;
    ``aggregation`` as :func:`rlinf_algos.objectives.losses.aggregate` (``token-mean``: every
    valid token of the batch alike, DAPO; ``seq-mean-token-mean``: within each sequence, then
    over sequences, the original GRPO).

    Returns:
        ``(loss, stats)``: the scalar loss and detached ``stats`` (``kl``, ``clip_fraction``,
        ``ratio_mean``) averaged over valid tokens.
    """
    settings = LossSettings(clip_low, clip_high, kl_coef, aggregation)
    return ppo_clip(log_prob, old_log_prob, advantages, mask, settings, ref_log_prob)

"""The policy losses rlinf-algos registers (``algorithm.policy_loss``), their aggregation modes
and the KL term they share. Registered through :mod:`rlinf_algos.plugin`.

============  ==================================================================================
name          per-token objective (maximised; the loss is its negation, aggregated)
============  ==================================================================================
``ppo_clip``  ``min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)`` (Schulman et al. 2017)
``dapo``      the same clip-higher objective, aggregated over every token (Yu et al. 2025)
``gspo``      a sequence-level ratio ``s = exp(mean_t log rho_t)`` clipped (Zheng et al. 2025)
============  ==================================================================================

Every loss adds ``kl_coef * k3(pi || pi_ref)`` per token when ``kl_coef > 0``.

Aggregations of a ``[B, L]`` per-token loss ``l`` under the mask ``m``:

- ``token-mean``: ``sum(m * l) / sum(m)`` (every valid token of the batch counts alike);
- ``seq-mean-token-sum``: ``mean_i sum_t m * l`` (each sequence's sum, averaged);
- ``seq-mean-token-mean``: ``mean_i (sum_t m * l / sum_t m)`` (the original GRPO);
- ``seq-mean-token-sum-norm``: ``sum(m * l) / (B * C)`` with a constant ``C`` (Dr. GRPO).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlinf_algos.objectives import policy_loss

__all__ = [
    "LossSettings",
    "aggregate",
    "aggregation_share",
    "dapo",
    "gspo",
    "k3_kl",
    "masked_mean",
    "ppo_clip",
]


@dataclass
class LossSettings:
    """What a policy loss reads of the ``algorithm`` section.

    Attributes:
        clip_low, clip_high: the ratio may move to ``[1 - clip_low, 1 + clip_high]``.
        kl_coef: weight of the k3 KL to the reference (needs ``ref_log_prob`` when ``> 0``).
        aggregation: one of :data:`rlinf_algos.objectives.AGGREGATIONS`.
        norm_length: ``C`` of ``seq-mean-token-sum-norm`` (``None``: the batch's ``L``).
        dual_clip: ``c > 1`` bounds the objective of a negative advantage below by ``c * A``
            (Ye et al. 2020, "dual-clip PPO"), or ``None``.
        stats: ``False`` when the caller does not read the statistics (embodied PPO computes
            its own from the log-ratios): a loss may then return an empty dict and skip them.
    """

    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    aggregation: str = "token-mean"
    norm_length: int | None = None
    dual_clip: float | None = None
    stats: bool = True


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over the entries where ``mask`` is 1 (same shapes), over all of them or along
    ``dim``; an all-zero mask gives 0, not NaN."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim=dim) / mask.sum(dim=dim).clamp(min=1.0)


def aggregate(per_token: Tensor, mask: Tensor, mode: str, norm_length: int | None = None) -> Tensor:
    """One number of a ``[B, L]`` per-token loss under ``mask`` (see the module docstring)."""
    if mode == "token-mean":
        return masked_mean(per_token, mask)
    if mode == "seq-mean-token-mean":
        return masked_mean(per_token, mask, dim=1).mean()
    m = mask.to(per_token.dtype)
    if mode == "seq-mean-token-sum":
        return (per_token * m).sum(dim=1).mean()
    if mode == "seq-mean-token-sum-norm":
        c = norm_length if norm_length is not None else per_token.shape[1]
        return (per_token * m).sum() / float(max(per_token.shape[0], 1) * c)
    raise ValueError(f"unknown loss aggregation {mode!r}")


def aggregation_share(part: Tensor, whole: Tensor, aggregation: str = "token-mean") -> float:
    """The part of the loss's denominator over the minibatch mask ``whole`` that the rows of
    ``part`` (a subset of its sequences) hold: their valid tokens for ``token-mean``, their
    sequences for the per-sequence modes. ``loss(part) * share`` summed over the parts of a
    minibatch is ``loss(whole)`` (how a learner group splits a minibatch)."""
    if aggregation != "token-mean":
        return part.shape[0] / max(whole.shape[0], 1)
    return float(part.sum()) / max(float(whole.sum()), 1.0)


def k3_kl(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """Per-token k3 estimate of ``KL(pi || pi_ref)`` from tokens sampled from ``pi``:
    ``exp(ref - logp) - (ref - logp) - 1`` (Schulman's unbiased, non-negative estimator), same
    shape as the inputs (``[B, L]``)."""
    d = ref_log_prob - log_prob
    return torch.expm1(d) - d


def _clipped(
    log_ratio: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    s: LossSettings,
    ref_log_prob: Tensor | None,
    who: str,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The clipped objective of ``ratio = exp(log_ratio)``, the KL term and the aggregation."""
    if advantages.ndim == 1:
        advantages = advantages.unsqueeze(1)
    ratio = torch.exp(log_ratio)
    objective = torch.minimum(
        ratio * advantages, torch.clamp(ratio, 1.0 - s.clip_low, 1.0 + s.clip_high) * advantages
    )
    if s.dual_clip is not None:
        objective = torch.where(advantages < 0, torch.maximum(objective, s.dual_clip * advantages), objective)
    per_token = -objective
    kl = None
    if s.kl_coef > 0.0:
        if ref_log_prob is None:
            raise ValueError(f"{who}: kl_coef > 0 needs ref_log_prob")
        kl = k3_kl(log_prob, ref_log_prob)
        per_token = per_token + s.kl_coef * kl
    elif ref_log_prob is not None:
        kl = k3_kl(log_prob, ref_log_prob)
    loss = aggregate(per_token, mask, s.aggregation, s.norm_length)
    if not s.stats:
        return loss, {}
    with torch.no_grad():
        clipped = ((ratio < 1.0 - s.clip_low) | (ratio > 1.0 + s.clip_high)).to(log_prob.dtype)
        stats = {
            "clip_fraction": masked_mean(clipped, mask),
            "ratio_mean": masked_mean(ratio, mask),
            "kl": masked_mean(kl, mask) if kl is not None else torch.zeros((), device=log_prob.device),
        }
    return loss, stats


@policy_loss("ppo_clip")
def ppo_clip(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    settings: LossSettings,
    ref_log_prob: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate (Schulman et al. 2017, "Proximal policy optimization algorithms",
    eq. 7) per token, with an asymmetric clip range:

    ``rho_t = exp(log pi(y_t) - log pi_old(y_t))``,
    ``l_t = -min(rho_t * A, clip(rho_t, 1 - clip_low, 1 + clip_high) * A) + kl_coef * k3_t``,

    with ``settings.dual_clip = c``, ``-max(min(...), c * A)`` where ``A < 0`` (Ye et al. 2020),
    aggregated as ``settings.aggregation`` says (``token-mean`` when nothing chooses one).

    Args:
        log_prob: ``[B, L]`` token log-probs under the policy being trained.
        old_log_prob: ``[B, L]`` under the policy that sampled (no gradient).
        advantages: ``[B]`` (one per sequence, broadcast over its tokens) or ``[B, L]``.
        mask: ``[B, L]`` 1 on valid tokens, 0 on padding.
        settings: clip range, KL weight, aggregation.
        ref_log_prob: ``[B, L]`` under the frozen reference policy; needed when ``kl_coef > 0``.

    Returns:
        ``(loss, stats)``: the scalar loss and detached ``stats`` (``kl``, ``clip_fraction``,
        ``ratio_mean``) averaged over valid tokens.
    """
    return _clipped(log_prob - old_log_prob, log_prob, advantages, mask, settings, ref_log_prob, "ppo_clip")


@policy_loss("dapo", aggregation="token-mean")
def dapo(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    settings: LossSettings,
    ref_log_prob: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """DAPO's objective (Yu et al. 2025, "DAPO: an open-source LLM reinforcement learning system
    at scale", eq. 8): "clip-higher", a decoupled range ``eps_low`` / ``eps_high``
    (``settings.clip_low`` / ``clip_high``; the paper takes 0.2 / 0.28), and the token-level
    policy-gradient loss, every token of the batch weighing alike:

    ``J = 1 / sum_i |o_i| * sum_i sum_t min(rho_{i,t} * A_{i,t}, clip(rho_{i,t}, 1 - eps_low, 1 + eps_high) * A_{i,t})``.

    Its aggregation is ``token-mean`` unless ``algorithm.aggregation`` names another. Arguments
    and return as :func:`ppo_clip`."""
    return _clipped(log_prob - old_log_prob, log_prob, advantages, mask, settings, ref_log_prob, "dapo")


@policy_loss("gspo", aggregation="seq-mean-token-mean", sequences=True)
def gspo(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    mask: Tensor,
    settings: LossSettings,
    ref_log_prob: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Group sequence policy optimisation (Zheng et al. 2025, "Group sequence policy
    optimization", eqs. 5-7): one importance ratio per sequence, the length-normalised
    likelihood ratio

    ``s_i = (pi(y_i) / pi_old(y_i))^(1 / |y_i|) = exp(mean_t (log pi(y_{i,t}) - log pi_old(y_{i,t})))``,

    clipped per sequence: ``J = mean_i min(s_i * A_i, clip(s_i, 1 - eps_low, 1 + eps_high) * A_i)``.
    Written per token as GSPO-token (eq. 13) and verl do, ``s_{i,t} = sg(s_i) * pi(y_{i,t}) /
    sg(pi(y_{i,t}))``: the same value as ``s_i``, the gradient of eq. 7 for sequence-level
    advantages. Aggregated ``seq-mean-token-mean`` unless ``algorithm.aggregation`` says
    otherwise. It reads whole sequences (``sequences=True``): embodied ``ppo``, whose rows are
    single steps, refuses it. The paper's clip range is far narrower than PPO's (3e-4 / 4e-4): set
    ``clip_low`` / ``clip_high`` for it. Arguments and return as :func:`ppo_clip`."""
    log_ratio = log_prob - old_log_prob
    seq = masked_mean(log_ratio, mask, dim=1).unsqueeze(1)  # log s_i, [B, 1]
    token = seq.detach() + log_prob - log_prob.detach()
    return _clipped(token, log_prob, advantages, mask, settings, ref_log_prob, "gspo")

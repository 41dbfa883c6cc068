"""The advantage estimators rlinf-algos registers (``algorithm.adv_estimator``), and the maths
they share. Registered through :mod:`rlinf_algos.plugin`; see :mod:`rlinf_algos.objectives`
for the two calling conventions.

=========================  ======  ==============================================================
name                       kind    advantage
=========================  ======  ==============================================================
``gae``                    critic  GAE(gamma, lambda) over steps (Schulman et al. 2016)
``grpo``                   groups  ``(r - mean_g) / (std_g + eps)`` (Shao et al. 2024)
``dr_grpo``                groups  ``r - mean_g``, loss normalised by a constant (Liu et al. 2025)
``rloo``                   groups  ``r - mean of the other G - 1`` (Ahmadian et al. 2024)
``reinforce_plus_plus``    groups  ``(r - mean_B) / std_B`` over the batch (Hu 2025)
=========================  ======  ==============================================================

Shapes: ``E`` episodes (``P`` groups of ``G``), ``T`` steps and ``N`` environments (time-major
embodied rollouts), ``N`` sequences of ``L`` tokens (language models).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlinf_algos.objectives import advantage_estimator

__all__ = [
    "Outcomes",
    "StepRewards",
    "dr_grpo",
    "gae",
    "group_advantages",
    "group_advantages_by_id",
    "grpo",
    "reinforce_plus_plus",
    "rloo",
    "time_gae",
    "token_gae",
]


@dataclass
class Outcomes:
    """What an outcome estimator reads: one reward per episode and its group.

    Attributes:
        rewards: ``[E]`` float outcome of each episode.
        group_ids: ``[E]`` long group of each episode (any order; each group ``G`` episodes).
        group_size: ``G``.
        lengths: ``[E]`` valid tokens (steps) of each episode, or ``None`` (each counts once);
            estimators that weigh episodes by their tokens read it.
    """

    rewards: Tensor
    group_ids: Tensor
    group_size: int
    lengths: Tensor | None = None

    @classmethod
    def consecutive(cls, rewards: Tensor, group_size: int, lengths: Tensor | None = None) -> Outcomes:
        """Episodes laid out group after group (group ``i // G``)."""
        ids = torch.arange(rewards.shape[0], device=rewards.device) // group_size
        return cls(rewards, ids, group_size, lengths)


@dataclass
class StepRewards:
    """What a critic estimator reads. Either time-major embodied steps (``[T, N]`` tensors with
    ``next_values``, ``terminated`` and ``truncated``: see :func:`time_gae`) or batch-major
    token sequences (``[N, L]`` with ``mask``, 1 on generated tokens: see :func:`token_gae`)."""

    rewards: Tensor
    values: Tensor
    gamma: float
    lam: float
    mask: Tensor | None = None
    next_values: Tensor | None = None
    terminated: Tensor | None = None
    truncated: Tensor | None = None


# -- the shared maths ---------------------------------------------------------------------------


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


def _grouped(outcomes: Outcomes) -> tuple[Tensor, Tensor]:
    """``(order, [P, G] rewards)``: the stable sort of the episodes by group, and their rewards
    in it (each group must hold ``G`` episodes)."""
    rewards, ids, g = outcomes.rewards, outcomes.group_ids, outcomes.group_size
    if rewards.shape != ids.shape or rewards.ndim != 1:
        raise ValueError(
            f"advantages: rewards {tuple(rewards.shape)} and group_ids {tuple(ids.shape)} must be the same [B]"
        )
    _, counts = torch.unique(ids, return_counts=True)
    if (counts != g).any():
        raise ValueError(
            f"advantages: every group needs {g} samples, got sizes {sorted(set(counts.tolist()))}"
        )
    order = torch.argsort(ids, stable=True)
    return order, rewards[order].view(-1, g)


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
    order, grouped = _grouped(Outcomes(rewards, group_ids, group_size))
    out = torch.empty_like(rewards)
    out[order] = group_advantages(grouped.reshape(-1), group_size, eps=eps, scale=scale)
    return out


def time_gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over time-major ``[T, N]`` steps
    that tells termination from truncation.

    ``delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t`` and
    ``A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}`` with ``done = terminated | truncated``.
    A truncated step keeps its bootstrap ``gamma * V(final_obs)`` in its delta but, like a
    terminated one, does not borrow the advantage of the next (unrelated) episode.

    Args:
        rewards: ``[T, N]`` reward of step ``t``.
        values: ``[T, N]`` ``V(s_t)``.
        next_values: ``[T, N]`` value of the successor state
            (:func:`rlinf_algos.ppo.functional.next_values_with_bootstrap`).
        terminated: ``[T, N]`` bool, the episode terminated at step ``t``.
        truncated: ``[T, N]`` bool, the episode was truncated at step ``t``.
        gamma: discount in ``[0, 1]``.
        lam: GAE lambda in ``[0, 1]``.

    Returns:
        ``(advantages, returns)``, both ``[T, N]``; ``returns = advantages + values`` (the critic's
        regression target).
    """
    not_term = (~terminated).to(values.dtype)
    not_done = (~(terminated | truncated)).to(values.dtype)
    deltas = rewards + gamma * not_term * next_values - values
    carry = gamma * lam * not_done
    advantages = torch.empty_like(deltas)
    last = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        last = deltas[t] + carry[t] * last
        advantages[t] = last
    return advantages, advantages + values


def token_gae(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """``(advantages, returns)`` ``[N, L]`` by GAE over the positions where ``mask`` is 1 (taken
    as consecutive steps; the value after the last one is 0). Zero where ``mask`` is 0: text an
    orchestrator wrote into a context between two generated tokens is skipped, not a step."""
    n, t = rewards.shape
    adv = torch.zeros_like(values)
    last = torch.zeros(n, dtype=values.dtype, device=values.device)
    next_value = torch.zeros(n, dtype=values.dtype, device=values.device)
    m = mask > 0
    for i in range(t - 1, -1, -1):
        delta = rewards[:, i] + gamma * next_value - values[:, i]
        step = delta + gamma * lam * last
        adv[:, i] = torch.where(m[:, i], step, torch.zeros_like(step))
        last = torch.where(m[:, i], step, last)
        next_value = torch.where(m[:, i], values[:, i], next_value)
    return adv, adv + values


# -- the registered estimators ------------------------------------------------------------------


@advantage_estimator("gae", critic=True)
def gae(steps: StepRewards, cfg: Any = None) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman, Moritz, Levine, Jordan, Abbeel 2016,
    "High-dimensional continuous control using generalized advantage estimation", eq. 16):

    ``delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)``,
    ``A_t = sum_l (gamma * lam)^l * delta_{t+l}`` (cut at episode ends), ``R_t = A_t + V(s_t)``.

    Time-major embodied steps go through :func:`time_gae` (termination versus truncation);
    token sequences with a ``mask`` through :func:`token_gae`. Returns ``(advantages,
    returns)`` shaped as ``steps.rewards``."""
    if steps.terminated is not None:
        if steps.next_values is None or steps.truncated is None:
            raise ValueError("gae: time-major steps need next_values, terminated and truncated")
        return time_gae(
            steps.rewards,
            steps.values,
            steps.next_values,
            steps.terminated,
            steps.truncated,
            steps.gamma,
            steps.lam,
        )
    if steps.mask is None:
        raise ValueError("gae: token sequences need a mask (or give terminated/truncated steps)")
    return token_gae(steps.rewards, steps.values, steps.mask, steps.gamma, steps.lam)


@advantage_estimator("grpo")
def grpo(outcomes: Outcomes, cfg: Any = None) -> Tensor:
    """Group relative advantages (Shao et al. 2024, "DeepSeekMath", section 4.1.2, outcome
    supervision): every token of episode ``i`` of a group gets

    ``A_i = (r_i - mean(r_1..r_G)) / (std(r_1..r_G) + eps)``

    (``std`` unbiased, ``eps = 1e-6``: a group of equal rewards gets 0). ``cfg.scale_advantages:
    false`` leaves the division out (the same as ``dr_grpo``'s advantage)."""
    scale = bool(getattr(cfg, "scale_advantages", True))
    return group_advantages_by_id(outcomes.rewards, outcomes.group_ids, outcomes.group_size, scale=scale)


@advantage_estimator("dr_grpo", aggregation="seq-mean-token-sum-norm")
def dr_grpo(outcomes: Outcomes, cfg: Any = None) -> Tensor:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-like training: a critical perspective",
    section 3.2): GRPO without its two biases,

    ``A_i = r_i - mean(r_1..r_G)`` (no division by the group's std: no question-difficulty bias)

    and a loss normalised by a constant instead of each response's length (no length bias): the
    aggregation ``seq-mean-token-sum-norm``, ``sum_{i,t} l_{i,t} / (B * C)`` with ``C`` the
    generation budget (``algorithm.loss_norm_length``)."""
    return group_advantages_by_id(outcomes.rewards, outcomes.group_ids, outcomes.group_size, scale=False)


@advantage_estimator("rloo")
def rloo(outcomes: Outcomes, cfg: Any = None) -> Tensor:
    """REINFORCE leave-one-out (Kool, van Hoof, Welling 2019, "Buy 4 REINFORCE samples, get a
    baseline for free!"; Ahmadian et al. 2024, "Back to basics", eq. 6): each episode's baseline
    is the mean reward of the other ``G - 1`` of its group,

    ``A_i = r_i - (1 / (G - 1)) * sum_{j != i} r_j = G / (G - 1) * (r_i - mean(r_1..r_G))``."""
    g = outcomes.group_size
    if g < 2:
        raise ValueError("rloo: a leave-one-out baseline needs group_size >= 2")
    order, grouped = _grouped(outcomes)
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / (g - 1)
    out = torch.empty_like(outcomes.rewards)
    out[order] = (grouped - others).reshape(-1)
    return out


@advantage_estimator("reinforce_plus_plus")
def reinforce_plus_plus(outcomes: Outcomes, cfg: Any = None) -> Tensor:
    """REINFORCE++ (Hu 2025, "REINFORCE++: a simple and efficient approach for aligning large
    language models", section 3): no critic and no per-prompt baseline; with an outcome reward
    and ``gamma = 1`` every token's return is its episode's reward ``r_i``, normalised over the
    whole batch's tokens,

    ``A_i = (r_i - mu) / sqrt(sigma^2 + 1e-8)``, ``mu = sum_i n_i r_i / sum_i n_i``,
    ``sigma^2 = sum_i n_i (r_i - mu)^2 / (sum_i n_i - 1)``

    with ``n_i`` the episode's valid tokens (``outcomes.lengths``; 1 each when ``None``), as
    verl's ``masked_whiten`` over the response mask computes it."""
    r = outcomes.rewards
    w = (
        torch.ones_like(r)
        if outcomes.lengths is None
        else outcomes.lengths.to(device=r.device, dtype=r.dtype)
    )
    total = w.sum()
    mu = (w * r).sum() / total
    var = (w * (r - mu) ** 2).sum() / (total - 1).clamp(min=1.0)
    return (r - mu) * torch.rsqrt(var + 1e-8)

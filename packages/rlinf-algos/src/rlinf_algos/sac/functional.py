"""SAC maths as free functions (Haarnoja et al. 2018, "SAC: algorithms and applications").

``B`` is the batch size. The twin critics and their target copies live in
:class:`rlinf_algos.models.TwinQ`; the squashed Gaussian actor in
:class:`rlinf_algos.models.SquashedGaussianActor`; the replay buffer in
:class:`rlinf_algos.replay.ReplayBuffer` (re-exported here).

Termination versus truncation
    The critic target bootstraps from the next state unless the episode *terminated* there. A
    *truncated* transition (time limit) stores the real final observation as ``next_obs`` and
    bootstraps from it like any other step: truncation is not a property of the MDP.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from rlinf_algos.replay import ReplayBuffer

__all__ = [
    "ReplayBuffer",
    "actor_loss",
    "critic_loss",
    "critic_target",
    "default_target_entropy",
    "polyak_update",
    "temperature_loss",
]


def default_target_entropy(action_dim: int) -> float:
    """The usual target entropy ``-|A|`` (one nat less per action dimension than uniform-ish)."""
    return -float(action_dim)


def critic_target(
    rewards: Tensor,
    terminated: Tensor,
    next_q1: Tensor,
    next_q2: Tensor,
    next_log_prob: Tensor,
    alpha: Tensor | float,
    gamma: float,
) -> Tensor:
    """Soft Bellman target ``r + gamma * (1 - terminated) * (min(Q1', Q2') - alpha * log pi(a'|s'))``.

    Args:
        rewards: ``[B]``.
        terminated: ``[B]`` bool or 0/1 float; truncation must *not* be passed here.
        next_q1, next_q2: ``[B]`` target critics at ``(s', a')`` with ``a' ~ pi(.|s')``.
        next_log_prob: ``[B]`` ``log pi(a'|s')``.
        alpha: the temperature (scalar).
        gamma: discount.

    Returns:
        ``[B]`` targets, without gradient.
    """
    with torch.no_grad():
        not_term = 1.0 - terminated.to(rewards.dtype)
        soft_v = torch.minimum(next_q1, next_q2) - alpha * next_log_prob
        return rewards + gamma * not_term * soft_v


def critic_loss(q1: Tensor, q2: Tensor, target: Tensor) -> Tensor:
    """``mean((Q1 - y)^2) + mean((Q2 - y)^2)`` for ``[B]`` predictions and targets (CleanRL's form;
    some implementations halve it, which only rescales the learning rate)."""
    return ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()


def actor_loss(q1_pi: Tensor, q2_pi: Tensor, log_prob: Tensor, alpha: Tensor | float) -> Tensor:
    """``mean(alpha * log pi(a|s) - min(Q1(s, a), Q2(s, a)))`` with ``a ~ pi(.|s)`` reparameterised;
    all inputs ``[B]``, ``alpha`` a scalar (detach it: the actor does not train the temperature)."""
    return (alpha * log_prob - torch.minimum(q1_pi, q2_pi)).mean()


def temperature_loss(log_alpha: Tensor, log_prob: Tensor, target_entropy: float) -> Tensor:
    """``-mean(log_alpha * (log pi(a|s) + target_entropy))`` (gradient to ``log_alpha`` only).

    Its gradient raises ``alpha`` while the policy's entropy ``-log pi`` is below the target and
    lowers it above. ``log_alpha`` is a scalar parameter, ``log_prob`` ``[B]``.
    """
    return -(log_alpha * (log_prob.detach() + target_entropy)).mean()


@torch.no_grad()
def polyak_update(target: Iterable[Tensor], online: Iterable[Tensor], tau: float) -> None:
    """``target <- (1 - tau) * target + tau * online`` in place, for matching lists of tensors
    (``tau = 1`` copies). One fused ``_foreach_lerp_`` for all tensors."""
    target = list(target)
    online = list(online)
    if len(target) != len(online):
        raise ValueError(f"polyak_update: {len(target)} target tensors but {len(online)} online ones")
    torch._foreach_lerp_(target, online, tau)

"""PPO maths as free functions (Schulman et al. 2017, with the usual implementation details).

Shapes use ``T`` for time steps, ``N`` for parallel environments and ``B`` for a flat batch of
samples (``B = T * N`` after flattening). Every function is pure: it reads tensors and returns
tensors, so the same code serves the single-process runner and the distributed actor workers.

Termination versus truncation
    An episode that *terminates* (the pole fell, the robot crashed) has no future: its value
    after the last step is 0. An episode that is *truncated* (a time limit, a preempted worker)
    would have gone on: its value after the last step is ``V(final_obs)``, the critic's value of
    the observation the environment returned before it was reset. :func:`gae` takes
    ``next_values`` that already hold that bootstrap value on truncated steps, and cuts the
    recursion at every episode end (either kind). :func:`gae` is the registered ``gae``
    estimator's time-major form (:func:`rlinf_algos.objectives.advantages.time_gae`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlinf_algos.objectives.advantages import time_gae as gae

__all__ = [
    "approx_kl",
    "clip_fraction",
    "entropy_loss",
    "gae",
    "next_values_with_bootstrap",
    "normalize_advantages",
    "policy_loss",
    "value_loss",
]


def next_values_with_bootstrap(
    values: Tensor, last_value: Tensor, done: Tensor, final_values: Tensor
) -> Tensor:
    """The critic's value of every step's successor state.

    Args:
        values: ``[T, N]`` ``V(s_t)`` of the observations the policy acted on.
        last_value: ``[N]`` ``V(s_T)`` of the observation after the last collected step.
        done: ``[T, N]`` bool, the episode ended at step ``t`` (terminated or truncated); the next
            row of ``values`` then belongs to a fresh episode.
        final_values: ``[T, N]`` ``V(final_obs_t)`` where the episode ended at ``t`` (anything
            elsewhere; it is only read where ``done``).

    Returns:
        ``[T, N]``: ``values[t + 1]`` (``last_value`` for ``t = T - 1``) where the episode went on,
        ``final_values[t]`` where it ended. Termination is *not* masked here; :func:`gae` does that.
    """
    following = torch.cat([values[1:], last_value.unsqueeze(0)], dim=0)
    return torch.where(done, final_values, following)


def normalize_advantages(advantages: Tensor, eps: float = 1e-8, dim: int | None = None) -> Tensor:
    """``(A - mean(A)) / (std(A) + eps)`` over the whole tensor (any shape, ``std`` unbiased, as
    CleanRL and SB3 do per minibatch). A single element is returned centred (to 0).

    With ``dim``, each slice along ``dim`` is normalised on its own: ``[M, mb]`` advantages of
    ``M`` minibatches with ``dim=1`` give what ``M`` calls on the rows give, in one pass.
    """
    if dim is None:
        if advantages.numel() < 2:
            return advantages - advantages.mean()
        return (advantages - advantages.mean()) / (advantages.std() + eps)
    mean = advantages.mean(dim, keepdim=True)
    if advantages.shape[dim] < 2:
        return advantages - mean
    return (advantages - mean) / (advantages.std(dim, keepdim=True) + eps)


def policy_loss(
    log_ratio: Tensor,
    advantages: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> Tensor:
    """Clipped surrogate loss with an asymmetric clip range and optional dual clip: the
    reference form of the registered ``ppo_clip`` loss over single steps, which the learner
    trains with (``algorithm.policy_loss``; :mod:`rlinf_algos.objectives.losses`).

    ``ratio = exp(log_ratio)``; the PPO objective per sample is
    ``min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)`` and the loss is its negated
    mean. With ``dual_clip = c > 1`` (Ye et al. 2020, "dual-clip PPO"), samples with ``A < 0`` are
    further bounded: their objective is ``max(objective, c * A)``, so a huge ratio on a bad action
    cannot blow the loss up.

    Args:
        log_ratio: ``[B]`` ``log pi_new(a|s) - log pi_old(a|s)``.
        advantages: ``[B]``.
        clip_low: how far below 1 the ratio may go (``>= 0``).
        clip_high: how far above 1 the ratio may go (``>= 0``).
        dual_clip: ``None`` or the dual-clip constant ``c > 1``.

    Returns:
        A scalar loss (to minimise).
    """
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    objective = torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        objective = torch.where(advantages < 0, torch.maximum(objective, dual_clip * advantages), objective)
    return -objective.mean()


def clip_fraction(log_ratio: Tensor, clip_low: float = 0.2, clip_high: float = 0.2) -> Tensor:
    """The share of ``[B]`` samples whose ratio lies outside ``[1 - clip_low, 1 + clip_high]`` (a scalar)."""
    ratio = torch.exp(log_ratio)
    return ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)).float().mean()


def value_loss(
    values: Tensor, returns: Tensor, old_values: Tensor | None = None, clip: float | None = None
) -> Tensor:
    """Critic loss ``0.5 * mean((V - R)^2)``, optionally with PPO2's value clipping.

    With ``clip`` and ``old_values``, the prediction may move at most ``clip`` away from the value
    used during collection; the loss is the elementwise max of the clipped and unclipped squared
    errors: ``0.5 * mean(max((V - R)^2, (V_old + clamp(V - V_old, -clip, clip) - R)^2))``.

    Args:
        values: ``[B]`` current predictions.
        returns: ``[B]`` targets (from :func:`gae`).
        old_values: ``[B]`` predictions at collection time (required with ``clip``).
        clip: ``None`` or the clip range (``> 0``).

    Returns:
        A scalar loss.
    """
    err = (values - returns) ** 2
    if clip is not None:
        if old_values is None:
            raise ValueError("value_loss: clip needs old_values")
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    return 0.5 * err.mean()


def entropy_loss(entropy: Tensor) -> Tensor:
    """``-mean(entropy)`` of ``[B]`` per-sample entropies: add ``ent_coef * entropy_loss`` to the loss
    to reward exploration (minimising it maximises entropy)."""
    return -entropy.mean()


def approx_kl(log_ratio: Tensor) -> Tensor:
    """Schulman's k3 estimator of ``KL(pi_old || pi_new)`` from ``[B]`` samples drawn from ``pi_old``:
    ``mean((ratio - 1) - log_ratio)``; non-negative and unbiased. Used for early stopping: stop the
    epochs once it passes ``target_kl``."""
    return (torch.expm1(log_ratio) - log_ratio).mean()

"""Reward shaping and batch filters that the estimators' papers pair with them: DAPO's soft
overlong punishment and the group filters (DAPO's dynamic sampling, SimpleVLA-RL's success
band) on the groups' outcomes."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["episode_tokens", "overlong_penalty", "uniform_groups"]


def overlong_penalty(lengths: Tensor, max_length: int, cache: int, penalty: float = 1.0) -> Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, "DAPO", eq. 13), added to each
    episode's reward:

    ``R_len(n) = 0`` for ``n <= L_max - L_cache``,
    ``((L_max - L_cache) - n) / L_cache`` for ``L_max - L_cache < n <= L_max``,
    ``-1`` for ``n > L_max``; times ``penalty``.

    Args:
        lengths: ``[E]`` generated tokens of each episode.
        max_length: ``L_max``.
        cache: ``L_cache`` (``1 <= cache <= max_length``).
        penalty: the penalty's scale (1 in the paper).

    Returns:
        ``[E]`` float penalties (``<= 0``).
    """
    n = lengths.to(torch.float32)
    start = float(max_length - cache)
    soft = (start - n) / float(cache)
    out = torch.where(n <= start, torch.zeros_like(n), soft)
    out = torch.where(n > max_length, torch.full_like(n, -1.0), out)
    return out * penalty


def episode_tokens(loss_mask: Tensor, episode_index: Tensor, episodes: int) -> Tensor:
    """``[E]`` trained (generated) tokens of each episode: the ``[N, L]`` loss mask's row sums
    added up by each sequence's episode (``[N]``; several sequences in multi-agent mode)."""
    per_seq = loss_mask.sum(dim=1).to(torch.float32)
    out = torch.zeros(episodes, dtype=torch.float32, device=per_seq.device)
    return out.index_add_(0, episode_index.to(per_seq.device), per_seq)


def uniform_groups(rewards: Tensor, group_size: int) -> Tensor:
    """``[E / G]`` bool: the groups (consecutive ``group_size`` episodes) whose rewards are all
    equal, which carry no group-relative signal (DAPO's dynamic-sampling criterion)."""
    g = rewards.view(-1, group_size)
    return (g == g[:, :1]).all(dim=1)

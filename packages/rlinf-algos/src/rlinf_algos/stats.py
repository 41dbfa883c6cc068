"""Running statistics that travel with the weights: reward scaling and observation moments.

Observation statistics are part of a policy's weights: rollout workers normalise with the
statistics of the version they hold, send the raw batch moments (:class:`Moments`) with their
trajectories, and the learner folds them in (the policy's ``fold_obs_moments``) before it publishes the next
version, on every scheduler.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from rlinf_core.errors import RlinfError

__all__ = ["EpisodeStats", "Moments", "RewardScaler"]


class RewardScaler:
    """Divide rewards by the running standard deviation of the discounted return (what
    gymnasium's ``NormalizeReward`` and SB3's ``VecNormalize`` do), per vector-env slot; the
    running return restarts where an episode ends. Numpy only, with a ``state_dict``.

    ``per_slot``: each slot keeps its own statistics (``algorithm.norm_scope: slot``; a suite runs
    one task per slot, so each task's rewards get its own scale); otherwise one set pools every
    slot's returns."""

    def __init__(
        self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8, per_slot: bool = False
    ) -> None:
        self.gamma, self.clip, self.eps, self.per_slot = gamma, clip, eps, per_slot
        self.returns = np.zeros(num_envs, dtype=np.float64)
        shape = (num_envs,) if per_slot else ()
        self.mean = np.zeros(shape)
        self.var = np.ones(shape)
        self.count = np.full(shape, 1e-4)

    def __call__(self, rewards: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Scale ``[N]`` rewards of one step; ``done`` ``[N]`` marks episodes that ended in it."""
        self.returns = self.returns * self.gamma + rewards
        if self.per_slot:  # one new sample per slot
            b_mean, b_var, n = self.returns, 0.0, 1
        else:
            b_mean, b_var, n = float(self.returns.mean()), float(self.returns.var()), self.returns.size
        delta = b_mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + b_var * n + delta**2 * self.count * n / total) / total
        self.count = total
        self.returns[done] = 0.0
        scaled = rewards / np.sqrt(self.var + self.eps)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        def plain(x: np.ndarray) -> Any:  # a pooled scaler's figures stay plain floats
            return x.copy() if self.per_slot else float(x)

        return {
            "returns": self.returns.copy(),
            "mean": plain(self.mean),
            "var": plain(self.var),
            "count": plain(self.count),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns = np.asarray(state["returns"], dtype=np.float64).copy()
        shape = self.mean.shape
        for key in ("mean", "var", "count"):
            value = np.asarray(state[key], dtype=np.float64)
            if value.shape != shape:
                raise RlinfError(
                    f"the checkpoint's reward scaler state {key!r} has shape {value.shape}, this run's is {shape} "
                    "(algorithm.norm_scope differs from the checkpoint's run): resume with that run's setting"
                )
            setattr(self, key, value.copy())


class Moments:
    """Running sum / sum of squares of raw observations (float64) of one batch."""

    def __init__(self, dim: int) -> None:
        self.s = np.zeros(dim)
        self.ss = np.zeros(dim)
        self.n = 0

    def add(self, x: np.ndarray) -> None:
        x64 = x.astype(np.float64, copy=False)
        self.s += x64.sum(0)
        self.ss += np.square(x64).sum(0)
        self.n += x.shape[0]

    def result(self) -> dict[str, Any]:
        if self.n == 0:
            return {"mean": self.s, "var": self.ss, "count": 0}
        mean = self.s / self.n
        return {"mean": mean, "var": np.maximum(self.ss / self.n - mean**2, 0.0), "count": self.n}


class EpisodeStats:
    """The episodes a run has finished: how many, and the returns, lengths and successes
    (``info["is_success"]`` at the end, for envs that report it) of the recent ones."""

    def __init__(self, window: int = 100) -> None:
        self.episodes = 0
        self.recent_returns: deque[float] = deque(maxlen=window)
        self.recent_lengths: deque[int] = deque(maxlen=window)
        self.recent_successes: deque[float] = deque(maxlen=window)

    def absorb(
        self, returns: Iterable[float], lengths: Iterable[int], successes: Iterable[float] = ()
    ) -> None:
        returns = list(returns)
        self.recent_returns.extend(returns)
        self.recent_lengths.extend(lengths)
        self.recent_successes.extend(successes)
        self.episodes += len(returns)

"""A preallocated numpy replay buffer for off-policy algorithms (SAC).

It stores ``terminated`` and ``truncated`` separately, so a learner bootstraps through time
limits and not through real terminations, and it samples with its own seeded
``numpy.random.Generator`` whose state travels with :meth:`ReplayBuffer.state_dict`, so a
resumed run draws exactly the minibatches the uninterrupted one would have drawn.

Numpy only: no torch import, so env and rollout processes can hold one cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ReplayBatch", "ReplayBuffer"]

_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")


@dataclass(frozen=True)
class ReplayBatch:
    """A sampled minibatch: ``obs`` ``[B, *obs_shape]``, ``actions`` ``[B, *action_shape]``,
    ``rewards`` ``[B]``, ``next_obs`` ``[B, *obs_shape]`` (the real final observation on
    truncation), ``terminated`` and ``truncated`` ``[B]`` bool."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray


class ReplayBuffer:
    """A ring buffer of transitions with ``capacity`` slots.

    Args:
        capacity: the number of transitions kept (the oldest are overwritten).
        obs_shape: the shape of one observation.
        action_shape: the shape of one action.
        seed: the seed of the sampling generator.
        obs_dtype: the dtype observations are stored in (``float32`` by default).
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        *,
        seed: int | None = 0,
        obs_dtype: Any = np.float32,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"ReplayBuffer capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.obs_shape = tuple(obs_shape)
        self.action_shape = tuple(action_shape)
        self.obs = np.zeros((capacity, *self.obs_shape), dtype=obs_dtype)
        self.next_obs = np.zeros((capacity, *self.obs_shape), dtype=obs_dtype)
        self.actions = np.zeros((capacity, *self.action_shape), dtype=np.float32)
        self.rewards = np.zeros((capacity,), dtype=np.float32)
        self.terminated = np.zeros((capacity,), dtype=bool)
        self.truncated = np.zeros((capacity,), dtype=bool)
        self.pos = 0
        self.size = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        """Store ``n`` transitions (one per vector-env slot): ``obs`` ``[n, *obs_shape]``,
        ``actions`` ``[n, *action_shape]``, ``rewards``/``terminated``/``truncated`` ``[n]``, and
        ``next_obs`` ``[n, *obs_shape]``, which must be the *final* observation (not the reset
        one) where an episode ended."""
        obs = np.asarray(obs)
        n = obs.shape[0]
        if obs.shape[1:] != self.obs_shape or np.shape(next_obs) != obs.shape:
            raise ValueError(
                f"ReplayBuffer.add: obs {obs.shape} / next_obs {np.shape(next_obs)} do not match "
                f"[n, *{self.obs_shape}]"
            )
        if np.shape(actions) != (n, *self.action_shape):
            raise ValueError(
                f"ReplayBuffer.add: actions {np.shape(actions)} is not [{n}, *{self.action_shape}]"
            )
        for name, arr in (("rewards", rewards), ("terminated", terminated), ("truncated", truncated)):
            if np.shape(arr) != (n,):
                raise ValueError(f"ReplayBuffer.add: {name} {np.shape(arr)} is not [{n}]")
        if n > self.capacity:  # keep only the newest `capacity`
            sl = slice(n - self.capacity, n)
            obs, actions, next_obs = obs[sl], np.asarray(actions)[sl], np.asarray(next_obs)[sl]
            rewards, terminated, truncated = (
                np.asarray(rewards)[sl],
                np.asarray(terminated)[sl],
                np.asarray(truncated)[sl],
            )
            n = self.capacity
        idx = (self.pos + np.arange(n)) % self.capacity
        self.obs[idx] = obs
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        self.next_obs[idx] = next_obs
        self.terminated[idx] = terminated
        self.truncated[idx] = truncated
        self.pos = int((self.pos + n) % self.capacity)
        self.size = int(min(self.size + n, self.capacity))

    def sample(self, batch_size: int) -> ReplayBatch:
        """``batch_size`` transitions drawn uniformly with replacement from what is stored."""
        if self.size == 0:
            raise ValueError("ReplayBuffer.sample: the buffer is empty")
        idx = self.rng.integers(0, self.size, size=batch_size)
        return ReplayBatch(
            obs=self.obs[idx],
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            next_obs=self.next_obs[idx],
            terminated=self.terminated[idx],
            truncated=self.truncated[idx],
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: the stored transitions (only the filled part), the write
        position and the sampling generator's state."""
        return {
            "capacity": self.capacity,
            "obs_shape": self.obs_shape,
            "action_shape": self.action_shape,
            "pos": self.pos,
            "size": self.size,
            "rng": self.rng.bit_generator.state,
            **{name: getattr(self, name)[: self.size].copy() for name in _FIELDS},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; a buffer of another capacity or shape is an error."""
        for key, mine in (
            ("capacity", self.capacity),
            ("obs_shape", self.obs_shape),
            ("action_shape", self.action_shape),
        ):
            theirs = tuple(state[key]) if isinstance(mine, tuple) else state[key]
            if theirs != mine:
                raise ValueError(f"ReplayBuffer.load_state_dict: {key} is {theirs} in the state, {mine} here")
        size = int(state["size"])
        for name in _FIELDS:
            getattr(self, name)[:size] = state[name]
        self.pos = int(state["pos"])
        self.size = size
        self.rng.bit_generator.state = state["rng"]

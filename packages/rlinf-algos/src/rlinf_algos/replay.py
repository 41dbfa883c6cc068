"""A preallocated numpy replay buffer for off-policy algorithms (SAC).

It stores ``terminated`` and ``truncated`` separately, so a learner bootstraps through time
limits and not through real terminations, and it samples with its own seeded
``numpy.random.Generator`` whose state travels with :meth:`ReplayBuffer.state_dict`, so a
resumed run draws exactly the minibatches the uninterrupted one would have drawn.

Numpy only: no torch import, so env and rollout processes can hold one cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlinf_algos import obs as obs_tree

__all__ = ["ReplayBatch", "ReplayBuffer"]

_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")


@dataclass(frozen=True)
class ReplayBatch:
    """A sampled minibatch: ``obs`` ``[B, *obs_shape]``, ``actions`` ``[B, *action_shape]``,
    ``rewards`` ``[B]``, ``next_obs`` ``[B, *obs_shape]`` (the real final observation on
    truncation), ``terminated`` and ``truncated`` ``[B]`` bool. Dict observations come as dicts
    of such arrays."""

    obs: Any
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: Any
    terminated: np.ndarray
    truncated: np.ndarray


class ReplayBuffer:
    """A ring buffer of transitions with ``capacity`` slots.

    Args:
        capacity: the number of transitions kept (the oldest are overwritten).
        obs_shape: the shape of one observation; for dict observations (:mod:`rlinf_algos.obs`)
            ``{key: (shape, dtype)}`` (images stay ``uint8``, instructions fixed-width strings).
        action_shape: the shape of one action.
        seed: the seed of the sampling generator.
        obs_dtype: the dtype a vector observation is stored in (``float32`` by default).
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...] | Mapping[str, tuple[tuple[int, ...], Any]],
        action_shape: tuple[int, ...],
        *,
        seed: int | None = 0,
        obs_dtype: Any = np.float32,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"ReplayBuffer capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.action_shape = tuple(action_shape)
        if isinstance(obs_shape, Mapping):
            self.obs_shape: Any = {
                k: (tuple(shape), np.dtype(dt).str) for k, (shape, dt) in obs_shape.items()
            }
            self.obs: Any = {k: np.zeros((capacity, *sh), dtype=dt) for k, (sh, dt) in self.obs_shape.items()}
            self.next_obs: Any = {
                k: np.zeros((capacity, *sh), dtype=dt) for k, (sh, dt) in self.obs_shape.items()
            }
        else:
            self.obs_shape = tuple(obs_shape)
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
        obs: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: Any,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        """Store ``n`` transitions (one per vector-env slot): ``obs`` ``[n, *obs_shape]``,
        ``actions`` ``[n, *action_shape]``, ``rewards``/``terminated``/``truncated`` ``[n]``, and
        ``next_obs`` ``[n, *obs_shape]``, which must be the *final* observation (not the reset
        one) where an episode ended."""
        n = obs_tree.batch_size(obs)
        shapes = self.obs_shape if isinstance(self.obs_shape, dict) else {None: (self.obs_shape, None)}
        for key, (shape, _) in shapes.items():
            o = obs if key is None else obs.get(key) if isinstance(obs, Mapping) else None
            nx = next_obs if key is None else next_obs.get(key) if isinstance(next_obs, Mapping) else None
            if o is None or np.shape(o)[1:] != shape or np.shape(nx) != np.shape(o):
                where = "" if key is None else f"[{key!r}]"
                raise ValueError(
                    f"ReplayBuffer.add: obs{where} {np.shape(o)} / next_obs{where} {np.shape(nx)} do not "
                    f"match [n, *{shape}]"
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
            obs, actions, next_obs = (
                obs_tree.take(obs, sl),
                np.asarray(actions)[sl],
                obs_tree.take(next_obs, sl),
            )
            rewards, terminated, truncated = (
                np.asarray(rewards)[sl],
                np.asarray(terminated)[sl],
                np.asarray(truncated)[sl],
            )
            n = self.capacity
        idx = (self.pos + np.arange(n)) % self.capacity
        obs_tree.put(self.obs, idx, obs)
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        obs_tree.put(self.next_obs, idx, next_obs)
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
            obs=obs_tree.take(self.obs, idx),
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            next_obs=obs_tree.take(self.next_obs, idx),
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
            **{
                name: obs_tree.tree_map(np.copy, obs_tree.take(getattr(self, name), slice(self.size)))
                for name in _FIELDS
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; a buffer of another capacity or shape is an error."""
        for key, mine in (
            ("capacity", self.capacity),
            ("obs_shape", self.obs_shape),
            ("action_shape", self.action_shape),
        ):
            theirs = tuple(state[key]) if isinstance(mine, tuple) else state[key]
            if isinstance(mine, dict):
                theirs = {k: (tuple(v[0]), v[1]) for k, v in theirs.items()}
            if theirs != mine:
                raise ValueError(f"ReplayBuffer.load_state_dict: {key} is {theirs} in the state, {mine} here")
        size = int(state["size"])
        for name in _FIELDS:
            obs_tree.put(getattr(self, name), slice(size), state[name])
        self.pos = int(state["pos"])
        self.size = size
        self.rng.bit_generator.state = state["rng"]

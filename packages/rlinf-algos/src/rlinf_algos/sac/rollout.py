"""SAC's rollout: act in every env and stream the transitions to the learner in chunks, run by a
rollout worker over its env links (the same port as PPO's; :class:`~rlinf_algos.ports.LocalPort`
is one over a vector env of its own)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlinf_algos import obs as obs_tree

__all__ = ["collect_sac"]

TRANSITION_KEYS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")


def collect_sac(
    port: Any,
    policy: Callable[[], Any],
    T: int,
    rng: np.random.Generator,
    action_low: np.ndarray,
    action_high: np.ndarray,
    emit: Callable[[dict[str, np.ndarray]], None],
    random_actions: bool = False,
    chunk_steps: int = 8,
) -> None:
    """``T`` steps of every stage of ``port``; the transitions go to ``emit`` every
    ``chunk_steps`` steps and once at the end, as ``[B, ...]`` arrays ``obs``, ``actions``,
    ``rewards``, ``next_obs`` (the true final observation where an episode ended),
    ``terminated`` and ``truncated`` (kept apart). ``policy()`` gives the actor to act with (read
    at every step: the learner may have published newer weights in between); before learning
    starts actions are uniform in ``[action_low, action_high]`` (``random_actions``). ``emit`` runs
    with gradients enabled (a caller may learn in it)."""
    S = port.stages
    current: list[np.ndarray] = [port.recv(s)["obs"] for s in range(S)]
    pending: list[tuple[np.ndarray, np.ndarray]] = [None] * S  # type: ignore[list-item]
    chunk: dict[str, list[np.ndarray]] = {k: [] for k in TRANSITION_KEYS}

    def absorb(s: int, msg: dict[str, Any]) -> None:
        obs, actions = pending[s]
        nxt = msg["obs"]
        if "final" in msg:
            nxt = obs_tree.tree_map(np.copy, nxt)
            idx, rows = msg["final"]
            obs_tree.put(nxt, idx, rows)
        for key, value in zip(
            TRANSITION_KEYS, (obs, actions, msg["rew"], nxt, msg["term"], msg["trunc"]), strict=True
        ):
            chunk[key].append(value)

    def flush() -> None:
        if not chunk["obs"]:
            return
        item = {k: obs_tree.concat(v, 0) for k, v in chunk.items()}
        for v in chunk.values():
            v.clear()
        emit(item)

    for t in range(T):
        for s in range(S):
            if t > 0:
                msg = port.recv(s)
                absorb(s, msg)
                current[s] = msg["obs"]
            obs = current[s]
            if random_actions:
                n = obs_tree.batch_size(obs)
                actions = rng.uniform(action_low, action_high, size=(n, action_low.shape[0]))
                actions = actions.astype(np.float32)
            else:
                with torch.no_grad():
                    actions = policy().predict(obs, deterministic=False).numpy()
            port.send(s, actions)
            pending[s] = (obs, actions)
        if t > 0 and t % chunk_steps == 0:
            flush()
    for s in range(S):
        absorb(s, port.recv(s))
    flush()

"""The channel keys and the abort marker the runtime and the algorithms' flows share.

Keys carry a *generation* (``gen``): when a worker dies the driver ends the generation (an
:data:`ABORT` on each key a consumer may wait on), restarts the worker and runs the iteration
again under the next generation, so a partial batch is never mixed into a later one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "ABORT",
    "Aborted",
    "advantage_key",
    "get_all",
    "get_item",
    "grpo_keys",
    "is_abort",
    "reward_key",
    "scored_key",
    "traj_key",
]

ABORT = "__rlinf_abort__"
"""The item the driver puts on a generation's keys to end an iteration early."""


class Aborted(Exception):
    """The driver ended the iteration a worker was in (an ``ABORT`` on the key it read)."""


def is_abort(item: Any) -> bool:
    """``item`` is the driver's :data:`ABORT`."""
    return isinstance(item, str) and item == ABORT


def traj_key(gen: int | str, rollout_rank: int) -> str:
    """Trajectories of rollout rank ``r``: to the actor (PPO, SAC) or the reference (GRPO)."""
    return f"g{gen}/t/{rollout_rank}"


def reward_key(gen: int | str, rollout_rank: int) -> str:
    """GRPO: episode outcomes of rollout rank ``r`` to the reward worker."""
    return f"g{gen}/r/{rollout_rank}"


def scored_key(gen: int | str, rollout_rank: int) -> str:
    """GRPO: the sequences of rollout rank ``r`` with reference log-probabilities, to the actor."""
    return f"g{gen}/a/{rollout_rank}"


def advantage_key(gen: int | str) -> str:
    """GRPO: the group advantages of a generation's episodes, from the reward worker to the actor."""
    return f"g{gen}/adv"


def grpo_keys(gen: int | str, rollout_world: int) -> list[str]:
    """Every key a GRPO consumer may wait on for one batch (the driver aborts them all); GRPO's
    keys are per iteration, ``gen`` is ``"<generation>.<iteration>"``."""
    per_rank = [f(gen, r) for r in range(rollout_world) for f in (traj_key, reward_key, scored_key)]
    return [*per_rank, advantage_key(gen)]


def get_item(ch: Any, key: str, timeout: float) -> Any:
    """One item of ``key``; ``None`` for the driver's :data:`ABORT`."""
    item = ch.get(key, timeout=timeout)
    return None if is_abort(item) else item


def get_all(ch: Any, keys: Iterable[str], timeout: float) -> list[Any] | None:
    """One item of each key, in order; ``None`` as soon as one is the driver's :data:`ABORT`."""
    items = []
    for key in keys:
        item = get_item(ch, key, timeout)
        if item is None:
            return None
        items.append(item)
    return items

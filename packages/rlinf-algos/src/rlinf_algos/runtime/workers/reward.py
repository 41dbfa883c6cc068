"""The reward role: scores what the rollouts produced. Needs no model and no accelerator, so it
can be placed on CPU-only nodes (a light process: ``threads: 0`` leaves torch unimported). The body
the flow gives it does the scoring: an embodied flow's group advantages from episode returns, a
language-model flow's verifier or user reward over the episodes of an iteration.

The body: ``score(*args, **kwargs)`` (statistics of what it scored, or ``{"aborted": True}`` when
the driver ended the iteration).
"""

from __future__ import annotations

from typing import Any

from rlinf_algos.runtime.workers.base import RoleWorker

__all__ = ["RewardWorker"]


class RewardWorker(RoleWorker):
    """The reward component's process (see the module docstring)."""

    role = "reward"

    def score(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Score one iteration's (or evaluation's) outputs, as the flow's body does."""
        return self._body_call("score")(*args, **kwargs)

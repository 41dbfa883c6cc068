"""The agent role: plays episodes. An agent never holds the model: it asks the rollout ranks for
generations (over the ``gen`` channel) and puts the finished episodes on the ``episodes`` channel
for the reward component, so agents are light processes (``threads: 0``) and many of them can be
placed on CPU nodes. What an episode is belongs to the flow's task: the body plays it (a single
turn, a lead and its subagents, a multi-turn tool-using episode whose tools run in placed
processes), so a new kind of episode is a new body, not a new role.

The body: ``play(key, problems, group_size, temperature, min_version, report)`` (counts and
seconds, or ``{"aborted": True}`` when the driver ended the iteration).
"""

from __future__ import annotations

from typing import Any

from rlinf_algos.runtime.workers.base import RoleWorker

__all__ = ["AgentWorker"]


class AgentWorker(RoleWorker):
    """The agent component's process (see the module docstring)."""

    role = "agent"

    def play(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Play the episodes of a share of an iteration's problems, as the flow's body does."""
        return self._body_call("play")(*args, **kwargs)

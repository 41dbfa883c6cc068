"""The tool role: runs the tools an agent's episodes call (a search index, a code sandbox, a
user's tools), on CPU-only nodes (a light process: ``threads: 0`` leaves torch unimported). The
body the flow gives it loads the tools once and serves calls over the run's ``tools`` channel,
many at once, each under its timeout (:class:`~rlinf_algos.tools.placed.ToolServer`).

The body: ``serve()`` (answers calls until the driver's stop; returns counts and figures).
"""

from __future__ import annotations

from typing import Any

from rlinf_algos.runtime.workers.base import RoleWorker

__all__ = ["ToolWorker"]


class ToolWorker(RoleWorker):
    """The tool component's process (see the module docstring)."""

    role = "tool"

    def serve(self) -> dict[str, Any]:
        """Serve tool calls until the driver stops the loop, as the flow's body does."""
        return self._body_call("serve")()

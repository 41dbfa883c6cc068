"""The embodied flow: what the driver and the role workers get of an embodied algorithm's
:class:`~rlinf_algos.flow.Recipe`."""

from __future__ import annotations

from typing import Any

from rlinf_algos.embodied.roles import EmbodiedLearner, EmbodiedRollout
from rlinf_algos.flow import Recipe

__all__ = ["EmbodiedFlow"]


class EmbodiedFlow:
    """An embodied algorithm's flow over its recipe; it travels to the worker processes, where
    :meth:`body` builds each role's domain object."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    @property
    def name(self) -> str:
        return self.recipe.name

    def body(self, role: str, host: Any) -> Any:
        """The body of ``role`` in its worker's process (``host``)."""
        if role == "rollout":
            return EmbodiedRollout(host, self.recipe)
        if role == "actor":
            return EmbodiedLearner(host, self.recipe)
        return self.recipe.body(role, host)

"""The embodied flow: an embodied algorithm's :class:`~rlinf_algos.embodied.recipe.Recipe` as the driver and
the role workers see it: env, rollout and actor workers and the recipe's extra components
(:mod:`rlinf_algos.embodied.placed`), whose bodies are :mod:`rlinf_algos.embodied.roles` and the
recipe's own; on any scheduler (``runner.scheduler: local`` runs them in the driver's process,
:mod:`rlinf_algos.runtime.inprocess`)."""

from __future__ import annotations

from typing import Any

from rlinf_algos.embodied.recipe import Recipe
from rlinf_algos.embodied.roles import EmbodiedLearner, EmbodiedRollout
from rlinf_algos.flow import Flow, FlowRun

__all__ = ["EmbodiedFlow"]


class EmbodiedFlow(Flow):
    """An embodied algorithm's flow over its recipe and the run's sections (``env``, ``model``,
    ``runner``, ``rollout``, ``actor``); it travels to the worker processes."""

    def __init__(self, recipe: Recipe, sections: Any) -> None:
        self.recipe = recipe
        self.sections = sections

    @property
    def name(self) -> str:
        return self.recipe.name

    @property
    def runner(self) -> Any:
        return self.sections.runner

    def placed(self, driver: Any) -> FlowRun:
        from rlinf_algos.embodied.placed import EmbodiedPlacedRun

        return EmbodiedPlacedRun(driver, self)

    def body(self, role: str, host: Any) -> Any:
        """The body of ``role`` in its worker's process (``host``)."""
        if role == "rollout":
            return EmbodiedRollout(host, self.recipe)
        if role == "actor":
            return EmbodiedLearner(host, self.recipe)
        return self.recipe.body(role, host)

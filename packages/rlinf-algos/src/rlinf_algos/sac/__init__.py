"""SAC: soft actor-critic with twin critics, Polyak targets and a learned temperature.

Light on purpose (pydantic and rlinf_core only, for the plugin). The pieces:
:mod:`~rlinf_algos.sac.config`, :mod:`~rlinf_algos.sac.functional` (the maths),
:mod:`~rlinf_algos.sac.learner` (three update orders), :mod:`~rlinf_algos.sac.rollout` and
:mod:`~rlinf_algos.sac.recipe`.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel

from rlinf_algos.algorithm import EmbodiedAlgorithm
from rlinf_algos.recipe import Recipe
from rlinf_algos.sac.config import SACConfig

__all__ = ["SAC", "SACConfig"]


class SAC(EmbodiedAlgorithm):
    """Soft actor-critic with twin critics, Polyak targets and a learned temperature."""

    PLUGIN_NAME: ClassVar[str] = "sac"
    config_model: ClassVar[type[BaseModel]] = SACConfig

    def recipe(self) -> Recipe:
        from rlinf_algos.sac.recipe import SACRecipe

        return SACRecipe(self.config)

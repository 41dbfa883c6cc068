"""SAC: soft actor-critic with twin critics, Polyak targets and a learned temperature.

Light on purpose (pydantic and rlinf_core only, for the plugin). The pieces:
:mod:`~rlinf_algos.sac.config`, :mod:`~rlinf_algos.sac.functional` (the maths),
:mod:`~rlinf_algos.sac.learner` (three update orders), :mod:`~rlinf_algos.sac.rollout` and
:mod:`~rlinf_algos.sac.recipe`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from rlinf_algos.embodied.algorithm import EmbodiedAlgorithm
from rlinf_algos.embodied.recipe import Recipe
from rlinf_algos.sac.config import SACConfig

__all__ = ["SAC", "SACConfig"]


class SAC(EmbodiedAlgorithm):
    """Soft actor-critic with twin critics, Polyak targets and a learned temperature."""

    PLUGIN_NAME: ClassVar[str] = "sac"
    config_model: ClassVar[type[BaseModel]] = SACConfig

    network_copies: ClassVar[int] = 5
    """The actor, two critics and their two targets."""

    action_space_hint: ClassVar[str] = (
        "SAC-Discrete is not implemented; use algorithm.name: ppo, which trains discrete, multi-discrete, "
        "multi-binary and hybrid (dict/tuple) action spaces"
    )

    multi_rank_learner: ClassVar[bool] = False
    """SAC's learner stays one process: it takes one gradient step per few hundred streamed
    transitions (``algorithm.utd_ratio`` steps per chunk, batches of ``batch_size`` from the replay
    buffer it holds), so a step is a few small matrix products and a gradient all-reduce would
    cost more than it splits; more throughput comes from more env and rollout workers."""

    @classmethod
    def memory_items(cls, sections: Any, algo_config: Any) -> list[tuple[str, str, int]]:
        """Adds the replay buffer: per transition observation, next observation, action, reward
        and flags (5 float32 at least)."""
        size = algo_config.buffer_size
        return [
            *super().memory_items(sections, algo_config),
            ("algorithm.buffer_size", f"a replay buffer of {size:,} transitions", size * 5 * 4),
        ]

    def recipe(self) -> Recipe:
        from rlinf_algos.sac.recipe import SACRecipe

        return SACRecipe(self.config)

"""PPO: proximal policy optimisation with a Gaussian actor-critic.

Light on purpose (pydantic and rlinf_core only, for the plugin). The pieces:
:mod:`~rlinf_algos.ppo.config` (the ``algorithm`` section), :mod:`~rlinf_algos.ppo.functional`
(the maths as free functions), :mod:`~rlinf_algos.ppo.learner`, :mod:`~rlinf_algos.ppo.rollout`
(the collection loop) and :mod:`~rlinf_algos.ppo.recipe` (the flow both runtimes run).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from rlinf_algos.embodied.algorithm import EmbodiedAlgorithm, rollout_item
from rlinf_algos.embodied.recipe import Recipe
from rlinf_algos.ppo.config import PPOConfig

__all__ = ["PPO", "PPOConfig"]


class PPO(EmbodiedAlgorithm):
    """Proximal policy optimisation with an MLP policy (a Gaussian over continuous actions;
    Categorical, Bernoulli and Normal parts over discrete, multi-binary and hybrid ones) and a
    value critic."""

    PLUGIN_NAME: ClassVar[str] = "ppo"
    config_model: ClassVar[type[BaseModel]] = PPOConfig

    action_kinds: ClassVar[tuple[str, ...]] = ("box", "discrete", "multi_discrete", "multi_binary")

    @classmethod
    def memory_items(cls, sections: Any, algo_config: Any) -> list[tuple[str, str, int]]:
        """Adds the rollout buffer: per step observation, action, mean, log-prob, reward, value,
        flags, advantage and return (9 float32 at least), and one log-ratio per update epoch."""
        return [
            *super().memory_items(sections, algo_config),
            rollout_item(
                sections,
                algo_config.rollout_steps,
                "algorithm.rollout_steps",
                9 + algo_config.update_epochs,
                "a rollout buffer",
            ),
        ]

    def recipe(self) -> Recipe:
        from rlinf_algos.ppo.recipe import PPORecipe

        return PPORecipe(self.config)

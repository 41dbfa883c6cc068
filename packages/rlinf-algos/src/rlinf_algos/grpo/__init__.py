"""GRPO on embodied tasks: group-relative advantages of whole episodes, no critic.

Light on purpose (pydantic and rlinf_core only, for the plugin). The pieces:
:mod:`~rlinf_algos.grpo.config`, :mod:`~rlinf_algos.grpo.functional` (the maths, shared with the
language-model GRPO), :mod:`~rlinf_algos.grpo.learner`, :mod:`~rlinf_algos.grpo.rollout`,
:mod:`~rlinf_algos.grpo.roles` (the reward and reference bodies) and
:mod:`~rlinf_algos.grpo.recipe`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

from rlinf_algos.embodied.algorithm import EmbodiedAlgorithm, rollout_item
from rlinf_algos.embodied.recipe import Recipe
from rlinf_algos.grpo.config import GRPOConfig
from rlinf_core.errors import ConfigProblem

__all__ = ["GRPO", "GRPOConfig"]


class GRPO(EmbodiedAlgorithm):
    """Group relative policy optimisation: groups of episodes from one initial state, their returns
    normalised within the group as advantages, a clipped ratio and a k3 KL to a frozen reference.

    On workers (``runner.scheduler: ray``, the default) the env workers reset each group's
    copies from one seed and run every episode to its end, the rollout workers act and record the
    episodes, the ``reward`` worker turns the returns into group advantages, the ``reference``
    worker adds the frozen policy's log-probabilities, and the actor updates; with
    ``runner.scheduler: local`` all of it runs in the rlinf process. The language-model GRPO is
    ``grpo_lm`` (:mod:`rlinf_algos.lm`)."""

    PLUGIN_NAME: ClassVar[str] = "grpo"
    config_model: ClassVar[type[BaseModel]] = GRPOConfig
    components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor", "reward", "reference")
    required_components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor", "reward")
    """The ``reference`` is required too when ``algorithm.kl_coef > 0`` (its KL term uses it):
    :meth:`validate_sections` checks that; at ``kl_coef: 0`` none is started."""
    action_kinds: ClassVar[tuple[str, ...]] = ("box", "discrete", "multi_discrete", "multi_binary")

    @classmethod
    def algorithm_fit_problems(cls, sections: Any, algorithm_config: Any) -> list[ConfigProblem]:
        """The memory check, and whether ``env.num_envs`` holds exactly the groups of an
        iteration (``group_size * num_groups``)."""
        problems = super().algorithm_fit_problems(sections, algorithm_config)
        if algorithm_config is None:
            return problems
        need = algorithm_config.group_size * algorithm_config.num_groups
        if sections.env.num_envs != need:
            problems.append(
                ConfigProblem(
                    "env.num_envs",
                    f"GRPO runs one env per episode of an iteration: algorithm.group_size x algorithm.num_groups "
                    f"= {algorithm_config.group_size} x {algorithm_config.num_groups} = {need}, got "
                    f"{sections.env.num_envs}",
                )
            )
        return problems

    @classmethod
    def idle_components(cls, run_config: Mapping[str, Any]) -> dict[str, str]:
        """The placed components a run of ``run_config`` never starts, and why: the
        ``reference`` at ``algorithm.kl_coef: 0`` (``--dry-run`` leaves them out of the plan)."""
        algo = run_config.get("algorithm")
        kl = algo.get("kl_coef", 0.0) if isinstance(algo, Mapping) else 0.0
        if isinstance(kl, int | float) and kl == 0:
            return {"reference": "algorithm.kl_coef is 0: no KL term, no reference is started"}
        return {}

    @classmethod
    def validate_sections(
        cls, run_config: Mapping[str, Any], algorithm_config: Any = None, host: Any = None
    ) -> tuple[Any, list[ConfigProblem]]:
        """The embodied checks, and a ``reference`` missing from the placement while
        ``algorithm.kl_coef > 0``."""
        sections, problems = super().validate_sections(run_config, algorithm_config, host)
        algo = run_config.get("algorithm")
        kl = algo.get("kl_coef", 0.0) if isinstance(algo, Mapping) else 0.0
        runner = run_config.get("runner")
        scheduler = (runner.get("scheduler") if isinstance(runner, Mapping) else None) or "ray"
        cluster = run_config.get("cluster")
        placement = cluster.get("component_placement") if isinstance(cluster, Mapping) else None
        placed = (
            {x.strip() for key in placement for x in str(key).split(",")}
            if isinstance(placement, Mapping)
            else set()
        )
        if (
            scheduler != "local"
            and isinstance(kl, int | float)
            and kl > 0
            and placed
            and "reference" not in placed
        ):
            problems.append(
                ConfigProblem(
                    "cluster.component_placement",
                    f"algorithm.kl_coef is {kl:g}: its KL term needs the reference policy: place a "
                    "`reference` component, or set algorithm.kl_coef: 0",
                )
            )
        return sections, problems

    @classmethod
    def memory_items(cls, sections: Any, algo_config: Any) -> list[tuple[str, str, int]]:
        """Adds the episodes of an iteration when their length is known (env.max_episode_steps):
        observation, action, log-probs of the policy and the reference, reward (5 float32 at least)."""
        items = super().memory_items(sections, algo_config)
        steps = sections.env.max_episode_steps
        if steps is not None:
            items.append(rollout_item(sections, steps, "env.max_episode_steps", 5, "the episodes"))
        return items

    def recipe(self) -> Recipe:
        from rlinf_algos.grpo.recipe import GRPORecipe

        return GRPORecipe(self.config)

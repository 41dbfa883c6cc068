"""The base class of the embodied algorithms (``ppo``, ``sac``, ``grpo``): their shared sections,
checks and the choice of runtime. Light (pydantic and rlinf_core): the plugin imports it."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rlinf_core.algorithm import Algorithm
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError

if TYPE_CHECKING:
    from rlinf_algos.recipe import Recipe

__all__ = ["EmbodiedAlgorithm"]


class EmbodiedAlgorithm(Algorithm):
    """Base class of the algorithms that train a policy in gymnasium environments: validates the
    ``env``, ``model``, ``runner`` and ``rollout`` sections and runs the algorithm's
    :class:`Recipe` in one process or on workers."""

    components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor")
    required_components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor")
    distributed: ClassVar[bool] = True
    sections: ClassVar[tuple[str, ...]] = ("cluster", "algorithm", "env", "model", "runner", "rollout")

    @abstractmethod
    def recipe(self) -> Recipe:
        """The algorithm's flow (imports the training code)."""

    @classmethod
    def run_config_problems(cls, run_config: Mapping[str, Any]) -> list[ConfigProblem]:
        """Every problem of the ``env``, ``model``, ``runner`` and ``rollout`` sections and of how
        they fit the algorithm."""
        from rlinf_algos.config import env_id_problems, load_run_sections

        unknown = super().run_config_problems(run_config)
        try:
            sections = load_run_sections(run_config)
        except ConfigError as err:
            return unknown + list(err.problems) + env_id_problems(run_config)
        return unknown + cls.fit_problems(sections) + _model_problems(sections) + env_id_problems(run_config)

    @classmethod
    def fit_problems(cls, sections: Any) -> list[ConfigProblem]:
        """How the valid sections fit this algorithm (subclasses add theirs)."""
        stages = sections.rollout.pipeline_stages
        if sections.env.num_envs % stages:
            return [
                ConfigProblem(
                    "rollout.pipeline_stages",
                    f"{stages} stages do not divide env.num_envs={sections.env.num_envs}; "
                    "each env worker's envs are split evenly into stages",
                )
            ]
        return []

    def run(
        self,
        scheduler: Any,
        run_config: Any,
        run_dir: Any,
        *,
        resume: bool = False,
        progress: Any = None,
        callbacks: Mapping[str, Callable[..., Any]] | None = None,
        rollout_only: bool = False,
    ) -> dict[str, Any]:
        """Train over the run's sections; write metrics, checkpoints, the final policy and
        ``summary.json`` under ``run_dir``; return the summary. ``scheduler=None`` runs in this
        process (:mod:`rlinf_algos.runtime.local`), a started scheduler on workers
        (:mod:`rlinf_algos.runtime.distributed`)."""
        from rlinf_algos.config import load_run_sections

        sections = load_run_sections(run_config)
        problems = self.fit_problems(sections)
        if problems:
            raise ConfigError(problems)
        if scheduler is None:
            if rollout_only:
                raise RlinfError("rollout_only needs a scheduler (the workers' runtime)")
            from rlinf_algos.runtime.local import train_local

            return train_local(self.recipe(), sections, Path(run_dir), progress=progress, resume=resume)
        from rlinf_algos.runtime.distributed import run_distributed

        return run_distributed(
            self.recipe(),
            sections,
            scheduler,
            Path(run_dir),
            resume=resume,
            progress=progress,
            callbacks=callbacks,
            rollout_only=rollout_only,
        )

    def summary_text(self, summary: Mapping[str, Any]) -> str:
        ret = summary.get("final_return_mean")
        success = summary.get("success_rate")
        return (
            f"done: {summary['total_env_steps']} env steps in {summary['wall_s']:.1f} s "
            f"({summary['env_steps_per_s']:,.0f} steps/s); final return "
            f"{'-' if ret is None else f'{ret:.1f}'}, best {summary.get('best_return_mean')}"
            + ("" if success is None else f", success rate {success:.2f} (last 100 training episodes)")
        )


def _model_problems(sections: Any) -> list[ConfigProblem]:
    """Whether ``model.type`` is registered."""
    from rlinf_algos.models import model_type

    try:
        model_type(sections.model.type)
    except RlinfError as err:
        return [ConfigProblem("model.type", str(err))]
    return []

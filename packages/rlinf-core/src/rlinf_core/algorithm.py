"""The algorithm interface: an RL algorithm's options, its checks and its macro flow.

Everything the training runtime (``rlinf train``) calls on an algorithm is declared here, so an
algorithm of another plugin only has to fill these in: the runtime never looks for optional
methods or keyword arguments.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from rlinf_core.errors import ConfigProblem

__all__ = ["Algorithm", "ProgressFn"]

ProgressFn = Callable[[dict[str, Any]], None]


class Algorithm(ABC):
    """Base class of a training algorithm (``ppo``, ``sac``, ``grpo``...).

    Class attributes:
        PLUGIN_NAME: the name ``algorithm.name`` selects.
        config_model: validates the ``algorithm`` section (paths in errors start at ``algorithm``).
        components: the component names its flow can use (``("actor", "rollout", "env")``).
        required_components: those the ``cluster`` section must place (checked before anything
            starts when the run uses a scheduler).
        distributed: ``True`` if ``runner.scheduler`` defaults to ``ray`` (workers placed by the
            ``cluster`` section); ``False``: to ``local`` (in the rlinf process).
        sections: the top-level YAML sections a run of it may have (others are reported).

    The macro flow lives in :meth:`run`; how each component is placed is the cluster
    configuration's business, so the same flow runs collocated, disaggregated or hybrid.
    """

    PLUGIN_NAME: ClassVar[str]
    config_model: ClassVar[type[BaseModel]]
    components: ClassVar[tuple[str, ...]] = ()
    required_components: ClassVar[tuple[str, ...]] = ()
    distributed: ClassVar[bool] = False
    sections: ClassVar[tuple[str, ...]] = ("cluster", "algorithm", "runner")

    def __init__(self, config: BaseModel) -> None:
        self.config = config

    @classmethod
    def unknown_sections(cls, run_config: Mapping[str, Any]) -> list[ConfigProblem]:
        """One problem per top-level key of the run configuration that is not in :attr:`sections`."""
        return [
            ConfigProblem(str(key), f"unknown section; a {cls.PLUGIN_NAME} run has {', '.join(cls.sections)}")
            for key in run_config
            if key not in cls.sections
        ]

    @classmethod
    def run_config_problems(cls, run_config: Mapping[str, Any]) -> list[ConfigProblem]:
        """Every problem of the run configuration's sections other than ``algorithm`` and
        ``cluster`` (those are the runtime's), each with its YAML path. The default reports
        sections not in :attr:`sections` (:meth:`unknown_sections`)."""
        return cls.unknown_sections(run_config)

    @classmethod
    def validate_sections(
        cls, run_config: Mapping[str, Any], algorithm_config: BaseModel | None = None, host: Any = None
    ) -> tuple[Any, list[ConfigProblem]]:
        """Validate the run configuration's sections other than ``algorithm`` and ``cluster`` in
        one pass: ``(validated, problems)``. ``validated`` is what this algorithm's :meth:`run`
        reads of them (``None`` when nothing was validated or it could not be); ``problems`` every
        problem, each with its YAML path. ``algorithm_config``: the ``algorithm`` section, already
        validated by :attr:`config_model` (``None`` when it is invalid); ``host``: the plugin host
        whose registries count (model types...).

        ``rlinf train`` calls this once, before anything starts
        (:func:`rlinf_algos.config.prepare.prepare_run`), and hands :meth:`run` a mapping that
        carries ``validated``, so :meth:`run` need not validate again. The default validates
        nothing and reports :meth:`run_config_problems`."""
        return None, cls.run_config_problems(run_config)

    @classmethod
    def resolved_config(cls, run_config: Mapping[str, Any]) -> dict[str, Any] | None:
        """The validated run configuration with every default filled in: what the run's
        ``config.yaml`` records and ``rlinf train --dry-run`` prints (fed back, it must run as it
        is). ``None`` (the default): the runtime fills in the sections it knows."""
        return None

    @classmethod
    def latest_checkpoint(cls, run_dir: Path) -> Path | None:
        """The newest checkpoint of ``run_dir`` in this algorithm's own format (what ``--resume``
        continues from), or ``None`` (the default): the runtime's checkpoints are looked for."""
        return None

    @abstractmethod
    def run(
        self,
        scheduler: Any,
        run_config: Any,
        run_dir: Any,
        *,
        resume: bool = False,
        progress: ProgressFn | None = None,
        callbacks: Mapping[str, Callable[..., Any]] | None = None,
        rollout_only: bool = False,
    ) -> dict[str, Any]:
        """Run training to the end of its budget and return its summary metrics.

        Args:
            scheduler: a started :class:`~rlinf_core.scheduler.Scheduler`, or ``None`` to train in
                this process (``runner.scheduler: local``).
            run_config: the validated run configuration: a mapping of sections that, from
                ``rlinf train``, also carries what :meth:`validate_sections` returned.
            run_dir: where the run writes (metrics, checkpoints, the policy, ``summary.json``).
            resume: continue from the newest checkpoint of ``run_dir``.
            progress: called with every metrics row.
            callbacks: named hooks of the runtime (``on_iteration(run, k)``), for tests and tools.
            rollout_only: collect without learning (throughput measurement); an algorithm that
                cannot raises :class:`~rlinf_core.errors.RlinfError`.
        """

    def summary_text(self, summary: Mapping[str, Any]) -> str:
        """The one-line result ``rlinf train`` prints at the end (the summary's scalars by
        default; algorithms say what matters for them)."""
        parts = [
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in summary.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        ]
        return "done: " + ", ".join(parts)

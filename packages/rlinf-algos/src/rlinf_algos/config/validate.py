"""Step 3 of the config pipeline: validate the whole run configuration once, before anything starts.

:func:`validate` takes the ordinary sections (after :mod:`rlinf_algos.config.translate`) and
checks all of them in one pass: the ``algorithm`` section by the algorithm's ``config_model``, the
other sections by the algorithm (:meth:`rlinf_core.algorithm.Algorithm.validate_sections`: the
embodied algorithms' ``env``, ``model`` (by its type's model), ``runner``, ``rollout``, ``actor``;
the language-model algorithms' sections), ``runner.loggers`` and ``runner.scheduler``, and the
``cluster`` section against the algorithm's components. Every problem is one line of one
:class:`~rlinf_core.errors.ConfigError`, with its YAML path. What validation made travels on as a
:class:`Validation`, whose ``config`` (a :class:`~rlinf_algos.config.validated.ValidatedConfig`)
carries the validated sections to ``Algorithm.run``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlinf_algos.config.validated import ValidatedConfig
from rlinf_core.config import describe_value, validate_model
from rlinf_core.errors import ConfigError, ConfigProblem, join_path

if TYPE_CHECKING:
    from rlinf_core.algorithm import Algorithm
    from rlinf_core.plugins import PluginHost

__all__ = ["LOCAL", "Validation", "loggers", "validate", "validate_run_config"]

LOCAL = "local"
"""``runner.scheduler: local`` trains in the rlinf process, without workers."""


@dataclass(frozen=True)
class Validation:
    """What :func:`validate` made of a run configuration: the algorithm's class and its validated
    ``algorithm`` section, the scheduler to start (a registered name, or :data:`LOCAL`), the
    validated sections (the algorithm's ``validate_sections`` result: ``RunSections``,
    ``LMRunConfig``, or ``None`` for an algorithm that validates nothing itself) and ``config``:
    the sections as a read-only mapping that carries them."""

    algorithm_class: type[Algorithm]
    algorithm_config: Any
    scheduler: str
    sections: Any
    config: ValidatedConfig

    def resolved(self) -> dict[str, Any]:
        """Every section with its defaults filled in, from the validated objects (nothing is
        validated again): what the run's ``config.yaml`` holds and ``--dry-run`` prints."""
        own = self.algorithm_class.resolved_config(self.config)
        out = dict(own) if own is not None else dict(self.config)
        if hasattr(self.algorithm_config, "model_dump"):
            out["algorithm"] = self.algorithm_config.model_dump(mode="json")
        return out


def validate_run_config(data: Mapping[str, Any], host: PluginHost | None = None) -> tuple[Any, Any, str]:
    """:func:`validate` as ``(algorithm_class, algorithm_config, scheduler_name)``."""
    checked = validate(data, host)
    return checked.algorithm_class, checked.algorithm_config, checked.scheduler


def validate(data: Mapping[str, Any], host: PluginHost | None = None) -> Validation:
    """Check the whole run configuration (ordinary sections) before anything starts, validating
    each section once; raises one :class:`ConfigError` listing every problem of every section
    with its YAML path."""
    from rlinf_core.plugins import load_plugins

    host = host or load_plugins()
    problems: list[ConfigProblem] = []
    algo_cls = algo_cfg = validated = None
    section = data.get("algorithm")
    names = ", ".join(host.algorithms.names()) or "none (install rlinf-algos)"
    if section is None:
        problems.append(
            ConfigProblem("algorithm", f"missing section; it needs a `name` (registered: {names})")
        )
    elif not isinstance(section, Mapping):
        problems.append(
            ConfigProblem("algorithm", f"must be a mapping with a `name`, got {describe_value(section)}")
        )
    elif "name" not in section:
        problems.append(ConfigProblem("algorithm.name", f"missing; registered algorithms: {names}"))
    elif not isinstance(section["name"], str) or section["name"] not in host.algorithms:
        problems.append(
            ConfigProblem(
                "algorithm.name", f"unknown algorithm {describe_value(section['name'])}; registered: {names}"
            )
        )
    else:
        algo_cls = host.algorithms.get(section["name"])
        try:
            algo_cfg = validate_model(algo_cls.config_model, dict(section), "algorithm")
        except ConfigError as err:
            problems.extend(err.problems)
    cluster = data.get("cluster")
    sections = data
    if cluster is not None and not isinstance(cluster, Mapping):
        problems.append(
            ConfigProblem(
                "cluster",
                f"must be a mapping with num_nodes, node_groups and component_placement, got "
                f"{describe_value(cluster)}",
            )
        )
        sections = {k: v for k, v in data.items() if k != "cluster"}  # reported: not the algorithm's
    if algo_cls is not None:
        validated, found = algo_cls.validate_sections(sections, algo_cfg, host)
        problems.extend(found)
        problems.extend(_logger_problems(data))

    runner = data.get("runner") if isinstance(data.get("runner"), Mapping) else {}
    default = "ray" if algo_cls is None or algo_cls.distributed else LOCAL
    scheduler = runner.get("scheduler") or default
    if not isinstance(scheduler, str):
        scheduler = str(scheduler)
    if scheduler != LOCAL and scheduler not in host.schedulers:
        known = ", ".join([*host.schedulers.names(), LOCAL])
        problems.append(
            ConfigProblem(
                "runner.scheduler", f"unknown scheduler {describe_value(scheduler)}; available: {known}"
            )
        )
    if scheduler != LOCAL and sections is data:
        problems.extend(_cluster_problems(data, algo_cls, host))
    if problems:
        raise ConfigError(problems)
    assert algo_cls is not None  # an unknown algorithm is one of the problems raised above
    return Validation(algo_cls, algo_cfg, scheduler, validated, ValidatedConfig(data, validated))


def loggers(data: Mapping[str, Any]) -> list[str]:
    """``runner.loggers`` other than ``csv`` (the runtime writes metrics.csv itself)."""
    runner = data.get("runner")
    names = runner.get("loggers") if isinstance(runner, Mapping) else None
    if not isinstance(names, list):
        names = ["csv", "tensorboard"]
    return [n for n in names if n != "csv"]


def _logger_problems(data: Mapping[str, Any]) -> list[ConfigProblem]:
    """``wandb`` in ``runner.loggers`` needs the wandb package."""
    if "wandb" not in loggers(data):
        return []
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        return [
            ConfigProblem(
                "runner.loggers",
                "wandb is not installed: pip install wandb (WANDB_MODE=offline logs without a network), "
                "or drop it from the list",
            )
        ]
    return []


def _cluster_problems(
    data: Mapping[str, Any], algo_cls: type[Algorithm] | None, host: PluginHost
) -> list[ConfigProblem]:
    from rlinf_core.cluster import resolve_cluster_partial
    from rlinf_core.compat import split_rlinf_cluster_keys

    cluster = data.get("cluster")
    if cluster is None:
        return [
            ConfigProblem(
                "cluster",
                "missing section; on one machine use `cluster: {num_nodes: 1, component_placement: "
                "{actor: {node_group: node, placement: 0}, ...}}` (see examples/quickstart.yaml), or set "
                "runner.scheduler: local",
            )
        ]
    cluster, _, problems = split_rlinf_cluster_keys(cluster)
    _, resolve_problems = resolve_cluster_partial(cluster, host.hardware)
    problems.extend(resolve_problems)
    placement = cluster.get("component_placement") if isinstance(cluster, Mapping) else None
    required = algo_cls.required_components if algo_cls is not None and algo_cls.distributed else ()
    if required and isinstance(cluster, Mapping) and cluster.get("component_placement", {}) == {}:
        problems.append(
            ConfigProblem(
                "cluster.component_placement",
                f"missing: the {algo_cls.PLUGIN_NAME} workers need a placement of {', '.join(required)} "
                "(e.g. `component_placement: {actor: {node_group: node, placement: 0}, ...}`, see "
                "examples/quickstart.yaml), or set runner.scheduler: local",
            )
        )
    if algo_cls is not None and isinstance(placement, Mapping):
        placed = set()
        for key in placement:
            names = [x.strip() for x in str(key).split(",")]
            placed.update(names)
            unknown = [n for n in names if n and n not in algo_cls.components]
            if unknown and algo_cls.components:
                problems.append(
                    ConfigProblem(
                        _placement_path(key),
                        f"unknown component{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(map(repr, unknown))}: a {algo_cls.PLUGIN_NAME} run has "
                        f"{', '.join(algo_cls.components)}",
                    )
                )
        missing = [c for c in required if c not in placed]
        if placement and missing:
            problems.append(
                ConfigProblem(
                    "cluster.component_placement",
                    f"algorithm {algo_cls.PLUGIN_NAME!r} needs {', '.join(missing)} placed "
                    f"(it runs {', '.join(required)})",
                )
            )
        for key, spec in placement.items():
            multi = getattr(algo_cls, "multi_rank_learner", False)
            if "actor" in [x.strip() for x in str(key).split(",")] and algo_cls.distributed and not multi:
                text = spec.get("placement") if isinstance(spec, Mapping) else spec
                n = _count_processes(text)
                if n is not None and n != 1:
                    problems.append(
                        ConfigProblem(
                            join_path(_placement_path(key), "placement"),
                            f"the {algo_cls.PLUGIN_NAME} actor (learner) runs as one process, got {n} "
                            f"from {describe_value(text)} (its learner is not data-parallel); give it one process, "
                            "e.g. '0' or '0-3:0'",
                        )
                    )
    return problems


def _placement_path(key: Any) -> str:
    text = str(key)
    return join_path("cluster.component_placement", text if len(text) <= 60 else text[:57] + "...")


def _count_processes(text: Any) -> int | None:
    """Processes a placement string asks for, when it says so without the inventory."""
    from rlinf_core.cluster import parse_placement

    try:
        parts = parse_placement(text)
    except ConfigError:
        return None
    count = 0
    for part in parts:
        if part.processes is not None:
            count = part.processes[1] + 1
        elif part.resources is not None:
            count += part.resources[1] - part.resources[0] + 1
        else:
            return None
    return count

"""The entry point behind ``rlinf train``: validate everything, start the scheduler, run.

- :func:`run_training` takes a run configuration (a mapping, as loaded from YAML), validates all
  of it up front (every problem with its YAML path), starts the scheduler the ``runner`` section
  names through the plugin registry (``ray`` by default: an embedded Ray, or the cluster at
  ``RAY_ADDRESS``), runs the algorithm and returns its summary. ``rollout_only=True`` runs the env
  and rollout workers without learning (what ``benchmarks/ppo_throughput.py`` times).
- :func:`validate_run_config` is the up-front check alone; :func:`dry_run` adds the resolved
  configuration and the placement plan (``rlinf train --dry-run``), starting nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rlinf_algos.rundir import (
    check_resume_config,
    default_run_dir,
    existing_run,
    latest_checkpoint,
    make_sinks,
    move_aside,
    remove_stale_temp_files,
)
from rlinf_core.config import describe_value, validate_model
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError, join_path
from rlinf_core.io import atomic_write_text

__all__ = [
    "LOCAL",
    "TrainingInterrupted",
    "compose_run_config",
    "default_run_dir",
    "dry_run",
    "expand_config",
    "run_training",
    "validate_run_config",
]

ProgressFn = Callable[[dict[str, Any]], None]

LOCAL = "local"
"""``runner.scheduler: local`` trains in the rlinf process, without workers."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C ended a run. ``run_dir`` is its directory; ``checkpoint`` the checkpoint written on
    the way out (``None`` if training had not started or none could be written)."""

    def __init__(self, run_dir: Path, checkpoint: Path | None) -> None:
        super().__init__(f"interrupted: {run_dir}")
        self.run_dir, self.checkpoint = run_dir, checkpoint


# -- validation --------------------------------------------------------------------------------


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


def validate_run_config(data: Mapping[str, Any], host: Any = None) -> tuple[Any, Any, str]:
    """Check the whole run configuration before anything starts.

    Returns ``(algorithm_class, algorithm_config, scheduler_name)``; raises one
    :class:`ConfigError` listing every problem of every section with its YAML path.
    """
    from rlinf_core.plugins import load_plugins

    host = host or load_plugins()
    problems: list[ConfigProblem] = []
    algo_cls = algo_cfg = None
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
        problems.extend(algo_cls.run_config_problems(sections))
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
    return algo_cls, algo_cfg, scheduler


def _loggers(data: Mapping[str, Any]) -> list[str]:
    """``runner.loggers`` other than ``csv`` (the runtime writes metrics.csv itself)."""
    runner = data.get("runner")
    names = runner.get("loggers") if isinstance(runner, Mapping) else None
    if not isinstance(names, list):
        names = ["csv", "tensorboard"]
    return [n for n in names if n != "csv"]


def _logger_problems(data: Mapping[str, Any]) -> list[ConfigProblem]:
    """``wandb`` in ``runner.loggers`` needs the wandb package."""
    if "wandb" not in _loggers(data):
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


def dry_run(
    config: Mapping[str, Any] | str | Path,
    *,
    overrides: Iterable[str] = (),
    host: Any = None,
    inventory: Any = None,
    gpu_memory_gib: float | None = None,
) -> dict[str, Any]:
    """Validate ``config`` (with ``overrides``) as :func:`run_training` would and return
    ``{"config": resolved config, "scheduler": name, "plan": placement plan or None,
    "expansion": SeedExpansion or None, "inventory_implied": bool, "memory": per-role estimates
    or None}`` without starting anything; a plan whose estimated memory cannot fit
    (:mod:`rlinf_algos.memory`, against ``gpu_memory_gib`` per GPU) is a :class:`ConfigError`.
    ``inventory``: accelerators per node for the plan (an
    :class:`~rlinf_scheduler.placement.Inventory` or its YAML data; ``None``: none, or for a
    worker-pool config the GPUs its pools imply, with ``inventory_implied`` true)."""
    from rlinf_core.plugins import load_plugins

    host = host or load_plugins()
    data, expansion = expand_config(compose_run_config(config, overrides), host)
    algo_cls, algo_cfg, scheduler_name = _validate(data, host, expansion)
    plan = None
    implied = False
    if scheduler_name != LOCAL:
        from rlinf_scheduler.placement import plan_placement

        if inventory is None and expansion is not None:
            inventory, implied = expansion.inventory, True
        try:
            plan = plan_placement(data["cluster"], inventory, hardware=host)
        except ConfigError as err:
            raise (expansion.translate_error(err) if expansion is not None else err) from None
    from rlinf_algos.parallel import plan_devices, shared_gpu_problems

    device = str((data.get("runner") or {}).get("device", "cpu"))
    shared = shared_gpu_problems(plan, device)
    if shared:
        raise ConfigError(shared[0], "cluster.component_placement")
    from rlinf_algos.memory import check_fits, plan_memory

    resolved, devices = _resolved(data, algo_cfg, algo_cls), plan_devices(plan, device)
    memory = plan_memory(resolved, devices, gpu_memory_gib)
    check_fits(memory or [])
    return {
        "config": resolved,
        "scheduler": scheduler_name,
        "plan": plan,
        "devices": devices,
        "memory": memory,
        "expansion": expansion,
        "inventory_implied": implied,
    }


def compose_run_config(
    config: Mapping[str, Any] | str | Path,
    overrides: Iterable[str] = (),
    config_path: str | Path | None = None,
) -> dict[str, Any]:
    """The first step of every run: the config file (or mapping) composed, overridden and
    resolved (:func:`rlinf_core.compose.compose`: defaults lists, ``key=value``, ``+key``,
    ``~key``, ``${...}``). A mapping's defaults are relative to ``config_path``'s folder."""
    from rlinf_core.compose import compose

    base = (
        Path(config_path).parent if config_path is not None and not isinstance(config, str | Path) else None
    )
    return compose(config, list(overrides), base_dir=base)


def expand_config(data: Mapping[str, Any], host: Any) -> tuple[dict[str, Any], Any]:
    """``(ordinary config, expansion or None)``: a worker-pool (seed 003) config expanded
    (:mod:`rlinf_algos.seed_form`), then RLinf-only ``cluster`` keys dropped
    (:func:`accept_rlinf_keys`)."""
    from rlinf_algos.seed_form import expand_seed_form

    data, expansion = expand_seed_form(data, host)
    return accept_rlinf_keys(data), expansion


def _validate(data: Mapping[str, Any], host: Any, expansion: Any) -> tuple[Any, Any, str]:
    """:func:`validate_run_config`, its problems named by seed key for an expanded config."""
    try:
        return validate_run_config(data, host)
    except ConfigError as err:
        if expansion is None:
            raise
        raise expansion.translate_error(err) from None


def accept_rlinf_keys(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` without the ``cluster`` keys RLinf reads and rlinf does not implement
    (:mod:`rlinf_core.compat`), after one warning naming them; unknown keys stay (and are errors)."""
    from rlinf_core.compat import ignored_keys_warning, split_rlinf_cluster_keys

    out = dict(data)
    cleaned, ignored, _ = split_rlinf_cluster_keys(out.get("cluster"), keep_unknown=True)
    if ignored:
        logging.getLogger("rlinf.config").warning("warning: %s", ignored_keys_warning(ignored))
        out["cluster"] = cleaned
    return out


def _cluster_problems(data: Mapping[str, Any], algo_cls: Any, host: Any) -> list[ConfigProblem]:
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


def _resolved(data: Mapping[str, Any], algo_cfg: Any, algo_cls: Any = None) -> dict[str, Any]:
    own = algo_cls.resolved_config(data) if algo_cls is not None else None
    if own is not None:  # the algorithm knows its sections (a language-model run's)
        return own
    out = dict(data)
    if algo_cfg is not None and hasattr(algo_cfg, "model_dump"):
        out["algorithm"] = algo_cfg.model_dump(mode="json")
    for name, model in _section_models().items():
        if isinstance(out.get(name), Mapping) or name in ("model", "rollout"):
            try:
                out[name] = model.model_validate(out.get(name) or {}).model_dump(mode="json")
            except Exception:  # another algorithm's section: keep it as written
                pass
    return out


def _section_models() -> dict[str, Any]:
    from rlinf_algos.config import ActorConfig, EnvConfig, ModelConfig, RolloutConfig, RunnerConfig

    return {
        "env": EnvConfig,
        "model": ModelConfig,
        "runner": RunnerConfig,
        "rollout": RolloutConfig,
        "actor": ActorConfig,
    }


def run_training(
    config: Mapping[str, Any] | str | Path,
    *,
    run_dir: str | Path | None = None,
    overrides: Iterable[str] = (),
    resume: bool = False,
    progress: ProgressFn | None = None,
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
    rollout_only: bool = False,
    host: Any = None,
    scheduler: Any = None,
    config_path: str | Path | None = None,
    on_started: Callable[[], Any] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Validate ``config`` (with dotted ``overrides`` applied), start the scheduler it names,
    train, and return the summary (also in ``run_dir/summary.json``).

    Args:
        config: the run configuration (``cluster``, ``algorithm``, ``env``, ``model``,
            ``runner``, ``rollout`` sections), or the path of its YAML file; composed first
            (:func:`compose_run_config`: defaults lists, interpolation).
        run_dir: where the run writes; default ``runs/<config stem>-<time>``. With ``resume`` it
            must hold a checkpoint.
        overrides: ``key.path=value``, ``+key=value``, ``++key=value``, ``~key`` strings
            (values parsed as YAML), or ``group=name`` defaults choices.
        resume: continue from the newest checkpoint of ``run_dir``.
        progress: called with every metrics row (a dict with ``step``, ``wall_s``,
            ``episode_return_mean``... and ``total_steps``).
        callbacks: ``{"on_iteration": fn(run, k), "on_collecting": fn(run, k)}`` hooks of the
            workers' runtime (tests, tools; see :mod:`~rlinf_algos.embodied.placed`).
        rollout_only: run env and rollout workers only, no learning (throughput measurement).
        host: a :class:`~rlinf_core.plugins.PluginHost` (default: the installed plugins).
        scheduler: an already started scheduler to use (it is not shut down); default: the one
            ``runner.scheduler`` names, started here and shut down at the end.
        config_path: where ``config`` came from (names the default run directory).
        on_started: called once the scheduler has started, before training (``rlinf train``
            installs its SIGTERM handler there: ``ray.init`` replaces the process's handlers).
        overwrite: ``run_dir`` may hold a run (without ``resume`` that is refused): it is moved
            aside to ``<run_dir>.replaced-<time>``, never deleted.

    Runs are never lost: an existing run directory is refused unless resumed or overwritten;
    temp files a killed run left are removed; a resumed run rewrites ``config.yaml`` only once it
    has started (a failed resume leaves the old one), and drops the metrics rows a killed run
    wrote after its checkpoint.
    """
    import yaml

    from rlinf_core.plugins import load_plugins

    host = host or load_plugins()
    if config_path is None and isinstance(config, str | Path):
        config_path = config
    data, expansion = expand_config(compose_run_config(config, overrides, config_path), host)
    algo_cls, algo_cfg, scheduler_name = _validate(data, host, expansion)
    if expansion is not None:
        from rlinf_algos.seed_form import log_notes

        log_notes(expansion)
    algo = algo_cls(algo_cfg)
    if run_dir is None:
        if resume:
            raise RlinfError("resume needs the run directory to continue (--resume RUN_DIR)")
        run_dir = default_run_dir(config_path)
    run_dir = Path(run_dir)
    log = logging.getLogger("rlinf.train")
    if resume and (algo_cls.latest_checkpoint(run_dir) or latest_checkpoint(run_dir)) is None:
        raise RlinfError(f"nothing to resume in {run_dir}: no checkpoints/step_*.safetensors there")
    if not resume and existing_run(run_dir):
        if not overwrite:
            raise RlinfError(
                f"{run_dir} holds a run ({', '.join(existing_run(run_dir))}); continue it with "
                f"--resume {run_dir}, write elsewhere with another --run-dir, or replace it with "
                "--overwrite (the old run is moved aside, not deleted)"
            )
        log.warning("moved the run that was in %s to %s (--overwrite)", run_dir, move_aside(run_dir))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RlinfError(f"cannot create the run directory {run_dir}: {err.strerror or err}") from None
    for stale in remove_stale_temp_files(run_dir):
        log.warning("removed %s, left by a run killed while it wrote a file", stale)
    resolved = _resolved(data, algo_cfg, algo_cls)
    config_text = yaml.safe_dump(resolved, sort_keys=False)
    if resume:  # config.yaml changes only once the resumed run has started (a failed resume keeps it)
        check_resume_config(run_dir / "config.yaml", resolved)
    else:
        atomic_write_text(run_dir / "config.yaml", config_text)
    config_pending = resume

    sinks = make_sinks(_loggers(resolved), run_dir, resolved)
    total = _total_steps(resolved)

    def write_config() -> None:
        nonlocal config_pending
        if config_pending:
            atomic_write_text(run_dir / "config.yaml", config_text)
            config_pending = False

    def on_row(row: dict[str, Any]) -> None:
        write_config()
        sinks.add(row)
        if progress is not None:
            progress({**row, "total_steps": total})

    own = None
    if scheduler is None and scheduler_name != LOCAL:
        own = scheduler = host.schedulers.get(scheduler_name)(hardware=host)
        scheduler.start(data)
    if on_started is not None:
        on_started()
    started = time.time()
    try:
        summary = algo.run(
            scheduler,
            data,
            run_dir,
            resume=resume,
            progress=on_row,
            callbacks=callbacks,
            rollout_only=rollout_only,
        )
    except (TrainingInterrupted, KeyboardInterrupt) as stop:
        checkpoint = _interrupt_checkpoint(run_dir, started)
        if checkpoint is not None:  # the resumed run got as far as a checkpoint of its own
            write_config()
        if isinstance(stop, TrainingInterrupted):
            raise
        raise TrainingInterrupted(run_dir, checkpoint) from None
    finally:
        sinks.close()
        if own is not None:
            own.shutdown()
    write_config()
    summary = _record_devices(run_dir, summary, getattr(scheduler, "plan", None), data)
    return {**summary, "run_dir": str(run_dir), "summary_text": algo.summary_text(summary)}


def _record_devices(
    run_dir: Path, summary: dict[str, Any], plan: Any, data: Mapping[str, Any]
) -> dict[str, Any]:
    """``summary`` (and ``summary.json``) with ``devices``: each placed role's device per rank
    (:func:`rlinf_algos.parallel.plan_devices`; none under ``runner.scheduler: local``), torch's
    CUDA version and, where this machine sees a GPU, the driver's."""
    import json

    from rlinf_algos.parallel import device_report, plan_devices

    device = str((data.get("runner") or {}).get("device", "cpu"))
    devices = {"runner_device": device, "roles": plan_devices(plan, device), **device_report()}
    summary = {**summary, "devices": devices}
    path = Path(run_dir) / "summary.json"
    if path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            return summary
        if isinstance(stored, dict):
            atomic_write_text(path, json.dumps({**stored, "devices": devices}, indent=2) + "\n")
    return summary


def _interrupt_checkpoint(run_dir: Path, since: float) -> Path | None:
    """The checkpoint an interrupted run wrote after ``since`` (epoch seconds), if any."""
    path = latest_checkpoint(run_dir)
    return path if path is not None and path.stat().st_mtime >= since else None


def _total_steps(data: Mapping[str, Any]) -> int | None:
    runner = data.get("runner")
    if isinstance(runner, Mapping) and isinstance(runner.get("total_steps"), int):
        return int(runner["total_steps"])
    algorithm = data.get("algorithm")  # a language-model run: one metrics row per iteration
    if isinstance(algorithm, Mapping) and isinstance(algorithm.get("iterations"), int):
        return int(algorithm["iterations"])
    return None

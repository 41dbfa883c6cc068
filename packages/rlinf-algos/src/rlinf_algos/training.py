"""The entry point behind ``rlinf train``: take a prepared run configuration, start the scheduler, run.

:func:`run_training` takes a run configuration (a YAML path, a mapping, or a
:class:`~rlinf_algos.config.prepare.PreparedRun`), takes it through the config pipeline
(:func:`rlinf_algos.config.prepare.prepare_run`: compose, translate, validate once) unless it is
prepared already, sets up the run directory, starts the scheduler the ``runner`` section names
through the plugin registry (``ray`` by default: an embedded Ray, or the cluster at
``RAY_ADDRESS``), runs the algorithm with the validated configuration and returns its summary.
``rollout_only=True`` runs the env and rollout workers without learning (what
``benchmarks/ppo_throughput.py`` times).

The pipeline's steps used to live here; they are re-exported for older callers:
:func:`~rlinf_algos.config.validate.validate_run_config`, :func:`~rlinf_algos.config.prepare.dry_run`
and :func:`~rlinf_algos.config.prepare.compose_run_config`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rlinf_algos.config.prepare import PreparedRun, compose_run_config, dry_run, prepare_run
from rlinf_algos.config.validate import LOCAL, loggers, validate_run_config
from rlinf_algos.rundir import (
    check_resume_config,
    default_run_dir,
    existing_run,
    latest_checkpoint,
    make_sinks,
    move_aside,
    remove_stale_temp_files,
)
from rlinf_core.errors import ConfigError, RlinfError
from rlinf_core.io import atomic_write_text

__all__ = [
    "LOCAL",
    "TrainingInterrupted",
    "compose_run_config",
    "default_run_dir",
    "dry_run",
    "run_training",
    "validate_run_config",
]

ProgressFn = Callable[[dict[str, Any]], None]


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C ended a run. ``run_dir`` is its directory; ``checkpoint`` the checkpoint written on
    the way out (``None`` if training had not started or none could be written); ``skipped``:
    what a stop that could not wait for the iteration in flight did not write (``None``: it
    wrote everything), with ``checkpoint`` then the last one written before."""

    def __init__(self, run_dir: Path, checkpoint: Path | None, skipped: str | None = None) -> None:
        super().__init__(f"interrupted: {run_dir}")
        self.run_dir, self.checkpoint, self.skipped = run_dir, checkpoint, skipped


def run_training(
    config: Mapping[str, Any] | str | Path | PreparedRun,
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
    """Prepare ``config`` (with dotted ``overrides`` applied; :func:`prepare_run`), start the
    scheduler it names, train, and return the summary (also in ``run_dir/summary.json``).

    Args:
        config: the run configuration (``cluster``, ``algorithm``, ``env``, ``model``,
            ``runner``, ``rollout`` sections), or the path of its YAML file (composed, translated
            and validated by :func:`prepare_run`), or a :class:`PreparedRun` (run as it is:
            ``overrides``, ``host`` and ``config_path`` were its :func:`prepare_run`'s).
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

    if isinstance(config, PreparedRun):
        if list(overrides) or config_path is not None:
            raise TypeError("a PreparedRun is run as it is: give overrides and config_path to prepare_run")
        prepared = config
    else:
        prepared = prepare_run(config, overrides, config_path=config_path, host=host)
    host, data, algo_cls = prepared.host, prepared.config, prepared.algorithm_class
    scheduler_name = prepared.scheduler
    if prepared.expansion is not None:
        from rlinf_algos.config.seed_form import log_notes

        log_notes(prepared.expansion)
    algo = prepared.algorithm()
    if run_dir is None:
        if resume:
            raise RlinfError("resume needs the run directory to continue (--resume RUN_DIR)")
        run_dir = default_run_dir(prepared.config_path)
    run_dir = Path(run_dir)
    log = logging.getLogger("rlinf.train")
    again = False  # a run stopped before training started: resumed by starting it again in place
    if resume and (algo_cls.latest_checkpoint(run_dir) or latest_checkpoint(run_dir)) is None:
        if not run_dir.is_dir() or existing_run(run_dir):
            raise RlinfError(f"nothing to resume in {run_dir}: no checkpoints/step_*.safetensors there")
        # stopped in its set-up (no row, no checkpoint yet): what the set-up kept stays (a stopped
        # warm start continues from its own checkpoint, lm.sft.warm_start_left)
        log.warning(
            "%s has no checkpoint yet (stopped before training started): starting it again there", run_dir
        )
        resume, again = False, True
    if not resume and not again and existing_run(run_dir):
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
    resolved = prepared.saved  # ${oc.env:...} kept unresolved: no secret in the run directory
    config_text = yaml.safe_dump(resolved, sort_keys=False)
    if resume:  # config.yaml changes only once the resumed run has started (a failed resume keeps it)
        check_resume_config(run_dir / "config.yaml", resolved)
    else:
        atomic_write_text(run_dir / "config.yaml", config_text)
    config_pending = resume

    sinks = make_sinks(loggers(resolved), run_dir, resolved)
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
    (:func:`rlinf_algos.devices.plan_devices`; ``local``: the one device of a
    ``runner.scheduler: local`` run), torch's CUDA version and the NVIDIA driver's (``none``
    without one), :func:`rlinf_algos.devices.device_report`."""
    import json

    from rlinf_algos.devices import device_report, local_devices, plan_devices

    device = str((data.get("runner") or {}).get("device", "cpu"))
    try:
        roles = plan_devices(plan, device) if plan is not None else local_devices(device)
    except ConfigError:  # the run went as far as it went: record what was asked
        roles = {"local": [device]}
    devices = {"runner_device": device, "roles": roles, **device_report()}
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

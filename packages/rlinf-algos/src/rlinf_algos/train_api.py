"""The Python API of ``rlinf train``: :func:`train` and sweeps (``rlinf train --multirun``).

:func:`train` takes the config as a path, a mapping or pydantic models and goes the way the
command goes: compose (:func:`rlinf_core.compose.compose`), translate, validate, run
(:func:`rlinf_algos.training.run_training`); bad input raises rlinf's errors
(:class:`~rlinf_core.errors.ConfigError`, :class:`~rlinf_core.errors.RlinfError`), never
``SystemExit``.

:func:`multirun_plan` turns ``--multirun`` overrides into one run per combination, each in its
own directory under one sweep directory; :func:`multirun_table` renders the final metrics of
every run (from its ``summary.json``) with the mean and standard deviation of each.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinf_core.errors import ConfigError, RlinfError

__all__ = [
    "SweepRun",
    "config_data",
    "multirun_plan",
    "multirun_table",
    "read_summary",
    "run_multirun",
    "train",
]

_PREFERRED = (
    "final_return_mean",
    "best_return_mean",
    "success_rate",
    "total_env_steps",
    "env_steps_per_s",
    "wall_s",
)
"""Metrics listed first in a sweep's table (the others follow in summary order)."""


def config_data(config: Any) -> Any:
    """A config as :func:`train` takes it, made a path or a plain mapping: a pydantic model
    (the sections of a run, or any model whose fields are sections) is dumped as JSON-ready
    data; pydantic models inside a mapping (``{"algorithm": PPOConfig(), "env":
    EnvConfig(...)}``) too. A path stays a path."""
    from pydantic import BaseModel

    from rlinf_algos.config.prepare import PreparedRun

    if isinstance(config, PreparedRun):  # through the pipeline already
        return config
    if isinstance(config, str | Path):
        return Path(config)
    if isinstance(config, BaseModel):
        return config.model_dump(mode="json")
    if isinstance(config, Mapping):
        return {k: (v.model_dump(mode="json") if isinstance(v, BaseModel) else v) for k, v in config.items()}
    raise ConfigError(
        f"config must be a YAML path, a mapping or a pydantic model, got {type(config).__name__}"
    )


def train(
    config: Any,
    run_dir: str | Path | None = None,
    overrides: Iterable[str] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    """Train with ``config`` and return the run's summary (what ``summary.json`` holds, plus
    ``run_dir`` and ``summary_text``).

    Args:
        config: the path of a YAML config (its ``defaults:`` are relative to it), a mapping of
            sections, a :class:`~rlinf_algos.config.prepare.PreparedRun`, or pydantic models (a model of the whole run, or a mapping of section
            models such as ``{"algorithm": PPOConfig(), "env": EnvConfig(id="Pendulum-v1")}``).
        run_dir: where the run writes; default ``runs/<config name>-<time>``.
        overrides: command-line style overrides applied on top: ``key=value``, ``+key=value``,
            ``++key=value``, ``~key``, ``group=name``.
        **kwargs: the other keywords of :func:`~rlinf_algos.training.run_training`:
            ``resume``, ``overwrite``, ``progress`` (called with every metrics row),
            ``callbacks``, ``host``, ``config_path`` (where a mapping's defaults live).

    Raises:
        ConfigError: a problem in the config or an override (every problem, with its YAML path).
        RlinfError: anything else a user can fix (a run directory that holds a run...).
    """
    from rlinf_algos.training import run_training

    if isinstance(overrides, str):
        raise ConfigError(
            f"overrides is a list of strings, got the string {overrides!r}; write [{overrides!r}]"
        )
    unknown = set(kwargs) - _RUN_KEYWORDS
    if unknown:
        raise TypeError(
            f"train() got unexpected keyword(s) {', '.join(sorted(unknown))}; it takes "
            f"{', '.join(sorted(_RUN_KEYWORDS))}"
        )
    return run_training(config_data(config), run_dir=run_dir, overrides=list(overrides), **kwargs)


_RUN_KEYWORDS = frozenset(
    {"resume", "overwrite", "progress", "callbacks", "host", "scheduler", "config_path", "on_started"}
)


# -- sweeps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: its number, its overrides (the fixed ones and this combination's),
    the swept part alone and its run directory."""

    index: int
    overrides: tuple[str, ...]
    swept: tuple[str, ...]
    run_dir: Path


def multirun_plan(overrides: Iterable[str], sweep_dir: Path) -> list[SweepRun]:
    """The runs of ``rlinf train --multirun``: one per combination of the swept values
    (``key=a,b`` or ``key=range(0,3)``), in ``sweep_dir/<i>_<key=value,...>`` (the last part
    of each swept key: ``runner.seed=1`` -> ``1_seed=1``)."""
    from rlinf_core.compose import sweep

    overrides = list(overrides)
    combos = sweep(overrides)
    swept_keys = [i for i, raw in enumerate(overrides) if len({c[i] for c in combos}) > 1]
    runs = []
    for n, combo in enumerate(combos):
        swept = tuple(combo[i] for i in swept_keys)
        label = ",".join(_short(raw) for raw in swept) or "run"
        runs.append(SweepRun(n, tuple(combo), swept, sweep_dir / f"{n}_{label}"))
    return runs


def _short(raw: str) -> str:
    key, _, value = raw.partition("=")
    name = key.lstrip("+~").rsplit(".", 1)[-1]
    text = re.sub(r"[^A-Za-z0-9._=+-]+", "_", f"{name}={value}")
    return text[:60]


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``summary.json``, or ``None`` when missing or unreadable."""
    try:
        data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _numbers(summary: Mapping[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in summary.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v))
    }


def multirun_table(results: list[tuple[SweepRun, Mapping[str, Any] | None]]) -> str:
    """One table: a row per final metric (numbers of each run's summary), a column per run,
    then the mean and the sample standard deviation (``-`` with fewer than two runs)."""
    done = [(run, _numbers(summary)) for run, summary in results if summary is not None]
    if not done:
        return "no run finished: no metrics to show\n"
    names = [m for m in _PREFERRED if any(m in nums for _, nums in done)]
    for _, nums in done:
        names += [m for m in nums if m not in names]
    header = ["metric", *(f"run {run.index}" for run, _ in done), "mean", "std"]
    rows = [header]
    for name in names:
        values = [nums.get(name) for _, nums in done]
        present = [v for v in values if v is not None]
        mean = sum(present) / len(present) if present else math.nan
        std = (
            math.sqrt(sum((v - mean) ** 2 for v in present) / (len(present) - 1))
            if len(present) > 1
            else math.nan
        )
        rows.append([name, *(_fmt(v) for v in values), _fmt(mean), _fmt(std)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    legend = [
        f"run {run.index}: {' '.join(run.swept) or '(no swept keys)'}  ({run.run_dir})" for run, _ in done
    ]
    return "\n".join([*lines, "", *legend]) + "\n"


def _fmt(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if value == int(value) and abs(value) < 1e12:
        return f"{int(value):d}"
    return f"{value:.4g}" if abs(value) < 1e-2 or abs(value) >= 1e5 else f"{value:.3f}"


def run_multirun(
    overrides: Iterable[str],
    sweep_dir: Path,
    run: Callable[[SweepRun, Any], dict[str, Any]],
    *,
    prepare: Callable[[SweepRun], Any] = lambda item: None,
    echo: Callable[[str], Any] = print,
) -> tuple[list[tuple[SweepRun, dict[str, Any] | None]], list[tuple[SweepRun, str]]]:
    """Prepare every combination with ``prepare`` first (so a bad combination stops the sweep
    before anything trains: its problems name the run), then run each with ``run(item,
    prepared)``. Returns ``(results, failures)``: each run with its summary (``None`` if it
    failed) and each failed run with its error; a ``sweep_dir/multirun.json`` lists every run,
    its overrides, directory and status. A run that raises goes on the failures (the sweep goes
    on); Ctrl-C stops the sweep."""
    from rlinf_core.io import atomic_write_text

    plan = multirun_plan(overrides, sweep_dir)
    prepared: list[Any] = []
    for item in plan:
        try:
            prepared.append(prepare(item))
        except ConfigError as err:
            raise ConfigError(
                [
                    type(p)(p.path, f"{p.message} (run {item.index}: {' '.join(item.swept)})")
                    for p in err.problems
                ]
            ) from None
    results: list[tuple[SweepRun, dict[str, Any] | None]] = []
    failures: list[tuple[SweepRun, str]] = []
    record: list[dict[str, Any]] = []
    for item, ready in zip(plan, prepared, strict=True):
        echo(
            f"[multirun] run {item.index + 1}/{len(plan)}: {' '.join(item.swept) or '(no swept keys)'} -> {item.run_dir}"
        )
        status = "ok"
        try:
            summary: dict[str, Any] | None = run(item, ready)
        except Exception as err:  # one failed run must not end the sweep
            text = str(err).splitlines()[0] if str(err) else ""
            if not isinstance(err, RlinfError):
                text = f"{type(err).__name__}: {text}"
            summary, status = None, f"failed: {text}"
            failures.append((item, text))
        if summary is not None:
            summary = read_summary(item.run_dir) or summary
        results.append((item, summary))
        record.append(
            {
                "run": item.index,
                "overrides": list(item.overrides),
                "run_dir": str(item.run_dir),
                "status": status,
            }
        )
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(sweep_dir / "multirun.json", json.dumps({"runs": record}, indent=2) + "\n")
    return results, failures

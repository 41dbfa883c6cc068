"""``rlinf bench throughput CONFIG [--workers 1,2,4]``: scaling of a run with its rollout pool.

Runs short training bursts of CONFIG, one per rollout-worker count, on the current cluster (the
one at ``RAY_ADDRESS``, else an embedded Ray), and reports for each: env steps per second in the
steady state (the rows after the first update, which pays for start-up), the time one update
spends in each component as the run's metrics time it (``rollout_s``: env stepping and policy
inference of a batch; ``update_s``: the learner's update; ``wait_s``: the learner waiting for the
batch; ``publish_s``: the weight sync; ``allreduce_s``: the learners' gradient all-reduce; a
reward component's own times where it reports them), and the scaling efficiency against the
smallest count (``sps_k / (sps_1 * k / 1)``: 1.0 is linear).

The worker count is ``rollout_worker.num_workers`` of a worker-pool (seed 003) config; envs per
worker stay fixed (weak scaling: ``env.num_envs`` grows with the pool). An ordinary config has no
pool to vary: it is measured as written, at its own rollout count.

Light at import (click and rlinf_core): the runs import the runtime when they start.
"""

from __future__ import annotations

import json
import math
import os
import platform
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from rlinf_core.cli import get_host
from rlinf_core.errors import ConfigError

__all__ = ["bench", "measure_throughput", "render_throughput"]

COMPONENT_TIMES: Mapping[str, str] = {
    "rollout_s": "env+rollout",
    "reward_s": "reward",
    "update_s": "update",
    "wait_s": "learner wait",
    "publish_s": "weight sync",
    "allreduce_s": "all-reduce",
}
"""Metrics columns that time a component, and the name the table gives them (any other
``*_s`` column a run reports is shown under its own name)."""

_NOT_TIMES = ("wall_s", "env_steps_per_s")


def _parse_workers(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise click.BadParameter(
            f"expected counts separated by commas, such as 1,2,4; got {text!r}"
        ) from None
    if not counts or any(c < 1 for c in counts):
        raise click.BadParameter(f"expected positive counts, such as 1,2,4; got {text!r}")
    return sorted(set(counts))


def _burst_config(
    data: Mapping[str, Any], workers: int | None, iterations: int, host: Any
) -> tuple[Any, list[str]]:
    """The prepared run of one burst (:func:`~rlinf_algos.config.prepare.prepare_run`, which
    validates it once): ``workers`` rollout workers, ``iterations`` updates, a metrics row per
    update, no checkpoints, metrics.csv only; and the overrides that made it. The env steps of an
    update are read from the composed and translated sections (no validation yet)."""
    from rlinf_algos.config.prepare import compose_run_config, prepare_run
    from rlinf_algos.config.seed_form import iteration_env_steps
    from rlinf_algos.config.translate import translate

    overrides = [] if workers is None else [f"rollout_worker.num_workers={workers}"]
    base = dict(data)
    base.pop("checkpoint_interval", None)  # seed 003's, in updates: a burst writes no checkpoints
    sections = translate(compose_run_config(base, overrides), host).data
    name = (sections.get("algorithm") or {}).get("name")
    if not isinstance(name, str) or name not in host.algorithms:
        prepare_run(base, overrides, host=host)  # says what is wrong, with every other problem
    per_update = iteration_env_steps(sections, host.algorithms.get(name))
    if per_update <= 0:
        raise ConfigError(
            "an update of this algorithm has no fixed number of env steps; set env.max_episode_steps",
            "env.max_episode_steps",
        )
    runner = {
        "total_steps": per_update * iterations,
        "log_interval": 1,
        "checkpoint_interval": 0,
        "loggers": ["csv"],
    }
    burst = [*overrides, *(f"++runner.{key}={value}" for key, value in runner.items())]
    return prepare_run(base, burst, host=host), overrides


def _summarise(rows: list[dict[str, Any]], summary: Mapping[str, Any]) -> dict[str, Any]:
    """Steady-state throughput and the mean time per update of each component, from a burst's
    metrics rows (the first one, which includes start-up, left out when there are more)."""
    steady = rows[1:] if len(rows) > 1 else rows
    if len(rows) > 1:
        steps = rows[-1]["step"] - rows[0]["step"]
        wall = rows[-1]["wall_s"] - rows[0]["wall_s"]
        sps = steps / wall if wall > 0 else float("nan")
    else:
        steps, sps = summary.get("total_env_steps", 0), float(summary.get("env_steps_per_s", math.nan))
    times: dict[str, float] = {}
    for key in dict.fromkeys(k for row in steady for k in row):
        if not key.endswith("_s") or key in _NOT_TIMES:
            continue
        values = [
            float(r[key]) for r in steady if isinstance(r.get(key), int | float) and math.isfinite(r[key])
        ]
        if values:
            times[key] = sum(values) / len(values)
    return {
        "env_steps_per_s": sps,
        "measured_env_steps": int(steps),
        "updates_measured": len(steady),
        "time_per_update_s": times,
        "total_env_steps": int(summary.get("total_env_steps", 0)),
        "wall_s": float(summary.get("wall_s", math.nan)),
    }


def measure_throughput(
    data: Mapping[str, Any],
    workers: Sequence[int] | None,
    *,
    iterations: int = 4,
    host: Any = None,
    run_root: Path | None = None,
    echo: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    """One burst of ``iterations`` updates per rollout-worker count of ``workers`` (``None``:
    the config as written); returns ``{"runs": [...], ...}`` with env steps/s, the time per
    update of each component and the scaling efficiency of every run (see the module
    docstring)."""
    from rlinf_algos.training import run_training
    from rlinf_core.plugins import load_plugins
    from rlinf_core.pools import is_seed_form

    host = host or load_plugins()
    if workers is not None and not is_seed_form(data):
        raise ConfigError(
            "--workers varies rollout_worker.num_workers of a worker-pool config (seed 003: algorithm, "
            "ray_cluster, rollout_worker, trainer, reward_worker); this config has a cluster section: leave "
            "--workers out to measure it as written",
            "rollout_worker",
        )
    counts: list[int | None] = list(workers) if workers is not None else [None]
    configs = [_burst_config(data, k, iterations, host) for k in counts]  # every problem before any run
    if configs[0][0].expansion is not None:
        from rlinf_algos.config.seed_form import log_notes

        log_notes(configs[0][0].expansion)
    runs = []
    with tempfile.TemporaryDirectory(prefix="rlinf-bench-") as tmp:
        root = Path(run_root) if run_root is not None else Path(tmp)
        for k, (prepared, overrides) in zip(counts, configs, strict=True):
            rows: list[dict[str, Any]] = []
            label = "as written" if k is None else f"{k} rollout worker(s)"
            config = prepared.config
            if echo:
                echo(f"bench: {label}, {config['runner']['total_steps']:,} env steps ({iterations} updates)")
            t0 = time.perf_counter()
            summary = run_training(
                prepared,
                run_dir=root / f"workers-{k or 'config'}",
                progress=rows.append,
                overwrite=True,
            )
            run = {
                "workers": k,
                "overrides": overrides,
                "num_envs": config["env"]["num_envs"],
                "total_s": time.perf_counter() - t0,
                **_summarise(rows, summary),
            }
            runs.append(run)
    base = runs[0]
    base_k = base["workers"] or 1
    for run in runs:
        k = run["workers"] or 1
        ideal = base["env_steps_per_s"] * k / base_k
        run["speedup"] = (
            run["env_steps_per_s"] / base["env_steps_per_s"] if base["env_steps_per_s"] else math.nan
        )
        run["scaling_efficiency"] = run["env_steps_per_s"] / ideal if ideal else math.nan
    return {
        "benchmark": "rlinf bench throughput",
        "baseline_workers": base["workers"],
        "iterations": iterations,
        "cluster": os.environ.get("RAY_ADDRESS") or "embedded Ray (this machine)",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "runs": runs,
    }


def render_throughput(result: Mapping[str, Any]) -> str:
    """The result of :func:`measure_throughput` as a text table."""
    keys = list(dict.fromkeys(k for run in result["runs"] for k in run["time_per_update_s"]))
    keys.sort(key=lambda k: list(COMPONENT_TIMES).index(k) if k in COMPONENT_TIMES else len(COMPONENT_TIMES))
    head = ["workers", "envs", "env steps/s", "speedup", "efficiency"] + [
        f"{COMPONENT_TIMES.get(k, k.removesuffix('_s'))} s" for k in keys
    ]
    lines = []
    for run in result["runs"]:
        cells = [
            "-" if run["workers"] is None else str(run["workers"]),
            str(run["num_envs"]),
            f"{run['env_steps_per_s']:,.0f}",
            f"{run['speedup']:.2f}x",
            f"{run['scaling_efficiency']:.0%}" if math.isfinite(run["scaling_efficiency"]) else "-",
        ] + [f"{run['time_per_update_s'][k]:.3f}" if k in run["time_per_update_s"] else "-" for k in keys]
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    out = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    out += ["  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in lines]
    base = result["baseline_workers"]
    out.append(
        f"(steady state over {result['iterations'] - 1} update(s) after the first; component times are seconds "
        f"per update; efficiency against {base or 'the'} worker run; cluster: {result['cluster']})"
    )
    return "\n".join(out) + "\n"


@click.group("bench")
def bench() -> None:
    """Measure a run configuration: throughput and its scaling."""


@bench.command("throughput")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--workers",
    "workers_text",
    default="1,2,4",
    show_default=True,
    help="Rollout-worker counts to run (rollout_worker.num_workers of a worker-pool config).",
)
@click.option(
    "--iterations",
    type=click.IntRange(min=2),
    default=4,
    show_default=True,
    help="Updates per burst (the first is left out of the steady state).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of a table.")
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), help="Also write the JSON to this file."
)
@click.option(
    "--run-dir",
    "run_root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Keep each burst's run directory under this folder (default: a temporary one, removed).",
)
@click.pass_context
def throughput_cmd(
    ctx: click.Context,
    config: Path,
    workers_text: str,
    iterations: int,
    as_json: bool,
    out: Path | None,
    run_root: Path | None,
) -> None:
    """Run short training bursts of CONFIG at several rollout-worker counts on the current
    cluster (RAY_ADDRESS, else an embedded Ray) and report env steps/s, the time per update of
    each component and the scaling efficiency against the smallest count."""
    from rlinf_algos.config.prepare import compose_run_config
    from rlinf_core.pools import is_seed_form

    data = compose_run_config(config)
    given = ctx.get_parameter_source("workers_text") != click.core.ParameterSource.DEFAULT
    workers = _parse_workers(workers_text) if is_seed_form(data) or given else None
    result = measure_throughput(
        data,
        workers,
        iterations=iterations,
        host=get_host(ctx),
        run_root=run_root,
        echo=None if as_json else lambda line: click.echo(line, err=True),
    )
    text = json.dumps(result, indent=2, default=str)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")
    if as_json:
        click.echo(text)
    else:
        click.echo(render_throughput(result), nl=False)

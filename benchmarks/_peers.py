"""The harness of the side-by-side benchmarks (``ppo_throughput.py``, ``vla_pixels.py``): every
peer runs in a fresh interpreter with pinned threads, reports iteration marks through a
:class:`Clock`, and the parent takes the median of interleaved repeats.

A benchmark script defines ``TASKS`` (name -> function returning a result dict) and, when run
with ``--_child SPEC``, calls :func:`child`; the parent calls :func:`run_peer` per peer and
repeat, then :func:`median_runs`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from _report import tree_cpu_s

__all__ = [
    "Clock",
    "child",
    "median_runs",
    "one_node_config",
    "pin_threads",
    "quiet",
    "rlinf_distributed_parts",
    "rlinf_inprocess",
    "rlinf_local_run",
    "run_peer",
    "silent_sb3",
    "timed_collect",
]


def pin_threads(threads: int) -> None:
    """Torch's intra-op threads to ``threads``, inter-op to 1."""
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (a parallel region ran)
        pass


def quiet() -> None:
    """No warnings, and Ray's logger at ERROR."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("ray").setLevel(logging.ERROR)


def silent_sb3(model: Any) -> Any:
    """``model`` (a Stable-Baselines3 algorithm) with a logger that writes nothing: SB3's
    default, even at ``verbose=0``, makes an empty ``SB3-<date>`` folder in the temp dir on
    every ``learn``."""
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


class Clock:
    """Iteration boundaries as ``(perf_counter, env_steps, tree CPU s)``; rates skip ``warmup``."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, int, float]] = []

    def mark(self, steps: int) -> None:
        self.marks.append((time.perf_counter(), steps, tree_cpu_s(os.getpid())))

    def result(self, start: int, t_begin: float) -> dict[str, float]:
        """``sps`` (wall), ``steps``, ``seconds``, ``cpu_s``, ``steps_per_cpu_s`` from mark
        ``start`` to the last; ``untimed_s``: from ``t_begin`` to mark ``start``."""
        if len(self.marks) < start + 2:
            raise RuntimeError(f"only {len(self.marks)} iteration marks recorded, need {start + 2}")
        (t0, s0, c0), (t1, s1, c1) = self.marks[start], self.marks[-1]
        return {
            "untimed_s": t0 - t_begin,
            "sps": (s1 - s0) / (t1 - t0),
            "steps": s1 - s0,
            "seconds": t1 - t0,
            "cpu_s": c1 - c0,
            "steps_per_cpu_s": (s1 - s0) / max(c1 - c0, 1e-9),
        }


def child(spec: Mapping[str, Any], tasks: Mapping[str, Callable[..., dict[str, Any]]]) -> None:
    """The subprocess side: run ``tasks[spec["task"]](*spec["args"])`` with pinned threads and
    write its result (plus the load average after) to ``spec["out"]``."""
    quiet()
    pin_threads(spec["threads"])
    out = tasks[spec["task"]](*spec["args"])
    out["load_after"] = os.getloadavg()[0]
    Path(spec["out"]).write_text(json.dumps(out))


def run_peer(
    script: str,
    task: str,
    args: list[Any],
    threads: int,
    timeout: float,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``script --_child SPEC`` (its ``TASKS[task](*args)``) in a fresh interpreter with
    pinned threads (and ``extra_env``), in a temporary folder (MuJoCo writes ``MUJOCO_LOG.TXT``
    to the cwd); its result dict with ``load_before`` and ``process_s``, or ``{"error": ...}``
    with the exception's message first and the tail of the output."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    env["RAY_DEDUP_LOGS"] = "0"
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra_env or {})
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out.json"
        spec = {"task": task, "args": args, "threads": threads, "out": str(out)}
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, os.path.abspath(script), "--_child", json.dumps(spec)],
                cwd=d,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s", "load_before": load}
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not out.exists():
            lines = [x for x in proc.stdout.strip().splitlines() if x.strip()] or ["(no output)"]
            tail = "\n".join(lines[-15:])
            return {
                "error": f"exit {proc.returncode}: {lines[-1]}\n{tail}",
                "load_before": load,
                "process_s": wall,
            }
        result = json.loads(out.read_text())
    result["load_before"] = load
    result["process_s"] = wall
    return result


def median_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run by ``sps`` (with every run's ``sps`` and load beside it); the last error
    when every run failed."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[-1]
    best = sorted(ok, key=lambda r: r["sps"])[len(ok) // 2]
    return {
        **best,
        "sps_runs": [r["sps"] for r in ok],
        "load_runs": [r["load_before"] for r in ok],
        "sps": statistics.median(r["sps"] for r in ok),
    }


# -- the rlinf peers, shared by the benchmark scripts (run in the peer subprocesses) ---------------


def one_node_config(sections: dict[str, Any], pipeline_stages: int = 2) -> dict[str, Any]:
    """The run configuration ``rlinf train`` would read for ``sections`` on one node: the env,
    rollout and actor workers on it, env stepping in ``pipeline_stages`` stages, and the rollout of
    the next batch overlapping the update on this one (``max_staleness: 1``), as the examples do."""
    place = {"node_group": "node", "placement": "0"}
    return {
        **sections,
        "cluster": {
            "num_nodes": 1,
            "component_placement": {c: dict(place) for c in ("env", "rollout", "actor")},
        },
        "rollout": {"pipeline_stages": pipeline_stages, "max_staleness": 1},
    }


def rlinf_local_run(sections: dict[str, Any], run_dir: Path, clock: Clock | None = None) -> dict[str, Any]:
    """Train ``sections`` in this process (``runner.scheduler: local``); its summary, with every
    metrics row under ``rows`` (each marked on ``clock``)."""
    from rlinf_core.plugins import load_plugins

    algo_cls = load_plugins().algorithms.get(sections["algorithm"]["name"])
    algo = algo_cls(algo_cls.config_model(**sections["algorithm"]))
    rows: list[dict[str, float]] = []

    def progress(row: dict[str, float]) -> None:
        rows.append(dict(row))
        if clock is not None:
            clock.mark(int(row["step"]))

    summary = algo.run(None, sections, run_dir, progress=progress)
    summary["rows"] = rows
    return summary


def rlinf_inprocess(sections: dict[str, Any], warmup: int, t_begin: float) -> dict[str, Any]:
    """The in-process peer: :func:`rlinf_local_run`, timed from the row after ``warmup``, with the
    share of the timed seconds spent collecting."""
    clock = Clock()
    with tempfile.TemporaryDirectory() as d:
        summary = rlinf_local_run(sections, Path(d), clock)
    timed = summary["rows"][warmup:]
    rollout = sum(r.get("rollout_s", 0.0) for r in timed)
    update = sum(r.get("update_s", 0.0) for r in timed)
    return {
        **clock.result(warmup - 1, t_begin),
        "rollout_fraction": rollout / (rollout + update) if rollout + update > 0 else None,
        "runner": "in-process scheduler (runner.scheduler: local)",
    }


def rlinf_distributed_parts(
    config_for: Callable[[int], dict[str, Any]], batch: int, warmup: int, rollout_iters: int, train_iters: int
) -> dict[str, Any]:
    """``rlinf train``'s runner on one embedded Ray started once for both measurements: rollout
    only (``rollout_iters`` timed; skipped if 0), then training (``train_iters`` timed; skipped if
    0). ``config_for(total_steps)`` is the run's configuration. Each ``run_training`` launches its
    own workers (counted in ``untimed_s``)."""
    from rlinf_algos.training import run_training
    from rlinf_core.plugins import load_plugins

    host = load_plugins()
    t_begin = time.perf_counter()
    out: dict[str, Any] = {}
    scheduler = None
    try:
        for part, n in (("rollout", rollout_iters), ("train", train_iters)):
            if n <= 0:
                continue
            # Training rows come one iteration late (the update on k finishes while k + 1 is
            # collected): one extra iteration, and the clock starts at the first row after warm-up.
            extra = 0 if part == "rollout" else 1
            config = config_for((warmup + n + extra) * batch)
            if scheduler is None:
                scheduler = host.schedulers.get(config.get("runner", {}).get("scheduler", "ray"))(
                    hardware=host
                )
                scheduler.start(config)
            clock = Clock()
            t_part = time.perf_counter() if out else t_begin
            with tempfile.TemporaryDirectory() as d:
                summary = run_training(
                    config,
                    run_dir=d,
                    rollout_only=part == "rollout",
                    progress=lambda row, c=clock: c.mark(int(row["step"])),
                    host=host,
                    scheduler=scheduler,
                )
            first = next(i for i, m in enumerate(clock.marks) if m[1] >= (warmup + extra) * batch)
            out[part] = {
                **clock.result(first, t_part),
                "summary_sps": summary.get("env_steps_per_s"),
                "runner": "distributed (rlinf_algos.training.run_training)",
            }
    finally:
        if scheduler is not None:
            scheduler.shutdown()
    return out


def timed_collect(
    stepper: Any,
    policy: Any,
    warmup: int,
    iters: int,
    rollout_steps: int,
    batch: int,
    seed: int,
    t_begin: float,
) -> dict[str, Any]:
    """rlinf's in-process collector (``collect_ppo`` over a ``LocalPort``) on ``stepper`` with
    ``policy``: ``warmup`` untimed rollouts, then ``iters`` timed; closes the stepper."""
    import torch

    from rlinf_algos.ports import LocalPort
    from rlinf_algos.ppo.rollout import collect_ppo

    port, gen = LocalPort(stepper), torch.Generator().manual_seed(seed)
    for _ in range(warmup):
        collect_ppo(port, policy, rollout_steps, gen)
    clock = Clock()
    clock.mark(0)
    for _ in range(iters):
        collect_ppo(port, policy, rollout_steps, gen)
    clock.mark(iters * batch)
    stepper.close()
    return {**clock.result(0, t_begin), "runner": "in-process (collect_ppo over a LocalPort)"}

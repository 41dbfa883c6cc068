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

__all__ = ["Clock", "child", "median_runs", "pin_threads", "quiet", "run_peer", "silent_sb3"]


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

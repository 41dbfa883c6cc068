"""What every comparison benchmark in this folder reports the same way: the machine it ran on,
the figures' formatting, and the closing lines (load average, wall time, ``--json``, with the
date and the command line). ``benchmarks/results_table.py`` turns the JSON files kept in
``benchmarks/results/`` into ``benchmarks/RESULTS.md``."""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def fmt(x: Any, spec: str = ".0f") -> str:
    """A table cell: ``-`` for a missing or NaN figure."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def versions(dists: tuple[str, ...]) -> dict[str, str | None]:
    """Installed versions of ``dists`` (``None`` for one that is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for dist in dists:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def machine(dists: tuple[str, ...], **extra: Any) -> dict[str, Any]:
    """The ``machine`` block of a report, taken at the start of a run."""
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_at_start": os.getloadavg(),
        **extra,
        "versions": versions(dists),
    }


def finish(report: dict[str, Any], t0: float, json_path: Path | None) -> dict[str, Any]:
    """Stamp the load at the end and the wall time, print them, and write ``json_path``.

    The JSON also records when the run ended (``date``, UTC) and the command line that produced
    it (``command``), which ``benchmarks/results_table.py`` shows beside the figures."""
    report["machine"]["load_at_end"] = os.getloadavg()
    report["wall_s"] = time.perf_counter() - t0
    report.setdefault("date", datetime.now(UTC).isoformat(timespec="seconds"))
    report.setdefault("command", shlex.join(["python", *sys.argv]))
    print(
        f"\nload average at start {report['machine']['load_at_start'][0]:.1f}, at end "
        f"{report['machine']['load_at_end'][0]:.1f} ({os.cpu_count()} CPUs); took {report['wall_s']:.0f} s"
    )
    if json_path:
        json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"wrote {json_path}")
    return report


def success_eval(envs: Any, act: Any, seeds: list[int], inits: list[int] | None = None) -> dict[str, Any]:
    """Play one episode per seed in the vector env ``envs`` (``inits``: a family's fixed initial
    states), ``act(obs) -> actions``, as ``rlinf eval --suite`` does
    (:func:`rlinf_algos.evaluate.play_episodes`); ``success_at_end`` and ``success_once``, each
    ``{"rate", "ci95"}`` (95 % Wilson interval), and ``episodes``. Closes ``envs``."""
    from rlinf_algos.evaluate import play_episodes
    from rlinf_algos.suite_eval import wilson_interval

    try:
        eps = play_episodes(envs, act, seeds, inits=inits)
    finally:
        envs.close()
    out: dict[str, Any] = {"episodes": len(eps)}
    for key in ("success_at_end", "success_once"):
        k = sum(bool(e[key]) for e in eps)
        out[key] = {"rate": k / len(eps), "ci95": list(wilson_interval(k, len(eps)))}
    return out


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system, plus reaped children) of process ``root`` and every live
    descendant (Ray's raylet and workers included). Linux ``/proc``; where that cannot be read,
    this process's own CPU time when ``root`` is this process, else 0.0."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        parent: dict[int, int] = {}
        ticks: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            pid = int(entry.name)
            parent[pid] = int(fields[1])
            ticks[pid] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    except (OSError, ValueError):
        return time.process_time() if root == os.getpid() else 0.0
    total = 0
    for pid in ticks:
        p, seen = pid, 0
        while p > 1 and seen < 64:
            if p == root:
                total += ticks[pid]
                break
            p, seen = parent.get(p, 0), seen + 1
    return total / tick

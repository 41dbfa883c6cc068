"""How long rlinf's embedded Ray takes to start (and stop) on a machine at a given load.

For each ``--loads`` value N, N busy processes (a tight Python loop each, at the benchmark's own
priority) run beside it; after ``--settle`` seconds, ``--repeats`` embedded clusters are started
one after another with :class:`rlinf_scheduler.runtime.cluster.Cluster` (``ray_init={"num_cpus":
1}``, what a run on a laptop gets) and shut down. Each row gives the start and stop times
(median, min, max), how many starts needed more than one attempt (the start is retried when
Ray's fixed 30 s raylet registration is missed; more tries on a busier machine), how many failed,
and the 1-minute load average per CPU when the starts began.

Usage::

    uv run python benchmarks/ray_start.py [--loads 0,4,8] [--repeats 3] [--json PATH]

Figures are printed and written to ``--json PATH`` (default:
``benchmarks/results/ray_start.json``), never asserted.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _report import finish, fmt, machine

HERE = Path(__file__).resolve().parent


class RetryCounter(logging.Handler):
    """Counts the embedded Ray's "trying again" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.retries = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "trying again" in record.getMessage():
            self.retries += 1


def busy(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def one_start() -> dict[str, Any]:
    from rlinf_scheduler.runtime.cluster import Cluster

    env = {k: v for k, v in os.environ.items()}
    os.environ.pop("RAY_ADDRESS", None)
    t0 = time.perf_counter()
    try:
        cluster = Cluster(1, ray_init={"num_cpus": 1})
    except Exception as err:  # a start that failed for good: counted, its reason kept
        return {"start_s": time.perf_counter() - t0, "stop_s": None, "error": str(err).splitlines()[0]}
    finally:
        os.environ.clear()
        os.environ.update(env)
    started = time.perf_counter() - t0
    t1 = time.perf_counter()
    cluster.shutdown()
    return {"start_s": started, "stop_s": time.perf_counter() - t1, "error": None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="0,4,8", help="busy processes beside the starts, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--settle", type=float, default=30.0, help="seconds the busy processes run before the starts"
    )
    ap.add_argument("--json", type=Path, default=HERE / "results" / "ray_start.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    counter = RetryCounter()
    logging.getLogger("rlinf_scheduler").addHandler(counter)
    report: dict[str, Any] = {
        "title": "Embedded Ray start-up time under load",
        "machine": machine(("ray", "rlinf-scheduler")),
        "repeats": args.repeats,
        "rows": [],
    }
    cpus = len(os.sched_getaffinity(0))
    print(
        f"{'busy':>5} {'load/CPU':>9} {'start med':>10} {'min':>6} {'max':>6} {'stop med':>9} {'retried':>8} {'failed':>7}"
    )
    for n in [int(x) for x in args.loads.split(",")]:
        procs = busy(n)
        try:
            time.sleep(args.settle if n else 0)
            load = os.getloadavg()[0] / cpus
            runs = []
            for _ in range(args.repeats):
                before = counter.retries
                run = one_start()
                run["retries"] = counter.retries - before
                runs.append(run)
        finally:
            for p in procs:
                p.kill()
                p.wait()
        ok = [r for r in runs if r["error"] is None]
        starts = [r["start_s"] for r in ok]
        row = {
            "busy_processes": n,
            "load_per_cpu_at_start": round(load, 2),
            "start_s_median": statistics.median(starts) if starts else None,
            "start_s_min": min(starts) if starts else None,
            "start_s_max": max(starts) if starts else None,
            "stop_s_median": statistics.median([r["stop_s"] for r in ok]) if ok else None,
            "starts_retried": sum(1 for r in runs if r["retries"]),
            "starts_failed": len(runs) - len(ok),
            "errors": [r["error"] for r in runs if r["error"]],
        }
        report["rows"].append(row)
        print(
            f"{n:>5} {load:>9.2f} {fmt(row['start_s_median'], '.1f'):>10} {fmt(row['start_s_min'], '.1f'):>6} "
            f"{fmt(row['start_s_max'], '.1f'):>6} {fmt(row['stop_s_median'], '.1f'):>9} "
            f"{row['starts_retried']:>8} {row['starts_failed']:>7}"
        )
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

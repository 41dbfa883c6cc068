"""Ray runtime overhead: bring-up time and group-call latency against raw Ray actor calls.

Everything runs on an embedded single-node Ray, in one run:

* ``bring-up``: from creating :class:`rlinf_scheduler.runtime.cluster.Cluster` (which starts the
  embedded Ray and probes its node) to an 8-worker group whose every worker ran ``__init__`` and
  ``setup`` (``Cluster`` -> ``plan`` -> ``launch``);
* ``latency``: round trips of a no-op method, p50/p99, interleaved iteration by iteration:
  ``group.on(0).ping().wait()`` vs ``ray.get(actor.ping.remote())`` on one raw actor, and
  ``group.ping().wait()`` (8 ranks, results in rank order) vs ``ray.get([a.ping.remote() for a in
  8 raw actors])``. The raw actors are plain ``@ray.remote(num_cpus=0)`` classes with the same
  method, started beside the group. Target: group p50 at most 1.2x the raw p50.

Usage::

    uv run python benchmarks/runtime.py [--quick] [--json out.json]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

from rlinf_core import Worker
from rlinf_scheduler.runtime.cluster import Cluster


class Bench(Worker):
    def ping(self) -> None:
        return None


def _pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (about a minute)")
    parser.add_argument("--json", dest="json_path", help="write the figures to this JSON file")
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args(argv)
    iters = 200 if args.quick else 2000
    n = args.workers

    t0 = time.perf_counter()
    cluster = Cluster(address="local", ray_init={"num_cpus": 2})
    t_cluster = time.perf_counter() - t0
    try:
        plan = cluster.plan({"num_nodes": 1, "component_placement": {"bench": f"0:0-{n - 1}"}})
        t1 = time.perf_counter()
        group = cluster.launch(plan["bench"], Bench)
        t_launch = time.perf_counter() - t1
        t_total = time.perf_counter() - t0

        import ray

        @ray.remote(num_cpus=0)
        class Raw:
            def ping(self) -> None:
                return None

        raws = [Raw.remote() for _ in range(n)]
        ray.get([a.ping.remote() for a in raws], timeout=600)
        one = group.on(0)
        for _ in range(20):  # warm up both paths
            one.ping().wait(60)
            ray.get(raws[0].ping.remote())
            group.ping().wait(60)
            ray.get([a.ping.remote() for a in raws])
        lat: dict[str, list[float]] = {"group1": [], "raw1": [], "groupN": [], "rawN": []}
        clock = time.perf_counter
        for _ in range(iters):
            s = clock()
            one.ping().wait(60)
            lat["group1"].append(clock() - s)
            s = clock()
            ray.get(raws[0].ping.remote())
            lat["raw1"].append(clock() - s)
            s = clock()
            group.ping().wait(60)
            lat["groupN"].append(clock() - s)
            s = clock()
            ray.get([a.ping.remote() for a in raws])
            lat["rawN"].append(clock() - s)
    finally:
        cluster.shutdown()

    ms = {k: (1e3 * statistics.median(v), 1e3 * _pct(v, 0.99)) for k, v in lat.items()}
    result = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, python {sys.version.split()[0]}, ray {ray.__version__}",
        "iterations": iters,
        "workers": n,
        "cluster_start_s": round(t_cluster, 2),
        "launch_s": round(t_launch, 2),
        "cluster_to_group_s": round(t_total, 2),
        "group1_p50_ms": round(ms["group1"][0], 3),
        "group1_p99_ms": round(ms["group1"][1], 3),
        "raw1_p50_ms": round(ms["raw1"][0], 3),
        "raw1_p99_ms": round(ms["raw1"][1], 3),
        f"group{n}_p50_ms": round(ms["groupN"][0], 3),
        f"group{n}_p99_ms": round(ms["groupN"][1], 3),
        f"raw{n}_p50_ms": round(ms["rawN"][0], 3),
        f"raw{n}_p99_ms": round(ms["rawN"][1], 3),
        "overhead_1_p50": round(ms["group1"][0] / ms["raw1"][0], 3),
        f"overhead_{n}_p50": round(ms["groupN"][0] / ms["rawN"][0], 3),
        "target_overhead": 1.2,
    }
    print(f"rlinf runtime benchmark ({result['machine']}; {iters} iterations)")
    print(f"  Cluster() with embedded Ray + probe   {t_cluster:8.2f} s")
    print(f"  plan + launch {n} workers              {t_launch:8.2f} s")
    print(f"  Cluster() -> {n}-worker group ready     {t_total:8.2f} s")
    print()
    print(f"  {'call':<34}{'p50 ms':>10}{'p99 ms':>10}{'vs raw p50':>12}")
    rows = [
        ("group.on(0).ping().wait()", "group1", "raw1"),
        ("ray.get(actor.ping.remote())", "raw1", "raw1"),
        (f"group.ping().wait()  [{n} ranks]", "groupN", "rawN"),
        (f"ray.get([{n} x actor.ping.remote()])", "rawN", "rawN"),
    ]
    for label, key, base in rows:
        p50, p99 = ms[key]
        print(f"  {label:<34}{p50:>10.3f}{p99:>10.3f}{p50 / ms[base][0]:>11.2f}x")
    print(f"\n  target: group p50 <= {result['target_overhead']}x raw p50")
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()

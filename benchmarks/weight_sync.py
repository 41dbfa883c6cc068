"""Weight sync speed: the collective (Gloo on CPU) beside the object store, on an embedded Ray.

One publisher (a Ray actor standing for the learner's rank 0) and 1, 2 or 4 consumers (Ray
actors standing for rollout workers), each its own process on this node. For every state dict
size (10 MB, 100 MB, 1 GB of float32, and bfloat16 at one size) and every consumer count, both
modes of :mod:`rlinf_scheduler.weights` run the same steps in the same session:

* two untimed publishes (the first reaches the consumers through the object store in both
  modes; the second forms the collective's group);
* ``--repeats`` timed rounds: the driver starts the publish and every consumer's
  ``fetch(min_version=v)`` at once; a round's time runs until every fetch returned (the
  consumer holds the version in its memory: the collective's received tensors, or the object
  store's zero-copy views). ``MB/s`` is the state dict's size over that time (not times the
  consumers).

The publisher also reports the growth of its peak resident memory during each publish
(``VmHWM`` after, minus ``VmRSS`` before, the peak reset through ``/proc/self/clear_refs``):
the object store's copy counts there because the publisher writes it into the shared-memory
store through its own mapping; the collective's two staging buckets count when they are
written. Linux only; ``-`` elsewhere.

Usage::

    nice -n 10 uv run python benchmarks/weight_sync.py [--quick] [--repeats N] [--json PATH]

Figures are printed and written to ``--json PATH`` (default for a full run:
``benchmarks/results/weight_sync.json``; a quick run writes only where ``--json`` says), never
asserted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import ray
import torch
from _report import finish, fmt, machine

MB = 1 << 20
HERE = Path(__file__).resolve().parent
MODES = ("collective", "object_store")


def _status(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def make_state(nbytes: int, dtype: str) -> dict[str, torch.Tensor]:
    """``nbytes`` of ``dtype`` in tensors of at most 16 MiB (a model's worth of layers)."""
    dt = getattr(torch, dtype)
    size = torch.empty(0, dtype=dt).element_size()
    left, i, out = nbytes // size, 0, {}
    g = torch.Generator().manual_seed(0)
    while left > 0:
        n = min(left, (16 * MB) // size)
        out[f"layer{i}.weight"] = torch.randn(n, generator=g).to(dt)
        left -= n
        i += 1
    return out


@ray.remote(num_cpus=0)
class Publisher:
    def setup(self, nbytes: int, dtype: str) -> int:
        torch.set_num_threads(1)
        self.state = make_state(nbytes, dtype)
        return sum(t.numel() * t.element_size() for t in self.state.values())

    def bind(self, sync: Any) -> None:
        self.sync = sync

    def publish(self) -> dict[str, Any]:
        with torch.no_grad():  # an optimiser step's in-place write
            next(iter(self.state.values()))[0] += 1
        rss = _status("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            rss = None
        t0 = time.perf_counter()
        version = self.sync.publish(self.state)
        took = time.perf_counter() - t0
        hwm = _status("VmHWM")
        extra = None if rss is None or hwm is None else max(0, hwm - rss) / MB
        return {"version": version, "publish_s": took, "extra_mb": extra}

    def unbind(self) -> dict[str, Any]:
        stats = self.sync.stats().to_dict()
        self.sync.close()
        self.sync = None
        return stats


@ray.remote(num_cpus=0)
class Rollout:
    def bind(self, sync: Any) -> None:
        torch.set_num_threads(1)
        self.sync = sync

    def fetch(self, min_version: int) -> int:
        version, state = self.sync.fetch(min_version=min_version, timeout=600.0)
        assert version >= min_version and len(state) > 0
        return version

    def unbind(self) -> dict[str, Any]:
        stats = self.sync.stats().to_dict()
        self.sync.close()
        self.sync = None
        return stats


def run_config(
    mode: str, publisher: Any, rollouts: list[Any], nbytes: int, repeats: int, bucket_mb: int
) -> dict[str, Any]:
    from rlinf_scheduler.weights import make_weight_sync

    devices = {"actor rank 0": "cpu", **{f"rollout rank {i}": "cpu" for i in range(len(rollouts))}}
    sync = make_weight_sync(
        f"bench-{uuid.uuid4().hex[:6]}",
        mode=mode,
        devices=devices,
        timeout=600.0,
        bucket_bytes=bucket_mb * MB,
    )
    try:
        ray.get([publisher.bind.remote(sync), *[r.bind.remote(sync) for r in rollouts]])
        rounds = []
        for i in range(2 + repeats):
            t0 = time.perf_counter()
            pub = publisher.publish.remote()
            fetched = ray.get([r.fetch.remote(i) for r in rollouts])
            res = ray.get(pub)
            wall = time.perf_counter() - t0
            assert res["version"] == i and fetched == [i] * len(rollouts), (res, fetched)
            if i >= 2:
                rounds.append({"s": wall, "publish_s": res["publish_s"], "extra_mb": res["extra_mb"]})
        pstats = ray.get(publisher.unbind.remote())
        cstats = ray.get([r.unbind.remote() for r in rollouts])
    finally:
        sync.destroy()
    times = [r["s"] for r in rounds]
    extra = [r["extra_mb"] for r in rounds if r["extra_mb"] is not None]
    med = statistics.median(times)
    return {
        "s": med,
        "s_min": min(times),
        "s_max": max(times),
        "mb_per_s": nbytes / MB / med,
        "publish_s": statistics.median(r["publish_s"] for r in rounds),
        "extra_mb": statistics.median(extra) if extra else None,
        "groups_formed": pstats["groups_formed"],
        "fallbacks": sum(c["fallbacks"] for c in cstats),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10 and 100 MB, 1 and 2 consumers")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds per configuration (>= 3)")
    ap.add_argument("--bucket-mb", type=int, default=64, help="the collective's bucket size")
    ap.add_argument("--json", type=Path, default=None, help="where to write the figures")
    args = ap.parse_args()
    if args.quick:
        sizes = [(10, "float32"), (100, "float32"), (10, "bfloat16")]
        counts = [1, 2]
    else:
        sizes = [(10, "float32"), (100, "float32"), (1024, "float32"), (100, "bfloat16")]
        counts = [1, 2, 4]
    json_path = args.json or (None if args.quick else HERE / "results" / "weight_sync.json")
    t_start = time.perf_counter()
    info = machine(("torch", "ray", "rlinf-scheduler"), torch=torch.__version__)
    from rlinf_scheduler.runtime.cluster import Cluster

    # rlinf's embedded Ray: named agent ports and one retry, which a loaded machine needs
    cluster = Cluster(1, ray_init={"num_cpus": 2, "object_store_memory": 4 << 30})
    rows: list[dict[str, Any]] = []
    try:
        publisher = Publisher.remote()
        pool = [Rollout.remote() for _ in range(max(counts))]
        for size_mb, dtype in sizes:
            nbytes = ray.get(publisher.setup.remote(size_mb * MB, dtype))
            for n in counts:
                for mode in MODES:
                    r = run_config(mode, publisher, pool[:n], nbytes, args.repeats, args.bucket_mb)
                    row = {
                        "mode": mode,
                        "dtype": dtype,
                        "MB": round(nbytes / MB),
                        "consumers": n,
                        "repeats": args.repeats,
                        "s publish->all fetched": round(r["s"], 4),
                        "s range": f"{r['s_min']:.3f} to {r['s_max']:.3f}",
                        "MB/s": round(r["mb_per_s"], 1),
                        "publish s": round(r["publish_s"], 4),
                        "publisher peak extra MB": None if r["extra_mb"] is None else round(r["extra_mb"], 1),
                        "groups formed": r["groups_formed"] if mode == "collective" else None,
                        "object-store fallbacks": r["fallbacks"] if mode == "collective" else None,
                    }
                    rows.append(row)
                    print(
                        f"{mode:>12} {dtype:>8} {row['MB']:>6} MB x{n}: {fmt(r['s'], '.3f')} s "
                        f"({row['s range']}), {fmt(r['mb_per_s'], '.0f')} MB/s, publisher +{fmt(r['extra_mb'], '.0f')} MB",
                        flush=True,
                    )
            ray.get(publisher.setup.remote(0, "float32"))  # free it before the next size
    finally:
        cluster.shutdown()
    print_table(rows)
    report = {
        "title": "Weight sync: collective (Gloo) beside the object store, one node, CPU",
        "machine": info,
        "conditions": (
            "embedded Ray on one node (num_cpus=2, object store 4 GiB); publisher and consumers are Ray actors "
            f"(one torch thread each); collective buckets of {args.bucket_mb} MiB; a round = publish started "
            "with every consumer's fetch, until all returned; shared 2-core machine with other jobs (load "
            f"average {info['load_at_start'][0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)"
        ),
        "seeds": [0],
        "figures": rows,
        "source": "benchmarks/weight_sync.py",
        "notes": [
            "One node: the object store's consumers read the publisher's single copy through shared memory "
            "(zero-copy), while the collective sends every byte to every consumer over loopback TCP. Across "
            "nodes both move the bytes over the network; on GPUs the collective is NCCL.",
            "publisher peak extra MB: growth of the publisher's peak resident memory during a timed publish. "
            "The collective's figure is its staging (at most two buckets; a bucket inside one tensor is sent "
            "without staging). The object store copies the whole state dict into shared memory at every "
            "publish, but into pages the publisher mapped at an earlier one, so its growth reads 0 after the "
            "first publish: its extra memory is one full copy per version, held in the object store.",
        ],
    }
    report["command"] = shlex.join(
        ["nice", "-n", "10", "uv", "run", "python", "benchmarks/weight_sync.py", *sys.argv[1:]]
    )
    finish(report, t_start, json_path)


def print_table(rows: list[dict[str, Any]]) -> None:
    by = {(r["dtype"], r["MB"], r["consumers"], r["mode"]): r for r in rows}
    keys = sorted({(d, m, n) for d, m, n, _ in by}, key=lambda k: (k[0] != "float32", k[1], k[2]))
    print(
        f"\n{'dtype':>8} {'MB':>6} {'cons':>4} | {'collective s':>12} {'MB/s':>7} {'+MB':>6} | "
        f"{'object store s':>14} {'MB/s':>7} {'+MB':>6} | {'coll/os':>7}"
    )
    for d, m, n in keys:
        c, o = by.get((d, m, n, "collective")), by.get((d, m, n, "object_store"))
        if c is None or o is None:
            continue
        cs, os_ = c["s publish->all fetched"], o["s publish->all fetched"]
        print(
            f"{d:>8} {m:>6} {n:>4} | {cs:>12.3f} {c['MB/s']:>7.0f} {fmt(c['publisher peak extra MB'], '.0f'):>6} | "
            f"{os_:>14.3f} {o['MB/s']:>7.0f} {fmt(o['publisher peak extra MB'], '.0f'):>6} | {cs / os_:>7.2f}"
        )


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()

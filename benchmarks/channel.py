"""Channel and weight-broadcast speed: rlinf's RayChannel beside ray.util.queue.Queue and a raw actor.

Two processes on one node: a producer (a Ray actor) and the consumer (this driver); each queue
also has its own actor process. Every figure is measured in the same run for the three peers:

* ``rlinf``: :class:`rlinf_scheduler.channel.RayChannel` (direct TCP data plane, object store for
  large payloads) and :class:`rlinf_scheduler.weights.WeightBroadcast`;
* ``ray queue``: ``ray.util.queue.Queue`` (an asyncio actor; every put/get is an actor call);
* ``raw actor``: a plain Ray actor holding a deque, ``ray.get(actor.put.remote(x))`` per put and a
  polling ``ray.get(actor.get.remote())`` per get; its latency row is the round trip of one
  actor call, the floor of any channel whose every operation is a Ray call.

Measured: small-item throughput (items/s; one item per call, and batches of 100 with
``put_many``/``get_batch`` vs the queue's ``put_nowait_batch``/``get_nowait_batch``), put-to-get
latency p50/p99 (the producer stamps ``time.monotonic()`` and puts every 2 ms; the consumer is
blocked in ``get``), bulk bandwidth for 1 MB, 64 MB and 256 MB numpy arrays (and a 64 MB torch
tensor when torch is importable) from the producer's ``put`` to the consumer holding the array, and
a 10M-parameter state_dict broadcast to 4 workers against one ``ray.put`` plus one remote
``ray.get``.

Usage::

    uv run python benchmarks/channel.py [--quick] [--json out.json]

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
import uuid
from collections import deque
from typing import Any

import numpy as np
import ray

MB = 1 << 20


# -- the producer process ------------------------------------------------------------------------


@ray.remote(num_cpus=0)
class Producer:
    def ready(self) -> bool:
        return True

    def single(self, kind: str, target: Any, n: int) -> float:
        t0 = time.monotonic()
        if kind == "rlinf" or kind == "queue":
            for i in range(n):
                target.put(i)
        else:
            for i in range(n):
                ray.get(target.put.remote(i))
        return time.monotonic() - t0

    def batched(self, kind: str, target: Any, n: int, batch: int) -> float:
        t0 = time.monotonic()
        for start in range(0, n, batch):
            items = list(range(start, start + batch))
            if kind == "rlinf":
                target.put_many(items)
            elif kind == "queue":
                target.put_nowait_batch(items)
            else:
                ray.get(target.put_many.remote(items))
        return time.monotonic() - t0

    def latency(self, kind: str, target: Any, n: int, gap: float) -> None:
        for i in range(n):
            time.sleep(gap)
            item = (time.monotonic(), i)
            if kind == "rlinf" or kind == "queue":
                target.put(item)
            else:
                ray.get(target.put.remote(item))

    def warm_object_store(self, nbytes: int) -> None:
        """Touch ``nbytes`` of the object store once, so no peer pays its first page faults."""
        refs = [ray.put(np.ones(256 * MB, dtype=np.uint8)) for _ in range(nbytes // (256 * MB))]
        del refs

    def bulk(self, kind: str, target: Any, nbytes: int, torch_tensor: bool) -> float:
        """Put one array of ``nbytes`` (made before the clock starts); return the put's start."""
        arr = np.ones(nbytes, dtype=np.uint8)
        if torch_tensor:
            import torch

            arr = torch.from_numpy(arr)
        t0 = time.monotonic()
        if kind == "rlinf":
            target.put(arr, "bulk")
        elif kind == "queue":
            target.put(arr)
        else:
            ray.get(target.put.remote(arr))
        return t0


@ray.remote(num_cpus=0)
class RawQueue:
    """The raw baseline: a plain actor with a deque."""

    def __init__(self) -> None:
        self.items: deque[Any] = deque()

    def put(self, item: Any) -> None:
        self.items.append(item)

    def put_many(self, items: list[Any]) -> None:
        self.items.extend(items)

    def get(self) -> tuple[bool, Any]:
        return (True, self.items.popleft()) if self.items else (False, None)

    def get_many(self, n: int) -> list[Any]:
        if len(self.items) < n:
            return []
        return [self.items.popleft() for _ in range(n)]

    def echo(self, x: Any) -> Any:
        return x


@ray.remote(num_cpus=0)
class Worker:
    """A rollout worker of the broadcast benchmark."""

    def ready(self) -> bool:
        return True

    def fetch(self, wb: Any, min_version: int) -> float:
        _, sd = wb.fetch(min_version=min_version, timeout=120)
        _touch(sd)
        return time.monotonic()

    def get_ref(self, refs: list[Any]) -> float:
        sd = ray.get(refs[0])
        _touch(sd)
        return time.monotonic()


def _touch(sd: dict[str, Any]) -> None:
    """Read one element of every tensor: the state_dict is usable (no lazy transfer left)."""
    for v in sd.values():
        v.reshape(-1)[-1].item()


# -- consumer-side drivers -----------------------------------------------------------------------


def _poll_get(kind: str, q: Any) -> Any:
    from ray.util.queue import Empty

    while True:
        if kind == "queue":
            try:
                return q.get_nowait()
            except Empty:
                time.sleep(0.0002)
        else:
            ok, item = ray.get(q.get.remote())
            if ok:
                return item
            time.sleep(0.0002)


def run_single(kind: str, q: Any, prod: Any, n: int) -> float:
    t0 = time.monotonic()
    ref = prod.single.remote(kind, q, n)
    for _ in range(n):
        if kind == "rlinf" or kind == "queue":
            q.get(timeout=120)
        else:
            _poll_get(kind, q)
    dt = time.monotonic() - t0
    ray.get(ref)
    return n / dt


def run_batched(kind: str, q: Any, prod: Any, n: int, batch: int) -> float:
    from ray.util.queue import Empty

    t0 = time.monotonic()
    ref = prod.batched.remote(kind, q, n, batch)
    got = 0
    while got < n:
        if kind == "rlinf":
            got += len(q.get_batch(batch, timeout=120))
        elif kind == "queue":
            try:
                got += len(q.get_nowait_batch(batch))
            except Empty:
                time.sleep(0.0005)
        else:
            items = ray.get(q.get_many.remote(batch))
            got += len(items)
            if not items:
                time.sleep(0.0005)
    dt = time.monotonic() - t0
    ray.get(ref)
    return n / dt


def run_latency(kind: str, q: Any, prod: Any, n: int) -> tuple[float, float]:
    lat = []
    if kind == "raw":
        for i in range(n):
            t0 = time.monotonic()
            ray.get(q.echo.remote((t0, i)))
            lat.append(time.monotonic() - t0)
    else:
        ref = prod.latency.remote(kind, q, n, 0.002)
        for _ in range(n):
            ts, _i = q.get(timeout=120)
            lat.append(time.monotonic() - ts)
        ray.get(ref)
    lat.sort()
    warm = lat[: max(1, len(lat))]
    return 1000 * warm[len(warm) // 2], 1000 * warm[min(len(warm) - 1, int(len(warm) * 0.99))]


def run_bulk(kind: str, q: Any, prod: Any, nbytes: int, reps: int, torch_tensor: bool) -> float:
    """Median GB/s over ``reps`` transfers, one at a time: from the start of the producer's put
    to the consumer holding the array (one element read)."""
    rates = []
    for rep in range(-1 if nbytes < 256 * MB else 0, reps):  # rep -1 is a warm-up, not timed
        ref = prod.bulk.remote(kind, q, nbytes, torch_tensor)
        if kind == "rlinf":
            arr = q.get("bulk", timeout=300)
        elif kind == "queue":
            arr = q.get(timeout=300)
        else:
            arr = _poll_get(kind, q)
        arr.reshape(-1)[-1].item()
        end = time.monotonic()
        start = ray.get(ref)
        del arr
        if rep >= 0:
            rates.append(nbytes / (end - start) / 1e9)
    return statistics.median(rates)


def state_dict_10m(use_torch: bool) -> dict[str, Any]:
    shapes = {"0.weight": (1920, 2560), "0.bias": (1920,), "2.weight": (2560, 1920), "2.bias": (2560,)}
    shapes |= {"4.weight": (128, 2560), "4.bias": (128,)}
    rng = np.random.default_rng(0)
    sd = {k: rng.standard_normal(s, dtype=np.float32) for k, s in shapes.items()}
    if use_torch:
        import torch

        sd = {k: torch.from_numpy(v) for k, v in sd.items()}
    return sd


def run_broadcast(workers: list[Any], sd: dict[str, Any], reps: int) -> dict[str, float]:
    from rlinf_scheduler.weights import WeightBroadcast

    wb = WeightBroadcast.create(f"bench-{uuid.uuid4().hex[:6]}")
    ours, base = [], []
    try:
        for rep in range(-1, reps):  # rep -1 warms up (imports, connections); not timed
            version = rep + 1
            waiting = [w.fetch.remote(wb, version) for w in workers]
            time.sleep(0.3)  # the workers are parked in the registry, waiting for version `rep`
            t0 = time.monotonic()
            wb.publish(sd, version=version)
            done = max(ray.get(waiting)) - t0
            t0 = time.monotonic()
            ref = ray.put(sd)
            got = ray.get(workers[0].get_ref.remote([ref])) - t0
            del ref
            if rep >= 0:
                ours.append(done)
                base.append(got)
    finally:
        wb.destroy()
    return {"ours_s": statistics.median(ours), "put_get_s": statistics.median(base)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer items and repetitions (under a minute)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = ap.parse_args()
    quick = args.quick

    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False

    from ray._private import ray_constants

    # Under `uv run`, Ray would start every worker through `uv run` (seconds each); they share
    # this interpreter, so start them with it.
    ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    t_start = time.monotonic()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        namespace=f"bench-channel-{uuid.uuid4().hex[:6]}",
    )
    from ray.util.queue import Queue

    from rlinf_scheduler.channel import RayChannel

    n_single = (
        {"rlinf": 3000, "queue": 400, "raw": 400} if quick else {"rlinf": 20000, "queue": 2000, "raw": 2000}
    )
    n_batched = (
        {"rlinf": 20000, "queue": 5000, "raw": 5000}
        if quick
        else {"rlinf": 200000, "queue": 50000, "raw": 50000}
    )
    n_lat = 300 if quick else 1000
    sizes = [1 * MB, 64 * MB, 256 * MB]
    reps = {1 * MB: 5 if quick else 20, 64 * MB: 2 if quick else 7, 256 * MB: 1 if quick else 3}
    batch = 100

    prod = Producer.remote()
    raw = RawQueue.remote()
    queue = Queue(actor_options={"num_cpus": 0})
    chan = RayChannel.create("bench", default_timeout=120)
    n_workers = 4
    workers = [Worker.remote() for _ in range(n_workers)]
    ray.get([prod.ready.remote(), raw.echo.remote(0), *[w.ready.remote() for w in workers]])
    peers = {"rlinf": chan, "queue": queue, "raw": raw}

    print(f"[{time.monotonic() - t_start:5.1f} s] Ray and {4 + n_workers} actors up", file=sys.stderr)
    ray.get(prod.warm_object_store.remote(1024 * MB))
    rows: dict[str, dict[str, float]] = {}
    for kind, q in peers.items():
        run_single(kind, q, prod, 50)  # warm up connections and code paths
        r = rows.setdefault(kind, {})
        r["items_per_s"] = run_single(kind, q, prod, n_single[kind])
        r["items_per_s_batched"] = run_batched(kind, q, prod, n_batched[kind], batch)
        r["latency_p50_ms"], r["latency_p99_ms"] = run_latency(kind, q, prod, n_lat)
        for size in sizes:
            r[f"bandwidth_{size // MB}mb_gbps"] = run_bulk(kind, q, prod, size, reps[size], False)
        if have_torch:
            r["bandwidth_64mb_torch_gbps"] = run_bulk(kind, q, prod, 64 * MB, 1 if quick else 5, True)
        print(f"[{time.monotonic() - t_start:5.1f} s] {kind} measured", file=sys.stderr)

    sd = state_dict_10m(have_torch)
    bc = run_broadcast(workers, sd, 2 if quick else 7)
    bc_np = run_broadcast(workers, state_dict_10m(False), 2 if quick else 7) if have_torch else bc

    result = {
        "items_per_s": rows["rlinf"]["items_per_s"],
        "items_per_s_batched": rows["rlinf"]["items_per_s_batched"],
        "items_per_s_queue_baseline": rows["queue"]["items_per_s"],
        "items_per_s_batched_queue_baseline": rows["queue"]["items_per_s_batched"],
        "items_per_s_raw_actor_baseline": rows["raw"]["items_per_s"],
        "throughput_vs_queue": rows["rlinf"]["items_per_s"] / rows["queue"]["items_per_s"],
        "throughput_batched_vs_queue": rows["rlinf"]["items_per_s_batched"]
        / rows["queue"]["items_per_s_batched"],
        "latency_p50_ms": rows["rlinf"]["latency_p50_ms"],
        "latency_p99_ms": rows["rlinf"]["latency_p99_ms"],
        "bandwidth_64mb_gbps": rows["rlinf"]["bandwidth_64mb_gbps"],
        "broadcast_ratio": bc["ours_s"] / bc["put_get_s"],
        "broadcast_s": bc["ours_s"],
        "broadcast_put_get_s": bc["put_get_s"],
        "broadcast_payload": "torch" if have_torch else "numpy",
        "broadcast_ratio_numpy": bc_np["ours_s"] / bc_np["put_get_s"],
        "broadcast_workers": n_workers,
        "peers": rows,
        "quick": quick,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__},
    }

    labels = [
        ("items_per_s", "small items/s, one per call", "{:,.0f}"),
        ("items_per_s_batched", f"small items/s, batches of {batch}", "{:,.0f}"),
        ("latency_p50_ms", "put->get latency p50 (ms)*", "{:.3f}"),
        ("latency_p99_ms", "put->get latency p99 (ms)*", "{:.3f}"),
        ("bandwidth_1mb_gbps", "1 MB array (GB/s)", "{:.2f}"),
        ("bandwidth_64mb_gbps", "64 MB array (GB/s)", "{:.2f}"),
        ("bandwidth_256mb_gbps", "256 MB array (GB/s)", "{:.2f}"),
        ("bandwidth_64mb_torch_gbps", "64 MB torch tensor (GB/s)", "{:.2f}"),
    ]
    print(
        f"\nChannel benchmark ({'quick' if quick else 'full'}), {os.cpu_count()} cores, Ray {ray.__version__}"
    )
    print(f"{'metric':36} {'rlinf':>12} {'ray queue':>12} {'raw actor':>12}")
    for key, label, fmt in labels:
        if key not in rows["rlinf"]:
            continue
        print(f"{label:36} " + " ".join(f"{fmt.format(rows[k][key]):>12}" for k in ("rlinf", "queue", "raw")))
    print("* raw actor latency: the round trip of one actor call")
    print(
        f"throughput vs ray queue: {result['throughput_vs_queue']:.1f}x (one per call), "
        f"{result['throughput_batched_vs_queue']:.1f}x (batched)"
    )
    print(
        f"weight broadcast, 10M params ({result['broadcast_payload']}) to {n_workers} workers: "
        f"{bc['ours_s'] * 1000:.1f} ms vs one ray.put + ray.get {bc['put_get_s'] * 1000:.1f} ms "
        f"-> ratio {result['broadcast_ratio']:.2f}"
        + (
            f" (numpy state_dict: {bc_np['ours_s'] * 1000:.1f} ms vs {bc_np['put_get_s'] * 1000:.1f} ms "
            f"-> {result['broadcast_ratio_numpy']:.2f})"
            if have_torch
            else ""
        )
    )
    print(f"total time {time.monotonic() - t_start:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    chan.destroy()
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())

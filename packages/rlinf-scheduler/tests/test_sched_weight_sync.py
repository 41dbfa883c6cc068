"""Both weight sync modes on a real embedded Ray: a learner actor publishes, consumer actors fetch.

Every consumer is its own process (a Ray actor); the collective runs over Gloo on loopback.
Killed consumers are killed for real (SIGKILL of their process), at points the test knows they
reached (after they acknowledged a version, or once their receive of a broadcast started).
The NCCL test needs two GPUs and is skipped here.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from ray import cloudpickle  # noqa: E402

from rlinf_core.errors import ChannelError, ChannelTimeout, ConfigError  # noqa: E402
from rlinf_scheduler.channel import ChannelPeerDied  # noqa: E402
from rlinf_scheduler.weights import CollectiveWeightSync, WeightBroadcast, make_weight_sync  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import this module

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(600)]

MODES = ("object_store", "collective")


def state(seed: int, scale: float = 1.0) -> dict:
    """A small model's worth of tensors in float32, bfloat16 and int64 (and a non-tensor)."""
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(300, 64, generator=g) * scale,
        "block.weight": torch.randn(64, 64, generator=g).to(torch.bfloat16),
        "block.bias": torch.randn(64, generator=g).to(torch.bfloat16),
        "head.weight": torch.randn(7, 64, generator=g) * scale,
        "steps": torch.tensor([seed], dtype=torch.int64),
        "empty": torch.zeros(0),
        "note": f"seed {seed}",
    }


def same(a: dict, b: dict) -> bool:
    """Bit for bit (dtype, shape and bytes)."""
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape):
                return False
            if not torch.equal(
                x.view(torch.uint8) if x.numel() else x, y.view(torch.uint8) if y.numel() else y
            ):
                return False
        elif x != y:
            return False
    return True


@ray.remote(num_cpus=0)
class Learner:
    def __init__(self, sync, fault: str | None = None) -> None:
        self.sync = sync
        self.sd = state(0)
        self.calls = 0
        if fault is None:
            return
        import logging

        from rlinf_scheduler.weights import publisher

        self.records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: self.records.append(record.getMessage())  # type: ignore[method-assign]
        publisher.log.addHandler(handler)

        def failing(*args, **kwargs):  # the fault: what NCCL raises for two ranks on one GPU (no GPU here)
            self.calls += 1
            raise torch.distributed.DistBackendError(
                "NCCL error in: ProcessGroupNCCL.cpp:1, invalid usage\nDuplicate GPU detected: rank 0 and rank 1"
            )

        publisher.send_buckets = failing

    def warnings(self) -> tuple[list[str], int]:
        return self.records, self.calls

    def publish(self, seed: int, version=None, timeout=120.0) -> tuple[int, float]:
        new = state(seed)
        for k, v in new.items():  # in place, as an optimiser step changes the live tensors
            if isinstance(v, torch.Tensor):
                self.sd[k].copy_(v)
            else:
                self.sd[k] = v
        t0 = time.monotonic()
        return self.sync.publish(self.sd, version=version, timeout=timeout), time.monotonic() - t0

    def stats(self) -> dict:
        return self.sync.stats().to_dict()

    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
class Consumer:
    def __init__(self, sync, fault: str | None = None) -> None:
        self.sync = sync
        if fault is None:
            return
        from rlinf_scheduler.weights import collective

        real = collective.recv_buckets

        def faulty(layout, flats, broadcast):
            if (
                fault == "fail_receive"
            ):  # the fault: this receive fails (an allocation, say), the process lives
                collective.recv_buckets = real  # once
                raise RuntimeError("injected receive failure")
            works = real(layout, flats, broadcast)
            works[0].wait()  # the fault: this process dies once it started receiving a broadcast
            os.kill(os.getpid(), signal.SIGKILL)

        collective.recv_buckets = faulty

    def fetch(self, min_version=None, timeout=60.0) -> tuple[int, dict]:
        v, sd = self.sync.fetch(min_version=min_version, timeout=timeout)
        return v, {k: (t.clone() if isinstance(t, torch.Tensor) else t) for k, t in sd.items()}

    def fetch_if_newer(self, have):
        got = self.sync.fetch_if_newer(have)
        return None if got is None else got[0]

    def attach(self, **kw) -> None:
        self.sync.attach(**kw)

    def stats(self) -> dict:
        return self.sync.stats().to_dict()

    def pid(self) -> int:
        return os.getpid()


def make(mode: str, **kw):
    kw.setdefault("timeout", 120.0)
    if mode == "collective":
        kw.setdefault("bucket_bytes", 16 << 10)  # many buckets: tensors straddle them
        return CollectiveWeightSync.create(
            f"ws-{uuid.uuid4().hex[:6]}", default_timeout=kw["timeout"], bucket_bytes=kw["bucket_bytes"]
        )
    return WeightBroadcast.create(f"ws-{uuid.uuid4().hex[:6]}", default_timeout=kw["timeout"])


def kill(actor) -> None:
    os.kill(ray.get(actor.pid.remote()), signal.SIGKILL)


@pytest.mark.parametrize("mode", MODES)
def test_both_modes_deliver_identical_tensors_and_versions_only_grow(ray_session, mode: str) -> None:
    sync = make(mode)
    try:
        learner = Learner.remote(sync)
        consumers = [Consumer.remote(sync) for _ in range(2)]
        early = consumers[0].fetch.remote(min_version=0)  # waits for the first publish
        assert ray.get(learner.publish.remote(1))[0] == 0
        v, got = ray.get(early)
        assert v == 0 and same(got, state(1))
        seen = []
        for seed in (2, 3, 4):
            version, _ = ray.get(learner.publish.remote(seed))
            results = ray.get([c.fetch.remote(min_version=version) for c in consumers])
            assert all(r[0] == version and same(r[1], state(seed)) for r in results)
            seen.append(version)
        assert seen == [1, 2, 3] and sync.version() == 3
        assert ray.get(consumers[1].fetch_if_newer.remote(3)) is None
        assert ray.get(consumers[1].fetch_if_newer.remote(2)) == 3
        with pytest.raises(ray.exceptions.RayTaskError, match="version 3 is not newer than the published 3"):
            ray.get(learner.publish.remote(5, version=3))
        assert ray.get(learner.publish.remote(5, version=9))[0] == 9
        assert ray.get(consumers[0].fetch.remote(min_version=9))[0] == 9
        with pytest.raises(ray.exceptions.RayTaskError) as err:
            ray.get(consumers[1].fetch.remote(min_version=10, timeout=0.5))
        assert isinstance(err.value.cause, ChannelTimeout)
        assert f"weights {sync.name!r} version >= 10" in str(err.value.cause)
        assert "newest published: 9" in str(err.value.cause)
        stats = ray.get(learner.stats.remote())
        assert stats["mode"] == mode and stats["publishes"] == 5 and stats["bytes_published"] > 0
        cstats = ray.get(consumers[1].stats.remote())
        assert cstats["fetches"] >= 4 and cstats["bytes_fetched"] > 0
        if mode == "collective":  # every version after the first reached both over the group
            assert stats["groups_formed"] >= 1 and cstats["groups_formed"] >= 1
    finally:
        sync.destroy()


def test_collective_consumer_killed_and_restarted_gets_weights_again(ray_session) -> None:
    sync = make("collective")
    try:
        learner = Learner.remote(sync)
        a, b = Consumer.remote(sync), Consumer.remote(sync)
        ray.get(learner.publish.remote(1))
        ray.get([c.fetch.remote(min_version=0) for c in (a, b)])
        v, _ = ray.get(learner.publish.remote(2))  # both in the group now
        assert [r[0] for r in ray.get([c.fetch.remote(min_version=v) for c in (a, b)])] == [v, v]
        kill(b)  # it acknowledged version v: killed between publishes
        v, took = ray.get(learner.publish.remote(3))  # the dead one is dropped, not waited for
        assert took < 30.0
        assert same(ray.get(a.fetch.remote(min_version=v))[1], state(3))
        b2 = Consumer.remote(sync)  # the restarted worker: a new process
        got_v, got = ray.get(b2.fetch.remote(min_version=v, timeout=60.0))
        assert got_v == v and same(got, state(3))
        assert ray.get(b2.stats.remote())["fallbacks"] == 1  # its first version: the object store
        v, _ = ray.get(learner.publish.remote(4))  # the next publish forms a group with it
        results = ray.get([c.fetch.remote(min_version=v) for c in (a, b2)])
        assert all(r[0] == v and same(r[1], state(4)) for r in results)
        assert ray.get(b2.stats.remote())["groups_formed"] == 1
    finally:
        sync.destroy()


def test_collective_consumer_killed_in_a_broadcast_is_dropped_and_the_others_get_the_version(
    ray_session,
) -> None:
    sync = make("collective")
    try:
        learner = Learner.remote(sync)
        a = Consumer.remote(sync)
        victim = Consumer.remote(sync, fault="die_in_receive")
        ray.get(learner.publish.remote(1))
        ray.get([c.fetch.remote(min_version=0) for c in (a, victim)])  # via the object store
        v, took = ray.get(learner.publish.remote(2))  # the victim dies once its receive started
        assert took < 60.0
        assert same(ray.get(a.fetch.remote(min_version=v))[1], state(2))
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(victim.pid.remote())
        restarted = Consumer.remote(sync)
        assert same(ray.get(restarted.fetch.remote(min_version=v))[1], state(2))
        v, _ = ray.get(learner.publish.remote(3))
        assert all(
            same(r[1], state(3)) for r in ray.get([c.fetch.remote(min_version=v) for c in (a, restarted)])
        )
    finally:
        sync.destroy()


def test_collective_consumer_whose_receive_fails_gets_the_version_from_the_object_store(ray_session) -> None:
    sync = make("collective")
    try:
        learner = Learner.remote(sync)
        a = Consumer.remote(sync)
        b = Consumer.remote(sync, fault="fail_receive")
        ray.get(learner.publish.remote(1))
        ray.get([c.fetch.remote(min_version=0) for c in (a, b)])  # via the object store
        v, took = ray.get(learner.publish.remote(2))  # b's receive fails: the broadcast is abandoned
        assert took < 60.0
        # once publish returned, both hold it already (the publish waited for the object-store copy)
        assert ray.get([c.fetch_if_newer.remote(v - 1) for c in (a, b)]) == [v, v]
        for c in (a, b):  # both hold version v all the same, through the object store
            got_v, got = ray.get(c.fetch.remote(min_version=v, timeout=5.0))
            assert got_v == v and same(got, state(2))
        assert ray.get(b.stats.remote())["fallbacks"] == 2
        v, _ = ray.get(learner.publish.remote(3))  # a new group, and b receives this time
        assert all(same(r[1], state(3)) for r in ray.get([c.fetch.remote(min_version=v) for c in (a, b)]))
        assert ray.get(b.stats.remote())["groups_formed"] == 2
    finally:
        sync.destroy()


def test_a_failing_collective_falls_back_to_the_object_store_and_says_so_once(ray_session) -> None:
    """A collective that torch itself fails (``DistBackendError``, as NCCL raises for two ranks on
    one GPU) does not escape ``publish``: the consumers get that version and the later ones
    through the object store, and the publisher warns once."""
    sync = make("collective")
    try:
        learner = Learner.remote(sync, fault="collective_fails")
        consumers = [Consumer.remote(sync) for _ in range(2)]
        ray.get(learner.publish.remote(1))
        ray.get([c.fetch.remote(min_version=0) for c in consumers])  # via the object store
        for seed in (2, 3, 4):
            v, took = ray.get(learner.publish.remote(seed))
            assert took < 60.0
            for got_v, got in ray.get([c.fetch.remote(min_version=v, timeout=10.0) for c in consumers]):
                assert got_v == v and same(got, state(seed))
        records, calls = ray.get(learner.warnings.remote())
        assert calls == 1  # tried once, then never again
        (warning,) = records
        assert "DistBackendError: NCCL error" in warning and "through the object store" in warning
        assert all(ray.get(c.stats.remote())["fallbacks"] == 4 for c in consumers)
    finally:
        sync.destroy()


def test_publisher_death_is_named_and_held_weights_stay(ray_session) -> None:
    sync = make("collective")
    try:
        learner = Learner.options(name=f"learner-{uuid.uuid4().hex[:6]}").remote(sync)
        c = Consumer.remote(sync)
        ray.get(learner.publish.remote(1))
        assert ray.get(c.fetch.remote(min_version=0))[0] == 0
        kill(learner)
        assert ray.get(c.fetch.remote(min_version=0))[0] == 0  # what it holds stays usable
        with pytest.raises(ray.exceptions.RayTaskError) as err:
            ray.get(c.fetch.remote(min_version=1, timeout=30.0))
        assert isinstance(err.value.cause, ChannelPeerDied)
        assert "the publisher actor 'learner-" in str(err.value.cause)
    finally:
        sync.destroy()


def test_fetch_before_any_publisher_times_out_naming_it(ray_session) -> None:
    sync = make("collective")
    try:
        c = Consumer.remote(sync)
        with pytest.raises(ray.exceptions.RayTaskError) as err:
            ray.get(c.fetch.remote(min_version=0, timeout=1.0))
        assert isinstance(err.value.cause, ChannelTimeout)
        assert f"waiting for the publisher of weights {sync.name!r} to start" in str(err.value.cause)
    finally:
        sync.destroy()


def test_collective_refuses_a_mixed_device_set(ray_session) -> None:
    with pytest.raises(ConfigError, match=r"rollout rank 1 on cpu.*use object_store") as err:
        make_weight_sync(
            "never",
            mode="collective",
            devices={"actor rank 0": "cuda:0", "rollout rank 0": "cuda:1", "rollout rank 1": "cpu"},
        )
    assert err.value.problems[0].path == "rollout.weight_sync"
    # auto picks the object store for a CPU or mixed set, the collective (NCCL) for all-CUDA
    auto = make_weight_sync(
        f"auto-{uuid.uuid4().hex[:6]}", devices={"actor rank 0": "cpu", "rollout rank 0": "cpu"}
    )
    assert isinstance(auto, WeightBroadcast)
    auto.destroy()
    nccl = make_weight_sync(
        f"nccl-{uuid.uuid4().hex[:6]}", devices={"actor rank 0": "cuda:0", "rollout rank 0": "cuda:1@node 1"}
    )
    assert isinstance(nccl, CollectiveWeightSync) and nccl.backend == "nccl"
    nccl.destroy()
    # at run time: a consumer on a CUDA device cannot join a Gloo (CPU) group
    sync = make("collective")
    try:
        learner = Learner.remote(sync)
        ray.get(learner.publish.remote(1))
        c = Consumer.remote(sync)
        with pytest.raises(ray.exceptions.RayTaskError) as err:
            ray.get(c.attach.remote(device="cuda:0", label="rollout rank 3"))
        assert isinstance(err.value.cause, ChannelError)
        assert "synced over gloo (cpu devices), but rollout rank 3 is on cuda" in str(err.value.cause)
    finally:
        sync.destroy()


@pytest.mark.gpu
def test_nccl_broadcast_between_two_gpus(ray_session) -> None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs (NCCL refuses two ranks on one GPU)")
    sync = CollectiveWeightSync.create(f"nccl-{uuid.uuid4().hex[:6]}", backend="nccl", bucket_bytes=1 << 20)
    try:
        learner = Learner.options(num_gpus=1).remote(sync)
        c = Consumer.options(num_gpus=1).remote(sync)
        ray.get(learner.publish.remote(1))
        ray.get(c.fetch.remote(min_version=0))
        v, _ = ray.get(learner.publish.remote(2))
        got_v, got = ray.get(c.fetch.remote(min_version=v))
        assert got_v == v and same(
            {k: t.cpu() if isinstance(t, torch.Tensor) else t for k, t in got.items()}, state(2)
        )
        assert ray.get(c.stats.remote())["groups_formed"] == 1
    finally:
        sync.destroy()

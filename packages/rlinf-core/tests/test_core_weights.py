"""The in-process weight sync (LocalWeightSync) and the mode choice every scheduler shares."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from rlinf_core import LocalWeightSync, Scheduler, WeightSync
from rlinf_core.errors import ChannelError, ChannelTimeout, ConfigError, SchedulerError
from rlinf_core.weights import device_kind, resolve_weight_sync_mode, shared_gpus


class Tensorish:
    """Enough of a tensor for the snapshot (``detach().clone()``) without importing torch."""

    def __init__(self, data: list[float]) -> None:
        self.data = data

    def detach(self) -> Tensorish:
        return self

    def clone(self) -> Tensorish:
        return Tensorish(list(self.data))


def test_versions_grow_and_a_snapshot_is_what_consumers_get() -> None:
    pub = LocalWeightSync("w-snap")
    sub = pickle.loads(pickle.dumps(pub))  # a handle passed to another worker finds the same weights
    try:
        assert isinstance(pub, WeightSync) and pub.version() is None
        assert sub.fetch_if_newer(None) is None
        w = Tensorish([1.0, 2.0])
        assert pub.publish({"w": w, "step": 3}) == 0
        w.data[0] = 99.0  # the learner goes on changing its tensors in place
        v, sd = sub.fetch(min_version=0)
        assert v == 0 and sd["w"].data == [1.0, 2.0] and sd["step"] == 3
        assert pub.publish({"w": w}) == 1 and pub.publish({"w": w}, version=5) == 5
        with pytest.raises(ChannelError, match="version 5 is not newer than the published 5"):
            pub.publish({"w": w}, version=5)
        assert sub.fetch_if_newer(5) is None and sub.fetch_if_newer(1)[0] == 5
        assert sub.version() == 5
        stats = sub.stats()
        assert stats.mode == "local" and stats.fetches == 2 and pub.stats().publishes == 3
    finally:
        pub.destroy()


def test_copy_false_hands_over_the_very_objects() -> None:
    sync = LocalWeightSync("w-nocopy", copy=False)
    try:
        w = Tensorish([1.0])
        sync.publish({"w": w})
        assert sync.fetch()[1]["w"] is w
    finally:
        sync.destroy()


def test_fetch_waits_for_min_version_and_times_out_naming_it() -> None:
    sync = LocalWeightSync("w-wait")
    try:
        box: list = []
        t = threading.Thread(target=lambda: box.append(sync.fetch(min_version=2, timeout=30)))
        t.start()
        for v in range(3):
            time.sleep(0.01)
            sync.publish({"v": v})
        t.join(30)
        assert box and box[0][0] == 2 and box[0][1] == {"v": 2}
        t0 = time.monotonic()
        with pytest.raises(ChannelTimeout, match=r"weights 'w-wait' version >= 7 \(newest published: 2\)"):
            sync.fetch(min_version=7, timeout=0.2)
        assert time.monotonic() - t0 < 5
    finally:
        sync.destroy()


def test_destroy_forgets_the_weights() -> None:
    a = LocalWeightSync("w-gone")
    a.publish({"x": 1})
    a.destroy()
    b = LocalWeightSync("w-gone")
    try:
        assert b.version() is None
    finally:
        b.destroy()


@pytest.mark.parametrize(
    ("mode", "devices", "want"),
    [
        ("auto", None, "object_store"),
        ("auto", {"actor rank 0": "cpu", "rollout rank 0": "cpu"}, "object_store"),
        ("auto", {"actor rank 0": "cuda:0", "rollout rank 0": "cpu"}, "object_store"),
        ("auto", {"actor rank 0": "cuda:0@node 0", "rollout rank 0": "cuda:1@node 1"}, "collective"),
        ("collective", {"actor rank 0": "cpu", "rollout rank 0": "cpu"}, "collective"),
        ("object_store", {"actor rank 0": "cuda:0", "rollout rank 0": "cuda:1"}, "object_store"),
    ],
)
def test_the_mode_follows_the_devices(mode, devices, want) -> None:
    assert resolve_weight_sync_mode(mode, devices) == want


def test_collective_refuses_mixed_devices_and_unknown_modes_are_named() -> None:
    with pytest.raises(ConfigError) as err:
        resolve_weight_sync_mode("collective", {"actor rank 0": "cuda:0", "rollout rank 0": "cpu"})
    text = str(err.value)
    assert "actor rank 0 on cuda:0, rollout rank 0 on cpu" in text and "object_store" in text
    assert err.value.problems[0].path == "rollout.weight_sync"
    with pytest.raises(ConfigError, match="unknown weight sync mode 'nccl'; choose one of auto, collective"):
        resolve_weight_sync_mode("nccl", None, path="x.y")
    assert device_kind("cuda:3@node 2") == "cuda" and device_kind(" CPU ") == "cpu"


class Bare(Scheduler):
    PLUGIN_NAME = "bare"

    def start(self, config, *, timeout=None):
        pass

    def launch(self, component, worker_cls, *args, **kwargs):
        raise NotImplementedError

    def channel(self, name, *, maxsize=0, **options):
        raise NotImplementedError

    def shutdown(self):
        pass


def test_a_scheduler_without_weight_sync_or_links_says_so() -> None:
    with pytest.raises(SchedulerError, match="the 'bare' scheduler provides no weight sync"):
        Bare().weight_sync("w")
    with pytest.raises(SchedulerError, match="the 'bare' scheduler provides no direct links"):
        Bare().links("secret")
    assert Bare.plan_placement({"cluster": {}}) is None


def test_members_on_one_gpu_are_found_and_keep_auto_off_the_collective() -> None:
    one_gpu = {"actor rank 0": "cuda:0@node 0", "rollout rank 0": "cuda:0@node 0", "ref": "cuda:1@node 0"}
    assert shared_gpus(one_gpu) == [["actor rank 0", "rollout rank 0"]]
    assert shared_gpus({"a": "cuda:0@node 0", "b": "cuda:0@node 1", "c": "cpu", "d": "cpu"}) == []
    assert shared_gpus({"a": "cuda", "b": "cuda"}) == [["a", "b"]]  # index unknown: taken as one GPU
    assert resolve_weight_sync_mode("auto", one_gpu) == "object_store"
    with pytest.raises(
        ConfigError, match=r"actor rank 0 and rollout rank 0 share cuda:0@node 0; use object_store"
    ):
        resolve_weight_sync_mode("collective", one_gpu)

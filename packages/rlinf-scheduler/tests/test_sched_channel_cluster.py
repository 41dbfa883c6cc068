"""Channels across two simulated Ray nodes (``ray.cluster_utils.Cluster`` on loopback).

Node A (the head) runs the driver, the consumer; node B runs the producers. Checks the actor
placement, a large payload crossing nodes, the per-node replicas of DistributedRayChannel, and
that a consumer waiting on a producer of the other node learns of its death by name, well within
its timeout.
"""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest

from rlinf_scheduler.channel import ChannelPeerDied, DistributedRayChannel, RayChannel

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def two_nodes():
    from ray._private import ray_constants

    with pytest.MonkeyPatch.context() as mp:
        # Workers share this interpreter: skip Ray's `uv run` worker hook (seconds per process).
        mp.setattr(ray_constants, "RAY_ENABLE_UV_RUN_RUNTIME_ENV", False)
        cluster = cluster_utils.Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "resources": {"node_a": 1}, "include_dashboard": False},
        )
        cluster.add_node(num_cpus=1, resources={"node_b": 1})
        ray.init(
            address=cluster.address, namespace=f"test-cluster-{uuid.uuid4().hex[:8]}", log_to_driver=False
        )
        cluster.wait_for_nodes()
    nodes = {}
    for n in ray.nodes():
        for tag in ("node_a", "node_b"):
            if n["Alive"] and tag in n["Resources"]:
                nodes[tag] = n["NodeID"]
    yield nodes
    ray.shutdown()
    cluster.shutdown()


@ray.remote(num_cpus=0, resources={"node_b": 0.01})
class RemoteProducer:
    def __init__(self, channel):
        self.channel = channel

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def put(self, item, key):
        self.channel.put(item, key)
        return True

    def put_big(self, key: str, nbytes: int) -> int:
        self.channel.put(np.arange(nbytes // 8, dtype=np.int64), key)
        return nbytes


def test_dead_producer_on_another_node_is_named(two_nodes) -> None:
    ch = RayChannel.create(f"x-{uuid.uuid4().hex[:6]}")  # on the consumer's (driver's) node by default
    try:
        assert ch.node_id == two_nodes["node_a"]
        name = f"env-{uuid.uuid4().hex[:6]}"
        prod = RemoteProducer.options(name=name).remote(ch)
        assert ray.get(prod.node.remote()) == two_nodes["node_b"]
        assert ray.get(prod.put_big.remote("obs", 32 << 20)) == 32 << 20
        big = ch.get("obs", timeout=30)  # crossed nodes through the object store
        assert big.shape == (4 << 20,) and int(big[-1]) == (4 << 20) - 1
        threading.Timer(1.0, ray.kill, args=(prod,)).start()
        t0 = time.monotonic()
        with pytest.raises(ChannelPeerDied, match=rf"producer actor '{name}' \[RemoteProducer\]") as info:
            ch.get("obs", timeout=60)
        assert time.monotonic() - t0 < 20  # detected on death, far within the 60 s timeout
        assert name in info.value.peer
    finally:
        ch.destroy()


def test_channel_actor_placed_on_the_planned_node(two_nodes) -> None:
    ch = RayChannel.create(f"placed-{uuid.uuid4().hex[:6]}", node_id=two_nodes["node_b"])
    try:
        assert ch.node_id == two_nodes["node_b"]
        ch.put({"a": 1})
        assert ch.get() == {"a": 1}
    finally:
        ch.destroy()


def test_distributed_channel_keeps_keys_on_the_producer_node(two_nodes) -> None:
    name = f"dist-{uuid.uuid4().hex[:6]}"
    ch = DistributedRayChannel.create(name, maxsize=4)
    try:
        prod = RemoteProducer.remote(ch)
        got: list = []
        t = threading.Thread(target=lambda: got.append(ch.get("b-key", timeout=30)))
        t.start()  # the consumer asks before any producer claimed the key: it waits for the claim
        time.sleep(0.5)
        assert ray.get(prod.put.remote("from b", "b-key"))
        t.join(30)
        assert got == ["from b"]
        assert ch.node_of("b-key") == two_nodes["node_b"]
        ch.put("from a", "a-key")
        assert ch.node_of("a-key") == two_nodes["node_a"]
        assert ray.get(prod.put.remote("again", "b-key"))
        assert ch.qsize("b-key") == 1 and ch.get("b-key") == "again"
        assert sorted(ch.nodes()) == sorted(two_nodes.values())
        ch.close()
        assert ch.closed
    finally:
        for node in two_nodes.values():
            for n in (f"{name}@{node}", name):
                try:
                    ray.kill(ray.get_actor("rlinf-channel:" + n))
                except ValueError:
                    pass

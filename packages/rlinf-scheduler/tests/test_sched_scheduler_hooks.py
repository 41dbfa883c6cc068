"""What algorithms reach through core's Scheduler interface, on RayScheduler's embedded Ray:
a collective weight sync and direct links between launched worker groups."""

from __future__ import annotations

import secrets
import sys

import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from ray import cloudpickle  # noqa: E402

from rlinf_core import Worker  # noqa: E402
from rlinf_core.errors import SchedulerError  # noqa: E402
from rlinf_scheduler.runtime.scheduler import RayScheduler  # noqa: E402
from rlinf_scheduler.weights import CollectiveWeightSync  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import this module

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(600)]

CONFIG = {
    "cluster": {
        "num_nodes": 1,
        "component_placement": {
            "actor": {"node_group": "node", "placement": "0"},
            "rollout": {"node_group": "node", "placement": "0:0-1"},
        },
    }
}


class Learner(Worker):
    def publish(self, ws, value: float) -> int:
        return ws.publish({"w": torch.full((50_000,), value), "b": torch.ones(3, dtype=torch.bfloat16)})

    def listen(self, links):
        self.listener = links.listen(name=f"actor rank {self.rank}")
        return self.listener.address

    def accept(self, gen: int) -> dict:
        got = self.listener.accept(gen, [0, 1], timeout=60, peer="rollout")
        return {r: link.recv("a hello") for r, link in got.items()}


class Rollout(Worker):
    def fetch(self, ws, min_version: int) -> tuple[int, float]:
        version, sd = ws.fetch(min_version=min_version, timeout=60)
        return version, float(sd["w"].sum())

    def hello(self, links, address, gen: int) -> None:
        link = links.connect(tuple(address), gen=gen, rank=self.rank, timeout=30, peer="actor rank 0")
        link.send(("hello from rollout", self.rank))


def test_weight_sync_and_links_through_the_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RAY_ADDRESS", "RLINF_NODE_RANK"):
        monkeypatch.delenv(var, raising=False)
    with RayScheduler(ray_init={"num_cpus": 2}) as sched:
        sched.start(CONFIG, timeout=180)
        devices = {"actor rank 0": "cpu", "rollout rank 0": "cpu", "rollout rank 1": "cpu"}
        ws = sched.weight_sync("policy", mode="collective", devices=devices, timeout=120)
        assert isinstance(ws, CollectiveWeightSync) and ws.backend == "gloo"
        with pytest.raises(SchedulerError, match="weights 'policy' exist already"):
            sched.weight_sync("policy")
        learner = sched.launch("actor", Learner)
        rollout = sched.launch("rollout", Rollout)
        assert learner.publish(ws, 1.0).wait(120) == [0]
        assert rollout.fetch(ws, 0).wait(120) == [(0, 50_000.0)] * 2
        assert learner.publish(ws, 2.0).wait(120) == [1]  # over the group this time
        assert rollout.fetch(ws, 1).wait(120) == [(1, 100_000.0)] * 2
        links = sched.links(secrets.token_hex(16))
        (address,) = learner.listen(links).wait(60)
        accepted = learner.accept(3)
        rollout.hello(links, address, 3).wait(60)
        assert accepted.wait(60) == [{0: ("hello from rollout", 0), 1: ("hello from rollout", 1)}]

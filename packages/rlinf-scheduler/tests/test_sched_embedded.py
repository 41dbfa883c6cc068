"""The embedded single-node Ray that ``rlinf train`` starts by default, on this machine."""

from __future__ import annotations

import os
import sys

import pytest

ray = pytest.importorskip("ray")

from ray import cloudpickle  # noqa: E402

from rlinf_core import Worker  # noqa: E402
from rlinf_scheduler.runtime.cluster import Cluster  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import this module

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]


class Niceness(Worker):
    def niceness(self) -> int:
        return os.nice(0)


def test_embedded_ray_runs_workers_at_the_drivers_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ray renices its workers to 15 unless told otherwise; on a shared machine they would then
    # yield their CPU to any other process (a benchmark's peer, a colleague's job).
    for var in ("RAY_worker_niceness", "RAY_ADDRESS", "RLINF_NODE_RANK"):
        monkeypatch.delenv(var, raising=False)
    cluster = Cluster(1, ray_init={"num_cpus": 1})
    try:
        plan = cluster.plan(
            {"num_nodes": 1, "component_placement": {"probe": {"node_group": "node", "placement": "0"}}}
        )
        group = cluster.launch(plan["probe"], Niceness)
        try:
            assert group.niceness().wait(120) == [os.nice(0)]
        finally:
            group.shutdown()
    finally:
        cluster.shutdown()

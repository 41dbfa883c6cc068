"""The Ray runtime on a real, simulated three-node cluster (``ray.cluster_utils.Cluster``).

Nodes (GPUs are fake: Ray only counts them; nothing here touches a GPU):

- rank 0, the head: 2 "H100" GPUs;
- rank 1 on 127.0.0.2: 4 "A100" GPUs, started with CUDA_VISIBLE_DEVICES=4,5,6,7 and
  RLINF_COMM_NET_DEVICES=lo;
- rank 2 on 127.0.0.3: CPU only.

Each node's RLINF_NODE_RANK is in its raylet's environment, as `ray start` freezes it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray import cloudpickle  # noqa: E402
from ray.cluster_utils import Cluster as RayTestCluster  # noqa: E402

from rlinf_core import Worker  # noqa: E402
from rlinf_core.errors import PeerLost, SchedulerError, WaitTimeout  # noqa: E402
from rlinf_scheduler.runtime.cluster import Cluster, free_tcp_ports  # noqa: E402
from rlinf_scheduler.runtime.scheduler import RayScheduler  # noqa: E402
from rlinf_scheduler.runtime.worker_group import WorkerError  # noqa: E402

# The workers below are defined in this test module, which Ray's workers cannot import.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = [
    pytest.mark.slow,
    pytest.mark.network,
    pytest.mark.timeout(900),
    pytest.mark.xdist_group("loopback"),
]

MB = 1024 * 1024


def _node_args(**kw):
    ma, me, al, re_ = free_tcp_ports(4)
    args = dict(
        num_cpus=2,
        object_store_memory=80 * MB,
        include_dashboard=False,
        # named agent ports: the raylet then does not race its agents' port files
        metrics_agent_port=ma,
        metrics_export_port=me,
        dashboard_agent_listen_port=al,
        runtime_env_agent_port=re_,
    )
    args.update(kw)
    return args


def _add_node(c: RayTestCluster, **kw):
    """Add a node, retrying when its raylet gives up on a slow dashboard agent (a fixed 15 s window
    that a busy 2-core machine can miss)."""
    for attempt in range(3):
        try:
            return c.add_node(**_node_args(**kw))
        except Exception as err:
            if "timed out during startup" not in str(err) or attempt == 2:
                raise
            time.sleep(2)
    return None


@pytest.fixture(scope="module")
def ray_cluster():
    tmp = tempfile.mkdtemp(prefix="rlrt", dir="/tmp")
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_TMPDIR", tmp)  # our own ray_current_cluster, not the machine's
    mp.setenv("RLINF_STATE_DIR", os.path.join(tmp, "state"))
    # Keep Ray's default (token) auth: Ray caches the auth mode per process at first use, so a
    # module that switched it would break every Ray test that runs after it in the same process.
    mp.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    mp.delenv("RAY_ADDRESS", raising=False)
    mp.delenv("RLINF_NODE_RANK", raising=False)
    mp.delenv("RLINF_CODE_WORKING_DIR", raising=False)
    c = RayTestCluster(initialize_head=False)
    _add_node(c, num_gpus=2, resources={"accelerator_type:H100": 1}, env_vars={"RLINF_NODE_RANK": "0"})
    _add_node(
        c,
        node_ip_address="127.0.0.2",
        num_gpus=4,
        resources={"accelerator_type:A100": 1},
        env_vars={"RLINF_NODE_RANK": "1", "RLINF_COMM_NET_DEVICES": "lo", "CUDA_VISIBLE_DEVICES": "4,5,6,7"},
    )
    _add_node(c, node_ip_address="127.0.0.3", env_vars={"RLINF_NODE_RANK": "2"})
    c.wait_for_nodes()
    yield c
    c.shutdown()
    mp.undo()
    shutil.rmtree(tmp, ignore_errors=True)


CLUSTER = {
    "num_nodes": 3,
    "node_groups": [
        {
            "label": "gpu",
            "node_ranks": "0-1",
            "env_configs": [{"node_ranks": "0-1", "env_vars": {"RLINF_TEST_PLAN_VAR": "from-plan"}}],
        },
        {"label": "cpu", "node_ranks": 2},
    ],
    "component_placement": {
        "actor": {"node_group": "gpu", "placement": "0-1:0,2-5:1-2"},
        "env": {"node_group": "cpu", "placement": "0:0-1"},
    },
}

ENV_KEYS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RLINF_COMPONENT",
    "CUDA_VISIBLE_DEVICES",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "RLINF_TEST_PLAN_VAR",
    "RLINF_TEST_WRAPPED",
)


class Probe(Worker):
    def __init__(self, scale: int = 1) -> None:
        self.scale = scale

    def where(self) -> dict:
        import ray as _ray

        return {
            "env": {k: os.environ.get(k) for k in ENV_KEYS},
            "node_id": _ray.get_runtime_context().get_node_id(),
            "info": (self.info.component, self.info.rank, self.info.world_size, self.info.node_rank),
            "python": sys.executable,
        }

    def times(self, x: int) -> int:
        return x * self.scale * (self.rank + 1)

    async def atimes(self, x: int) -> int:
        await asyncio.sleep(0.01)
        return x * (self.rank + 1)

    def fail_on(self, rank: int) -> int:
        if self.rank == rank:
            raise ValueError(f"bad batch on rank {rank}")
        time.sleep(60)  # a peer stuck, e.g. in a collective, until the group is stopped
        return self.rank

    def cascade(self) -> None:
        if self.rank == 1:
            raise RuntimeError("the root cause")
        time.sleep(0.1)
        os._exit(3)  # a secondary death

    def lose_peer(self) -> int:
        if self.rank == 0:  # it found its peer gone (a collective's closed connection) first
            raise PeerLost("actor rank 1 is gone: rank 0 waited for it in a collective")
        if self.rank == 1:
            time.sleep(1.5)
            os._exit(3)  # the root cause: its process dies, a moment later
        time.sleep(60)
        return self.rank

    def slow(self, seconds: float) -> int:
        time.sleep(seconds if self.rank == 1 else 0)
        return self.rank

    def shipped(self) -> dict:
        import importlib.util

        import rlinf_core

        return {
            "file": rlinf_core.__file__,
            "marker": importlib.util.find_spec("rlinf_core._rlinf_shipped_marker") is not None,
        }


class TestOnOneConnection:
    """Tests sharing one driver connection."""

    @pytest.fixture(scope="class")
    @classmethod
    def cluster(cls, ray_cluster):
        c = Cluster(3, address=ray_cluster.address, timeout=120)
        yield c
        c.shutdown()

    def test_probe_reads_ranks_frozen_at_ray_start(self, cluster, ray_cluster):
        nodes = cluster.nodes
        assert [n.rank for n in nodes] == [0, 1, 2]
        assert [n.ip for n in nodes][1:] == ["127.0.0.2", "127.0.0.3"]
        assert nodes[0].is_head and nodes[0].gpus == 2 and nodes[0].gpu_model == "H100"
        assert (
            nodes[1].gpus == 4
            and nodes[1].gpu_model == "A100"
            and nodes[1].env["RLINF_COMM_NET_DEVICES"] == "lo"
        )
        assert nodes[2].gpus == 0 and nodes[2].accelerator is None
        assert all(n.python == sys.executable for n in nodes)
        assert nodes[2].versions["rlinf-scheduler"] == cluster.driver_versions["rlinf-scheduler"]
        inv = cluster.inventory()
        assert [inv.gpus(r) for r in range(3)] == [2, 4, 0]

    def test_missing_ranks_time_out_and_extra_nodes_warn(self, cluster):
        t = time.monotonic()
        with pytest.raises(WaitTimeout) as err:
            cluster.wait_for_nodes(5, timeout=2)
        assert time.monotonic() - t < 30
        assert "missing node ranks: 3-4" in str(err.value)
        try:
            nodes = cluster.wait_for_nodes(2)
            assert [n.rank for n in nodes] == [0, 1]
            assert any("ranks 2 (127.0.0.3) are not used" in w for w in cluster.warnings)
        finally:
            cluster.wait_for_nodes(3)

    def test_group_placement_env_and_rank_order(self, cluster):
        plan = cluster.plan(CLUSTER)
        group = cluster.launch(plan["actor"], Probe, scale=10)
        try:
            out = group.where().wait(120)
            nodes = cluster.nodes
            assert [o["node_id"] for o in out] == [nodes[0].node_id, nodes[1].node_id, nodes[1].node_id]
            assert [o["info"] for o in out] == [("actor", 0, 3, 0), ("actor", 1, 3, 1), ("actor", 2, 3, 1)]
            envs = [o["env"] for o in out]
            assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "4,5", "6,7"]
            assert [e["LOCAL_RANK"] for e in envs] == ["0", "0", "1"]
            assert [e["LOCAL_WORLD_SIZE"] for e in envs] == ["1", "2", "2"]
            assert {e["MASTER_ADDR"] for e in envs} == {nodes[0].ip}
            assert len({e["MASTER_PORT"] for e in envs}) == 1 and envs[0]["MASTER_PORT"].isdigit()
            assert [e["GLOO_SOCKET_IFNAME"] for e in envs] == [None, "lo", "lo"]
            assert [e["NCCL_SOCKET_IFNAME"] for e in envs] == [None, "lo", "lo"]
            assert {e["RLINF_TEST_PLAN_VAR"] for e in envs} == {"from-plan"}
            assert {e["RLINF_COMPONENT"] for e in envs} == {"actor"}
            assert group.times(2).wait(60) == [20, 40, 60]
            assert group.on([2, 0]).times(1).wait(60) == [10, 30]
            assert group.on(1).ranks == [1]

            async def both():
                return await group.atimes(3), await group.on(2).times(1)

            assert asyncio.run(both()) == ([3, 6, 9], [30])
            with pytest.raises(AttributeError, match="has no public method 'nope'"):
                group.nope()
            with pytest.raises(ValueError, match=r"ranks 0\.\.2; not 7"):
                group.on(7)
        finally:
            group.shutdown()

    def test_failure_reaches_driver_root_cause_first_and_stops_group(self, cluster):
        plan = cluster.plan(CLUSTER)
        group = cluster.launch(plan["actor"], Probe)
        t = time.monotonic()
        with pytest.raises(WorkerError) as err:
            group.fail_on(2).wait(120)
        assert time.monotonic() - t < 30  # not the 60 s of the stuck peers
        e = err.value
        text = str(e)
        assert text.startswith(
            f"component 'actor' rank 2 (pid {e.pid}) on node 1 (127.0.0.2) failed in fail_on(): ValueError"
        )
        assert isinstance(e.pid, int) and e.pid > 0
        assert "bad batch on rank 2" in e.remote_traceback and 'raise ValueError(f"bad batch' in text
        assert "stopped ranks 0, 1" in text
        assert (e.component, e.rank, e.node_rank, e.method) == ("actor", 2, 1, "fail_on")
        with pytest.raises(SchedulerError, match="was shut down"):
            group.times(1)

    def test_secondary_deaths_do_not_hide_the_root_cause(self, cluster):
        plan = cluster.plan(CLUSTER)
        group = cluster.launch(plan["actor"], Probe)

        async def run():
            return await group.cascade()

        with pytest.raises(WorkerError) as err:
            asyncio.run(run())
        assert err.value.rank == 1 and err.value.error_type == "RuntimeError"
        assert "the root cause" in str(err.value).splitlines()[0]
        assert "its process died" in str(err.value)

    def test_a_rank_that_lost_its_peer_does_not_hide_the_peer_s_death(self, cluster):
        """Rank 0 reports a lost peer (PeerLost) at once; rank 1, the peer, dies 1.5 s later: the
        error is rank 1's death, with rank 0's report after it."""
        plan = cluster.plan(CLUSTER)
        group = cluster.launch(plan["actor"], Probe)
        t = time.monotonic()
        with pytest.raises(WorkerError) as err:
            group.lose_peer().wait(120)
        assert time.monotonic() - t < 30
        e = err.value
        assert (e.rank, e.error_type) == (1, "WorkerDied"), str(e)
        assert str(e).startswith(f"component 'actor' rank 1 (pid {e.pid}) on node 1"), str(e)
        assert "rank 0 also failed (PeerLost)" in str(e)

    def test_call_timeout_names_late_ranks(self, cluster):
        plan = cluster.plan(CLUSTER)
        group = cluster.launch(plan["env"], Probe)
        try:
            with pytest.raises(WaitTimeout, match=r"slow\(\) did not finish within 1 s on ranks 1"):
                group.slow(5).wait(1)
            assert group.slow(0).wait(60) == [0, 1]
        finally:
            group.shutdown()

    def test_interpreter_is_checked_then_used(self, cluster, tmp_path):
        bad = {
            **CLUSTER,
            "node_groups": [
                CLUSTER["node_groups"][0],
                {
                    "label": "cpu",
                    "node_ranks": 2,
                    "env_configs": [{"node_ranks": 2, "python_interpreter_path": "/nonexistent/bin/python3"}],
                },
            ],
        }
        with pytest.raises(SchedulerError) as err:
            cluster.launch(cluster.plan(bad)["env"], Probe)
        assert "python_interpreter_path /nonexistent/bin/python3 does not exist on node 2 (127.0.0.3)" in str(
            err.value
        )
        assert "node group 'cpu'" in str(err.value)

        wrapper = tmp_path / "python-wrapped"
        wrapper.write_text(f'#!/bin/sh\nexport RLINF_TEST_WRAPPED=yes\nexec "{sys.executable}" "$@"\n')
        wrapper.chmod(0o755)
        good = {
            **bad,
            "node_groups": [
                CLUSTER["node_groups"][0],
                {
                    "label": "cpu",
                    "node_ranks": 2,
                    "env_configs": [{"node_ranks": 2, "python_interpreter_path": str(wrapper)}],
                },
            ],
        }
        group = cluster.launch(cluster.plan(good)["env"], Probe)
        try:
            assert [o["env"]["RLINF_TEST_WRAPPED"] for o in group.where().wait(120)] == ["yes", "yes"]
        finally:
            group.shutdown()

    def test_version_mismatch_fails_fast_naming_node_package_versions(self, cluster, tmp_path):
        # A node group whose environment has another rlinf-core release first on sys.path.
        dist = tmp_path / "site" / "rlinf_core-9.9.9.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlinf-core\nVersion: 9.9.9\n")
        config = {
            **CLUSTER,
            "node_groups": [
                CLUSTER["node_groups"][0],
                {
                    "label": "cpu",
                    "node_ranks": 2,
                    "env_configs": [{"node_ranks": 2, "env_vars": {"PYTHONPATH": str(tmp_path / "site")}}],
                },
            ],
        }
        with pytest.raises(WorkerError) as err:
            cluster.launch(cluster.plan(config)["env"], Probe)
        text = str(err.value)
        assert "failed in __init__(): VersionMismatch" in text
        assert (
            "node 2 (127.0.0.3): rlinf-core is 9.9.9, the driver has " + cluster.driver_versions["rlinf-core"]
            in text
        )

    def test_ray_scheduler_plugin(self, cluster, ray_cluster):
        sched = RayScheduler(address=ray_cluster.address)
        sched.start({"cluster": CLUSTER}, timeout=60)
        try:
            assert sched.plan is not None and sched.plan["env"].world_size == 2
            group = sched.launch("env", Probe, 5)
            assert group.times(1).wait(60) == [5, 10]
            ch = sched.channel("rlinf-runtime-test", node_rank=2)
            ch.put({"step": 1})
            assert ch.get(timeout=60) == {"step": 1}
        finally:
            sched.shutdown()


def test_node_without_rank_among_ranked_nodes_is_refused(ray_cluster):
    extra = _add_node(ray_cluster, node_ip_address="127.0.0.4")
    try:
        ray_cluster.wait_for_nodes()
        with pytest.raises(SchedulerError) as err:
            Cluster(3, address=ray_cluster.address, timeout=30)
        assert "either every node sets RLINF_NODE_RANK or none does: nodes 127.0.0.4 have no rank" in str(
            err.value
        )
        assert not ray.is_initialized()  # the failed Cluster disconnected
    finally:
        ray_cluster.remove_node(extra)


def test_code_sync_ships_the_driver_code_to_another_node(ray_cluster, tmp_path):
    import rlinf_core

    shipped = tmp_path / "ship" / "rlinf_core"
    shutil.copytree(Path(rlinf_core.__file__).parent, shipped, ignore=shutil.ignore_patterns("__pycache__"))
    (shipped / "_rlinf_shipped_marker.py").write_text("SHIPPED = True\n")
    with Cluster(3, address=ray_cluster.address, code_sync=str(shipped), timeout=120) as c:
        assert c.code_sync is not None and c.code_sync.names == ["rlinf_core"]
        group = c.launch(c.plan(CLUSTER)["env"], Probe)
        out = group.on(0).shipped().wait(180)[0]
        assert out["marker"] is True
        assert not out["file"].startswith(str(Path(rlinf_core.__file__).parent))  # not the installed copy

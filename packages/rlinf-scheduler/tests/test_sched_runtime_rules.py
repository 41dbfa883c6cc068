"""Rules of the Ray runtime that need no Ray: node ranks, code sync, versions, per-process
environments, `ray start` command lines, the plugin staying Ray-free."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlinf_core.errors import ConfigError, SchedulerError
from rlinf_scheduler.placement import plan_placement
from rlinf_scheduler.runtime.cluster import (
    NodeInfo,
    check_node_ranks,
    cluster_problems,
    cluster_timeout,
    parse_node_rank,
)
from rlinf_scheduler.runtime.code_sync import resolve_code_sync
from rlinf_scheduler.runtime.node import NodeStartOptions, build_ray_start, session_pids, stop_nodes
from rlinf_scheduler.runtime.versions import VersionMismatch, check_versions, version_problems
from rlinf_scheduler.runtime.worker_group import process_env

pytestmark = pytest.mark.xdist_group("loopback")  # fixed loopback addresses: see conftest.py


def node(ip: str, rank: str | None = None, **kw) -> NodeInfo:
    return NodeInfo(node_id=f"id-{ip}", ip=ip, raw_rank=rank, **kw)


# -- node ranks ----------------------------------------------------------------------------------
def test_parse_node_rank():
    assert parse_node_rank("3") == (3, None)
    assert parse_node_rank(" 0 ") == (0, None)
    assert parse_node_rank(None) == (None, None)
    assert parse_node_rank("") == (None, None)
    assert parse_node_rank("x")[1] == "RLINF_NODE_RANK='x' is not a whole number"
    assert "negative" in parse_node_rank("-1")[1]


def test_single_node_without_rank_is_rank_zero():
    check = check_node_ranks([node("10.0.0.9")], 1)
    assert check.ok and check.by_rank[0].ip == "10.0.0.9" and check.by_rank[0].rank == 0


def test_ranks_order_nodes_never_ip():
    # IP order is the reverse of rank order: ranks decide.
    nodes = [node("10.0.0.1", "2"), node("10.0.0.2", "1"), node("10.0.0.3", "0")]
    check = check_node_ranks(nodes, 3)
    assert check.ok
    assert [check.by_rank[r].ip for r in range(3)] == ["10.0.0.3", "10.0.0.2", "10.0.0.1"]


def test_multi_node_without_ranks_is_an_error():
    check = check_node_ranks([node("10.0.0.1"), node("10.0.0.2")], 2)
    assert len(check.problems) == 1
    assert "none sets RLINF_NODE_RANK" in check.problems[0]
    assert "rlinf node start --rank R" in check.problems[0]


def test_mixed_ranks_are_an_error():
    check = check_node_ranks([node("10.0.0.1", "0"), node("10.0.0.2")], 2)
    assert "either every node sets RLINF_NODE_RANK or none does" in check.problems[0]
    assert "10.0.0.2 have no rank" in check.problems[0]


def test_duplicate_and_invalid_ranks():
    check = check_node_ranks([node("10.0.0.1", "0"), node("10.0.0.2", "0"), node("10.0.0.3", "one")], 3)
    text = "\n".join(check.problems)
    assert "node rank 0 is set on 2 nodes (10.0.0.1, 10.0.0.2)" in text
    assert "10.0.0.3: RLINF_NODE_RANK='one' is not a whole number" in text


def test_missing_ranks_are_waited_for():
    check = check_node_ranks([node("10.0.0.1", "0"), node("10.0.0.3", "2")], 4)
    assert not check.problems and check.missing == [1, 3]


def test_more_nodes_than_num_nodes_warns():
    check = check_node_ranks([node(f"10.0.0.{i}", str(i)) for i in range(3)], 2)
    assert check.ok and sorted(check.by_rank) == [0, 1]
    assert "ranks 2 (10.0.0.2) are not used" in check.warnings[0]


def test_gap_without_num_nodes_is_a_problem():
    check = check_node_ranks([node("10.0.0.1", "0"), node("10.0.0.2", "5")], None)
    assert "must cover 0..1" in check.problems[0]


def test_dead_nodes_are_ignored_for_ranks():
    check = check_node_ranks([node("10.0.0.1", "0"), node("10.0.0.2", "0", alive=False)], 1)
    assert check.ok


def test_cluster_problems_flags_versions_and_python():
    nodes = [
        node("10.0.0.1", "0", python="/usr/bin/python3", versions={"ray": "2.60.0", "rlinf-core": "0.1.0"}),
        node("10.0.0.2", "1", python="/opt/py/bin/python", versions={"ray": "2.59.0", "rlinf-core": "0.1.0"}),
    ]
    problems = cluster_problems(nodes, 3)
    text = "\n".join(problems)
    assert "missing node ranks 2" in text
    assert "ray versions differ across nodes: 2.60.0 on node 0; 2.59.0 on node 1" in text
    assert "the Python interpreter differs across nodes" in text
    assert "rlinf-core versions differ" not in text


def test_cluster_timeout_env(monkeypatch):
    monkeypatch.delenv("RLINF_CLUSTER_TIMEOUT", raising=False)
    assert cluster_timeout() == 300.0
    monkeypatch.setenv("RLINF_CLUSTER_TIMEOUT", "2.5")
    assert cluster_timeout() == 2.5
    assert cluster_timeout(7) == 7.0
    monkeypatch.setenv("RLINF_CLUSTER_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match=r"RLINF_CLUSTER_TIMEOUT='soon' must be a number"):
        cluster_timeout()


# -- code sync -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["", "0", "false", "No", "OFF"])
def test_code_sync_off(value):
    assert resolve_code_sync(value, env={}) is None
    assert resolve_code_sync(None, env={"RLINF_CODE_WORKING_DIR": value}) is None


def test_code_sync_relative_and_missing(tmp_path):
    with pytest.raises(ConfigError, match="is a relative path"):
        resolve_code_sync("src/rlinf", env={})
    with pytest.raises(ConfigError, match="no such directory"):
        resolve_code_sync(str(tmp_path / "nope"), env={})
    with pytest.raises(ConfigError, match="holds no rlinf package"):
        resolve_code_sync(str(tmp_path), env={})


def _package(root: Path, name: str) -> Path:
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "big.pyc").write_bytes(b"0" * 2_000_000)  # never shipped nor counted
    return pkg


def test_code_sync_workspace_member_and_package(tmp_path):
    a = _package(tmp_path / "ws" / "packages" / "rlinf-a" / "src", "rlinf_a")
    b = _package(tmp_path / "ws" / "packages" / "rlinf-b" / "src", "rlinf_b")
    sync = resolve_code_sync(str(tmp_path / "ws"), env={})
    assert sync.names == ["rlinf_a", "rlinf_b"]
    assert sync.runtime_env()["py_modules"] == [str(a), str(b)]
    assert "__pycache__" in sync.runtime_env()["excludes"]
    assert resolve_code_sync(str(a), env={}).names == ["rlinf_a"]
    assert resolve_code_sync(str(tmp_path / "ws" / "packages" / "rlinf-b"), env={}).names == ["rlinf_b"]


def test_code_sync_size_limit_names_largest_files(tmp_path):
    pkg = _package(tmp_path, "rlinf_big")
    (pkg / "checkpoint.pt").write_bytes(b"0" * 1_500_000)
    (pkg / "log.txt").write_bytes(b"0" * 600_000)
    with pytest.raises(ConfigError) as err:
        resolve_code_sync(str(pkg), env={"RLINF_CODE_SYNC_MAX_MB": "1"})
    text = str(err.value)
    assert "over the 1 MB code-sync limit" in text
    assert text.index("checkpoint.pt (1.5 MB)") < text.index("log.txt (0.6 MB)")
    assert resolve_code_sync(str(pkg), env={"RLINF_CODE_SYNC_MAX_MB": "5"}).names == ["rlinf_big"]
    with pytest.raises(ConfigError, match="RLINF_CODE_SYNC_MAX_MB='-2' must be a positive number"):
        resolve_code_sync(str(pkg), env={"RLINF_CODE_SYNC_MAX_MB": "-2"})


def test_code_sync_auto_finds_workspace_packages():
    sync = resolve_code_sync("auto", env={})
    assert {"rlinf_core", "rlinf_scheduler"} <= set(sync.names)
    core = next(p for p in sync.packages if p.name == "rlinf_core")
    assert (core.path / "worker.py").is_file()


# -- versions ------------------------------------------------------------------------------------
def test_version_problems_and_check():
    problems = version_problems(
        {"ray": "2.60.0", "rlinf-core": "0.1.0", "rlinf-x": "1.0"},
        {"ray": "9", "rlinf-core": "0.2.0"},
        where="node 2 (10.0.0.3)",
    )
    assert problems == [
        "node 2 (10.0.0.3): rlinf-core is 0.2.0, the driver has 0.1.0",
        "node 2 (10.0.0.3): rlinf-x is not installed, the driver has 1.0",
    ]
    with pytest.raises(
        VersionMismatch, match=r"node 1 \(h\): rlinf-core is .*, the driver has 0\.0\.0-other"
    ):
        check_versions({"rlinf-core": "0.0.0-other"}, where="node 1 (h)")


# -- per-process environment ---------------------------------------------------------------------
CONFIG = {
    "num_nodes": 2,
    "node_groups": [
        {
            "label": "gpu",
            "node_ranks": "0-1",
            "env_configs": [{"node_ranks": 1, "env_vars": [{"MY_VAR": "x"}, {"GLOO_SOCKET_IFNAME": "eth9"}]}],
        }
    ],
    "component_placement": {"actor": {"node_group": "gpu", "placement": "0-1:0,2-5:1-2"}},
}


def test_process_env_identity_visibility_and_net_devices():
    plan = plan_placement(CONFIG, {"nodes": [{"node_ranks": 0, "gpus": 2}, {"node_ranks": 1, "gpus": 4}]})
    procs = plan["actor"].processes
    n0 = NodeInfo("a", "10.0.0.1", rank=0, gpus=2, accelerator="GPU")
    n1 = NodeInfo(
        "b",
        "10.0.0.2",
        rank=1,
        gpus=4,
        accelerator="GPU",
        env={"CUDA_VISIBLE_DEVICES": "4,5,6,7", "RLINF_COMM_NET_DEVICES": "ib0"},
    )
    env0 = process_env(
        procs[0],
        world_size=3,
        local_rank=0,
        local_world_size=1,
        node=n0,
        master_addr="10.0.0.1",
        master_port=29500,
    )
    assert env0["RANK"] == "0" and env0["WORLD_SIZE"] == "3" and env0["NODE_RANK"] == "0"
    assert env0["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env0["MASTER_ADDR"] == "10.0.0.1" and env0["MASTER_PORT"] == "29500"
    assert env0["RLINF_COMPONENT"] == "actor"
    assert "GLOO_SOCKET_IFNAME" not in env0 and "MY_VAR" not in env0
    env2 = process_env(
        procs[2],
        world_size=3,
        local_rank=1,
        local_world_size=2,
        node=n1,
        master_addr="10.0.0.1",
        master_port=1,
    )
    # node 1 was started with CUDA_VISIBLE_DEVICES=4,5,6,7: its local GPUs 2,3 are physical 6,7
    assert env2["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert env2["LOCAL_RANK"] == "1" and env2["LOCAL_WORLD_SIZE"] == "2"
    assert env2["MY_VAR"] == "x"
    assert env2["GLOO_SOCKET_IFNAME"] == "eth9"  # set by the plan: kept
    assert env2["NCCL_SOCKET_IFNAME"] == "ib0"  # unset: from RLINF_COMM_NET_DEVICES
    amd = NodeInfo("c", "10.0.0.3", rank=0, gpus=2, accelerator="GPU", gpu_model="AMD-Instinct-MI300X")
    env_amd = process_env(
        procs[0], world_size=1, local_rank=0, local_world_size=1, node=amd, master_addr="x", master_port=1
    )
    assert env_amd["HIP_VISIBLE_DEVICES"] == "0,1"


# -- rlinf node start ----------------------------------------------------------------------------
def test_ray_start_command_carries_rank_in_env_and_no_secret(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    token = tmp_path / "tok"
    head = NodeStartOptions(rank=0, head=True, port=6390, node_ip="127.0.0.2", token_file=str(token))
    cmd, env, ip, address = build_ray_start(head)
    assert token.is_file() and (token.stat().st_mode & 0o777) == 0o600  # the head creates it
    secret = token.read_text()
    assert env["RLINF_NODE_RANK"] == "0" and env["RAY_AUTH_MODE"] == "token"
    assert env["RAY_AUTH_TOKEN_PATH"] == str(token)
    assert env["RAY_worker_niceness"] == "0"  # Ray's default 15 would yield every CPU to other work
    assert "--head" in cmd and "--port=6390" in cmd and "--node-ip-address=127.0.0.2" in cmd
    assert address == "127.0.0.2:6390" and ip == "127.0.0.2"
    assert not any(secret in part for part in cmd)
    worker = NodeStartOptions(
        rank=1, address="127.0.0.2:6390", node_ip="127.0.0.3", net_device="lo", token_file=str(token)
    )
    cmd, env, ip, _ = build_ray_start(worker)
    assert ip == "127.0.0.3" and env["RLINF_COMM_NET_DEVICES"] == "lo" and env["RLINF_NODE_RANK"] == "1"
    # lo's own 127.0.0.1 would be swapped for the external address by `ray start` on a joining node
    with pytest.raises(
        ConfigError, match=r"^--net-device: a joining node cannot use 127\.0\.0\.1 \(the address of lo\)"
    ):
        build_ray_start(NodeStartOptions(rank=1, address="127.0.0.2:6390", net_device="lo", auth="disabled"))
    missing = NodeStartOptions(rank=1, address="127.0.0.2:6390", token_file=str(tmp_path / "none"))
    with pytest.raises(ConfigError, match="copy the head's token file"):
        build_ray_start(missing)
    with pytest.raises(ConfigError, match="--address must be HOST:PORT"):
        build_ray_start(NodeStartOptions(rank=1, address="nohost", auth="disabled"))


RESPAWNER = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:  # a parent that keeps starting children, as a raylet restarts its workers
    subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
    time.sleep(0.01)
"""


def test_stop_nodes_leaves_no_process_of_a_session_that_ignores_sigterm_and_forks(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", RESPAWNER], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        record = {
            "rank": 0, "head": True, "node_ip": "127.0.0.9", "address": "127.0.0.9:1", "sid": proc.pid,
            "pids": [proc.pid], "auth_mode": "disabled", "token_path": None, "temp_dir": None,
            "log_path": str(tmp_path / "node.log"), "started_at": time.time(),
        }  # fmt: skip
        (tmp_path / f"node-127.0.0.9-{proc.pid}.json").write_text(json.dumps(record))
        ((rec, signalled),) = stop_nodes(directory=tmp_path, grace=0.3)
        assert rec.sid == proc.pid and proc.pid in signalled
        assert session_pids(proc.pid) == []
        assert list(tmp_path.glob("node-*.json")) == []
    finally:
        for pid in session_pids(proc.pid):
            os.kill(pid, 9)
        proc.wait(timeout=10)


def test_session_pids_sees_a_new_session():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert session_pids(proc.pid) == [proc.pid]
        assert os.getpid() not in session_pids(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_plugin_and_runtime_package_import_without_ray():
    code = (
        "import sys, json, rlinf_scheduler.plugin as p, rlinf_scheduler.runtime, rlinf_scheduler.cli;"
        "classes = p.rlinf_register_schedulers();"
        "print(json.dumps([[c.PLUGIN_NAME for c in classes], 'ray' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    names, ray_loaded = json.loads(out.stdout)
    assert names == ["ray"] and ray_loaded is False


def test_scheduler_requires_start():
    from rlinf_scheduler.runtime.scheduler import RayScheduler, cluster_section

    with pytest.raises(SchedulerError, match="not started"):
        RayScheduler().launch("actor", object)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no `cluster` section"):
        cluster_section({"runner": {}})
    assert cluster_section({"cluster": {"num_nodes": 1}}) == {"num_nodes": 1}

"""`rlinf node start|stop` and `rlinf cluster wait|status|doctor` as a user runs them: a head on
127.0.0.2 and a worker on 127.0.0.3 (distinct ports and temp dirs), token authentication on, a
2-rank worker group across the two nodes, then the test stops its own Ray processes by PID."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("ray")

from rlinf_scheduler.runtime.cluster import free_tcp_ports
from rlinf_scheduler.runtime.node import load_records, session_pids, stop_nodes

pytestmark = [
    pytest.mark.network,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.xdist_group("loopback"),
]

DRIVER = textwrap.dedent(
    """
    import json, os, socket
    from rlinf_core import Worker
    from rlinf_scheduler.runtime.scheduler import RayScheduler

    class Where(Worker):
        def where(self):
            import ray
            return [self.info.node_rank, os.environ.get("RLINF_NODE_RANK"), ray.util.get_node_ip_address()]

    config = {"cluster": {"num_nodes": 2, "component_placement": {"probe": {"node_group": "node", "placement": "0-1"}}}}
    with RayScheduler() as sched:
        sched.start(config, timeout=120)
        group = sched.launch("probe", Where)
        print("RESULT " + json.dumps(group.where().wait(180)))
    """
)


def _ports_args(head: bool) -> list[str]:
    ports = free_tcp_ports(6)
    args = [
        f"--dashboard-agent-listen-port={ports[0]}",
        f"--dashboard-agent-grpc-port={ports[1]}",
        f"--metrics-export-port={ports[2]}",
        f"--runtime-env-agent-port={ports[3]}",
        "--object-store-memory=80000000",
        "--include-dashboard=false" if head else "",
    ]
    if head:
        args += [f"--ray-client-server-port={ports[4]}", f"--dashboard-port={ports[5]}"]
    return [a for a in args if a]


def test_node_start_status_wait_group_and_stop():
    base = Path(tempfile.mkdtemp(prefix="rlnc", dir="/tmp"))
    state = base / "state"
    token = base / "auth" / "token"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RLINF_"))}
    env.update(RLINF_STATE_DIR=str(state), RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", PYTHONUNBUFFERED="1")
    outputs: list[str] = []

    def rlinf(*args: str, check: bool = True, extra_env: dict | None = None, timeout: float = 400):
        proc = subprocess.run(
            [sys.executable, "-m", "rlinf_core", *args],
            env={**env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        outputs.append(proc.stdout + proc.stderr)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"rlinf {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def start(*args: str, head: bool) -> dict:
        for attempt in range(3):  # a busy machine can make a raylet give up on its agents
            proc = rlinf("node", "start", *args, "--json", "--", *_ports_args(head), check=False)
            if proc.returncode == 0:
                return json.loads(proc.stdout)
            assert "ray start` failed" in proc.stderr or "did not finish" in proc.stderr, proc.stderr
            if attempt == 2:
                raise AssertionError(proc.stderr)
        raise AssertionError("unreachable")

    (port,) = free_tcp_ports(1, "127.0.0.2")
    address = f"127.0.0.2:{port}"
    try:
        head = start(
            "--rank", "0", "--head", "--port", str(port), "--node-ip", "127.0.0.2", "--num-cpus", "1",
            "--num-gpus", "1", "--temp-dir", str(base / "h"), "--token-file", str(token), head=True,
        )  # fmt: skip
        assert head["auth_mode"] == "token" and head["token_path"] == str(token) and token.is_file()
        secret = token.read_text().strip()
        worker = start(
            "--rank", "1", "--address", address, "--node-ip", "127.0.0.3", "--num-cpus", "1",
            "--temp-dir", str(base / "w"), "--token-file", str(token), head=False,
        )  # fmt: skip
        assert {r.node_ip for r in load_records(state)} == {"127.0.0.2", "127.0.0.3"}
        for rec in (head, worker):
            pids = session_pids(rec["sid"])
            assert pids, f"no Ray process left in session {rec['sid']}"
            for pid in pids:  # the token is never on a command line
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                assert secret not in cmdline

        rlinf("cluster", "wait", "--nodes", "2", "--timeout", "180", "--address", address)
        late = rlinf(
            "cluster",
            "wait",
            "--nodes",
            "3",
            "--gpus",
            "2",
            "--timeout",
            "2",
            "--address",
            address,
            check=False,
        )
        assert late.returncode == 1
        assert "missing 1 more node(s) (alive 2 of 3) and 1 more GPU(s) (alive 1 of 2)" in late.stderr

        status = json.loads(rlinf("cluster", "status", "--json", "--address", address).stdout)
        nodes = status["nodes"]
        assert [(n["rank"], n["ip"], n["alive"], n["gpus"]) for n in nodes] == [
            (0, "127.0.0.2", True, 1),
            (1, "127.0.0.3", True, 0),
        ]
        assert all(n["python"] == sys.executable and n["versions"]["ray"] for n in nodes)
        assert status["problems"] == []

        doctor = rlinf("cluster", "doctor", "--address", address, "--nodes", "3", check=False)
        assert doctor.returncode == 1
        assert "head is bound to the loopback address 127.0.0.2" in doctor.stdout
        assert "fewer nodes than cluster.num_nodes (2 < 3)" in doctor.stdout

        # a driver on the head's machine attaches through RAY_ADDRESS; the auth settings come from
        # the node records (RAY_AUTH_MODE is not set in its environment)
        script = base / "driver.py"
        script.write_text(DRIVER)
        proc = subprocess.run(
            [sys.executable, str(script)],
            env={**env, "RAY_ADDRESS": address},
            capture_output=True,
            text=True,
            timeout=400,
        )
        outputs.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
        assert json.loads(line[len("RESULT ") :]) == [[0, "0", "127.0.0.2"], [1, "1", "127.0.0.3"]]

        stopped = rlinf("node", "stop", "--grace", "10")
        assert "stopped rank 0 (127.0.0.2" in stopped.stdout and "stopped rank 1 (127.0.0.3" in stopped.stdout
        assert session_pids(head["sid"]) == [] and session_pids(worker["sid"]) == []
        assert load_records(state) == []
        assert all(secret not in out for out in outputs)
    finally:
        stop_nodes(directory=state, grace=5)
        shutil.rmtree(base, ignore_errors=True)

"""A head started with ``rlinf node start`` on 127.0.0.1 as a user runs it, then broken the way the
issue found it: a world-readable token file, a driver with ``RAY_AUTH_MODE=disabled``, and a GCS
killed while the head's raylet and agents live on. The test stops its own Ray processes by PID."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from rlinf_scheduler.runtime.cluster import free_tcp_ports
from rlinf_scheduler.runtime.node import session_pids, stop_nodes

pytestmark = [
    pytest.mark.network,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("loopback"),
]

# What `rlinf train` does without RAY_ADDRESS: a RayScheduler for a one-node cluster section.
DRIVER = textwrap.dedent(
    """
    import json, os, stat, subprocess
    from pathlib import Path
    import psutil
    from rlinf_scheduler.runtime.scheduler import RayScheduler

    config = {"cluster": {"num_nodes": 1, "component_placement": {"probe": {"node_group": "node", "placement": "0"}}}}
    with RayScheduler(ray_init={"num_cpus": 1}) as sched:
        sched.start(config, timeout=120)
        me = psutil.Process()
        pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
        out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
        listen = sorted({l.split()[3].rsplit(":", 1)[0] for l in out.splitlines() if any(f"pid={p}," in l for p in pids)})
        token = Path.home() / ".ray" / "auth_token"
        print("RESULT " + json.dumps({
            "mode": sched.cluster.mode, "address": sched.cluster.address, "listen": listen,
            "token_mode": oct(stat.S_IMODE(token.stat().st_mode)),
        }))
    """
)


def _ports_args() -> list[str]:
    ports = free_tcp_ports(6)
    return [
        f"--dashboard-agent-listen-port={ports[0]}",
        f"--dashboard-agent-grpc-port={ports[1]}",
        f"--metrics-export-port={ports[2]}",
        f"--runtime-env-agent-port={ports[3]}",
        f"--ray-client-server-port={ports[4]}",
        f"--dashboard-port={ports[5]}",
        "--object-store-memory=80000000",
        "--include-dashboard=false",
    ]


def _listening(pids: list[int]) -> set[str]:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {
        line.split()[3].rsplit(":", 1)[0]
        for line in out.splitlines()
        if any(f"pid={p}," in line for p in pids)
    }


def _is_loopback(host: str) -> bool:
    return host.removeprefix("[::ffff:").rstrip("]").startswith("127.")


def test_token_mode_auth_refusal_and_a_head_that_lost_its_gcs():
    base = Path(tempfile.mkdtemp(prefix="rlst", dir="/tmp"))
    state = base / "state"
    token = base / "auth" / "token"
    token.parent.mkdir()
    token.write_text(os.urandom(16).hex())
    token.chmod(0o644)  # as Ray leaves ~/.ray/auth_token
    secret = token.read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RLINF_"))}
    env.update(
        RLINF_STATE_DIR=str(state),
        RAY_TMPDIR=str(base / "raytmp"),  # no other Ray on this machine is found by address files
        HOME=str(base / "home"),  # the embedded Ray's token goes to this ~/.ray/auth_token
        RAY_ENABLE_UV_RUN_RUNTIME_ENV="0",
        PYTHONUNBUFFERED="1",
    )
    outputs: list[str] = []

    def run(*cmd: str, extra_env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            list(cmd), env={**env, **(extra_env or {})}, capture_output=True, text=True, timeout=timeout
        )
        outputs.append(proc.stdout + proc.stderr)
        return proc

    def rlinf(*args: str, **kw) -> subprocess.CompletedProcess:
        return run(sys.executable, "-m", "rlinf_core", *args, **kw)

    (port,) = free_tcp_ports(1)
    address = f"127.0.0.1:{port}"
    try:
        for attempt in range(3):  # a busy machine can make a raylet give up on its agents
            started = rlinf(
                "node", "start", "--rank", "0", "--head", "--port", str(port), "--node-ip", "127.0.0.1",
                "--num-cpus", "1", "--temp-dir", str(base / "h"), "--token-file", str(token), "--json",
                "--", *_ports_args(),
            )  # fmt: skip
            if started.returncode == 0:
                break
            assert "ray start` failed" in started.stderr or "did not finish" in started.stderr, started.stderr
            assert attempt < 2, started.stderr
        head = json.loads(started.stdout)
        # 1. the reused token file was made private, and said so in one line
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        assert f"the Ray auth token file {token} was open to other users (mode 0644); set it to 0600" in (
            started.stderr
        )
        # 2. a head asked for 127.0.0.1 serves loopback only (`ray start` alone swaps in the external
        # address and listens on every interface)
        assert (head["node_ip"], head["address"]) == ("127.0.0.1", address)
        pids = session_pids(head["sid"])
        listen = _listening(pids)
        assert listen and all(_is_loopback(h) for h in listen), listen

        # 4. a refusal of credentials is final: one line at once, no C++ log lines, not 120 s of retries
        t0 = time.monotonic()
        refused = rlinf(
            "cluster", "wait", "--nodes", "1", "--timeout", "120", "--address", address,
            extra_env={"RAY_AUTH_MODE": "disabled"},
        )  # fmt: skip
        took = time.monotonic() - t0
        assert refused.returncode == 1, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert f"the Ray head at {address} refused this process" in lines[0]
        assert "RAY_AUTH_MODE is 'disabled' here" in lines[0]
        assert took < 60, took
        ok = rlinf("cluster", "wait", "--nodes", "1", "--timeout", "120", "--address", address)
        assert ok.returncode == 0, ok.stderr  # the record's auth settings are adopted

        # 3. the GCS dies (a crash, an OOM kill); the raylet and the agents live on
        gcs = [p for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "gcs_server"]
        assert len(gcs) == 1, pids
        os.kill(gcs[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) != 0:
                    break
            time.sleep(0.2)
        assert session_pids(head["sid"]), "the head's other processes should still run"

        listed = rlinf("node", "list")
        assert listed.returncode == 0, listed.stderr
        assert f"rank 0 head 127.0.0.1 -> {address}: STALE (its head does not answer" in listed.stdout
        assert "clear it with `rlinf node stop --node-ip 127.0.0.1`" in listed.stdout

        status = rlinf("cluster", "status")
        assert status.returncode == 1
        assert "stale node record of 127.0.0.1" in status.stderr
        assert "rlinf cluster status" not in status.stdout + status.stderr

        # `rlinf train` without RAY_ADDRESS: an embedded Ray on loopback, saying why in one line
        script = base / "driver.py"
        script.write_text(DRIVER)
        driver = run(sys.executable, str(script))
        assert driver.returncode == 0, driver.stderr[-3000:]
        line = next(x for x in driver.stdout.splitlines() if x.startswith("RESULT "))
        got = json.loads(line[len("RESULT ") :])
        assert got["mode"] == "embedded" and got["address"].startswith("127.0.0.1:")
        assert got["address"] != address
        assert got["listen"] and all(_is_loopback(h) for h in got["listen"]), got["listen"]
        assert got["token_mode"] == "0o600"  # Ray would have written it 0644
        why = [x for x in driver.stderr.splitlines() if "stale node record" in x]
        assert why == [
            f"ignoring the stale node record of 127.0.0.1 (its head {address} does not answer; clear it with "
            "`rlinf node stop --node-ip 127.0.0.1`): starting an embedded Ray for this run"
        ], driver.stderr[-3000:]

        stopped = rlinf("node", "stop", "--node-ip", "127.0.0.1", "--grace", "5")
        assert "stopped rank 0 (127.0.0.1" in stopped.stdout, stopped.stderr
        assert session_pids(head["sid"]) == []
        assert "no node started by `rlinf node start` is recorded" in rlinf("node", "list").stdout
        assert all(secret not in out for out in outputs)
    finally:
        stop_nodes(directory=state, grace=5)
        shutil.rmtree(base, ignore_errors=True)

"""The cloud-edge recipe of the EasyTier guide, end to end on one machine with real components.

Four network namespaces that the test creates (and always removes) are joined by veth pairs on a
bridge: ``b`` (the public bootstrap), ``h`` (the cloud head) and ``w`` (an edge worker), all in
one underlay subnet, plus the hub holding the bridge. Then, as a user would:

1. ``rlinf net up --detach`` runs a bootstrap in ``b`` and TUN nodes (device ``et0``) in ``h``
   and ``w`` with fixed overlay addresses, private mode and a shared secret;
2. ``rlinf node start --head --network easytier`` in ``h`` and
   ``rlinf node start --address <head overlay ip>:PORT --network easytier`` in ``w`` bind Ray to
   the overlay addresses (``RLINF_COMM_NET_DEVICES=et0``), token authentication on;
3. ``rlinf cluster wait --nodes 2`` and ``rlinf cluster status --json`` (a driver in ``h``) see
   both nodes on their overlay addresses, carried by ``et0`` of the easytier overlay;
4. everything is stopped by PID (``rlinf node stop``, ``rlinf net down``; never ``ray stop``).

Skipped, with the reason, where network namespaces cannot be created (not root). It needs both
rlinf-scheduler and rlinf-net-easytier, hence its place among the cross-package tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("rlinf_net_easytier")
pytest.importorskip("rlinf_scheduler")

pytestmark = [pytest.mark.network, pytest.mark.timeout(900), pytest.mark.xdist_group("loopback")]

RLINF = str(Path(sys.executable).with_name("rlinf"))


# -- a small namespace lab (the same shape as rlinf-net-easytier's test fixture) -----------------
def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def netns_unavailable_reason() -> str | None:
    """Why this process cannot build network namespaces with TUN devices (``None``: it can)."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    if not Path("/dev/net/tun").exists():
        return "/dev/net/tun is missing, so TUN devices cannot be created"
    probe = f"rlinfe2e-{os.getpid()}-probe"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as err:
        return f"`ip netns add` is not permitted here: {err.stderr.strip()}"
    try:
        _ip("-n", probe, "link", "add", "br0", "type", "bridge")
        _ip("-n", probe, "link", "add", "va", "type", "veth", "peer", "name", "vb")
    except subprocess.CalledProcessError as err:
        return f"bridge/veth devices cannot be created here: {err.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


@dataclass
class Lab:
    """Namespaces ``<prefix>-<node>``, each with ``eth0`` = 192.168.<subnet>.<i>/24 on one bridge
    in ``<prefix>-hub``."""

    prefix: str
    subnet: int
    nodes: dict[str, str] = field(default_factory=dict)

    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def namespaces(self) -> list[str]:
        return [self.ns("hub"), *(self.ns(n) for n in self.nodes)]

    def teardown(self) -> None:
        for ns in self.namespaces():  # anything still running inside this test's namespaces
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False)
            for pid in out.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
        for ns in self.namespaces():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@pytest.fixture
def lab() -> Iterator[Lab]:
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"network-namespace test skipped: {reason}")
    tag = uuid.uuid4().hex[:6]
    lab = Lab(prefix=f"rlinfe2e-{os.getpid()}-{tag}", subnet=int(tag[:2], 16) % 200 + 20)
    try:
        hub = lab.ns("hub")
        _ip("netns", "add", hub)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        for i, node in enumerate(("b", "h", "w"), start=1):
            ns = lab.ns(node)
            _ip("netns", "add", ns)
            lab.nodes[node] = f"192.168.{lab.subnet}.{i}"
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", hub, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{lab.nodes[node]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
        yield lab
    finally:
        lab.teardown()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
        assert lab.prefix not in left, f"namespaces left behind: {left}"


# -- the recipe ----------------------------------------------------------------------------------
def _ray_ports(head: bool) -> list[str]:
    """Named agent ports (each namespace has its own port space, so fixed numbers are free) and a
    small object store; a raylet left to discover its agents' ports can give up on a busy machine."""
    args = [
        "--dashboard-agent-listen-port=52101",
        "--dashboard-agent-grpc-port=52102",
        "--metrics-export-port=52103",
        "--runtime-env-agent-port=52104",
        "--object-store-memory=80000000",
    ]
    if head:
        args += ["--include-dashboard=false", "--ray-client-server-port=52105"]
    return args


@pytest.mark.slow  # 80-140 s on the 2-core development machine: two Ray nodes, three overlay nodes
def test_ray_head_and_worker_join_over_the_easytier_overlay(lab: Lab) -> None:
    base = Path(tempfile.mkdtemp(prefix="rle2e", dir="/tmp"))  # short: Ray's socket paths live here
    state = base / "state"
    token = base / "auth" / "token"
    secret = "rlinf-e2e-" + secrets.token_hex(12)
    secret_file = base / "secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RLINF_"))}
    env.update(RLINF_STATE_DIR=str(state), RAY_ENABLE_UV_RUN_RUNTIME_ENV="0", PYTHONUNBUFFERED="1")
    outputs: list[str] = []
    overlay = {"b": "10.147.0.1", "h": "10.147.0.10", "w": "10.147.0.11"}
    names = {node: f"e2e-{node}" for node in overlay}
    port = 6379

    def rlinf(node: str, *args: str, check: bool = True, timeout: float = 400) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["ip", "netns", "exec", lab.ns(node), RLINF, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        outputs.append(proc.stdout + proc.stderr)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"[{node}] rlinf {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def net_up(node: str, role: str, *extra: str) -> None:
        rlinf(
            node, "net", "up", "--name", names[node], "--role", role, "--network-name", "rlinf-cloud-edge",
            "--secret-file", str(secret_file), "--ipv4", overlay[node], "--dev-name", "et0",
            "--timeout", "30", "--detach", *extra,
        )  # fmt: skip

    def node_start(node: str, *args: str, head: bool) -> dict:
        for attempt in range(3):  # a busy machine can make a raylet give up on its agents
            proc = rlinf(
                node, "node", "start", *args, "--network", "easytier", "--net-instance", names[node],
                "--num-cpus", "1", "--temp-dir", str(base / node), "--token-file", str(token), "--json",
                "--", *_ray_ports(head), check=False,
            )  # fmt: skip
            if proc.returncode == 0:
                return json.loads(proc.stdout)
            assert "ray start` failed" in proc.stderr or "did not finish" in proc.stderr, proc.stderr
            if attempt == 2:
                raise AssertionError(proc.stderr)
        raise AssertionError("unreachable")

    head_address = f"{overlay['h']}:{port}"
    try:
        # 1. the overlay: a bootstrap with a public (underlay) address, two TUN nodes peering through it
        net_up("b", "bootstrap")
        boot_url = f"tcp://{lab.nodes['b']}:11010"
        net_up("h", "node", "--peer", boot_url)
        net_up("w", "node", "--peer", boot_url)
        rlinf("w", "net", "verify", "--name", names["w"], "--peers", overlay["h"], timeout=60)

        # 2. Ray over the overlay addresses
        head = node_start("h", "--rank", "0", "--head", "--port", str(port), head=True)
        assert head["node_ip"] == overlay["h"] and head["net_device"] == "et0"
        assert head["network"] == "easytier" and head["address"] == head_address
        assert head["auth_mode"] == "token" and token.is_file()
        worker = node_start("w", "--rank", "1", "--address", head_address, head=False)
        assert worker["node_ip"] == overlay["w"] and worker["net_device"] == "et0"
        assert worker["network"] == "easytier"

        # 3. the cluster as the head's driver sees it (auth settings adopted from the node records)
        ready = rlinf("h", "cluster", "wait", "--nodes", "2", "--timeout", "240", "--address", head_address)
        assert "ready: 2 nodes" in ready.stdout
        status = json.loads(rlinf("h", "cluster", "status", "--json", "--address", head_address).stdout)
        got = [
            (n["rank"], n["ip"], n["alive"], n.get("net_devices"), n["ip_device"], n["overlay"])
            for n in status["nodes"]
        ]
        assert got == [
            (
                0,
                overlay["h"],
                True,
                "et0",
                "et0",
                {"provider": "easytier", "device": "et0", "ipv4": overlay["h"]},
            ),
            (
                1,
                overlay["w"],
                True,
                "et0",
                "et0",
                {"provider": "easytier", "device": "et0", "ipv4": overlay["w"]},
            ),
        ], status
        assert all(n["net_addresses"] == {"et0": n["ip"]} for n in status["nodes"])
        assert status["problems"] == [], status["problems"]
        table = rlinf("h", "cluster", "status", "--address", head_address).stdout
        assert table.count("et0 (easytier overlay)") == 2, table

        # 4. stop by PID: the worker, then the head, then the overlay
        stopped = rlinf("w", "node", "stop", "--node-ip", overlay["w"], "--grace", "10").stdout
        assert f"stopped rank 1 ({overlay['w']}" in stopped
        stopped = rlinf("h", "node", "stop", "--node-ip", overlay["h"], "--grace", "10").stdout
        assert f"stopped rank 0 ({overlay['h']}" in stopped
        from rlinf_scheduler.runtime.node import load_records, session_pids

        assert load_records(state) == []
        assert session_pids(head["sid"]) == [] and session_pids(worker["sid"]) == []
        for node in ("w", "h", "b"):
            rlinf(node, "net", "down", "--name", names[node])
        secret_token = token.read_text().strip()
        assert all(secret not in out and secret_token not in out for out in outputs)
    finally:
        from rlinf_scheduler.runtime.node import stop_nodes

        stop_nodes(directory=state, grace=5)  # by recorded PID; never `ray stop`
        for node in ("w", "h", "b"):
            subprocess.run(
                ["ip", "netns", "exec", lab.ns(node), RLINF, "net", "down", "--name", names[node]],
                env=env,
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(base, ignore_errors=True)


def test_node_start_refuses_an_overlay_instance_that_cannot_carry_ray(tmp_path: Path) -> None:
    """No root needed: an instance that is not running, and a real --no-tun instance on loopback."""
    import socket

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RLINF_"))}
    env["RLINF_STATE_DIR"] = str(tmp_path / "state")
    secret_file = tmp_path / "secret"
    secret_file.write_text(secrets.token_hex(16))
    secret_file.chmod(0o600)

    def rlinf(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [RLINF, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    start = ("node", "start", "--rank", "0", "--head", "--auth", "disabled", "--network", "easytier")
    proc = rlinf(*start, "--net-instance", "nowhere")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--network easytier: overlay instance 'nowhere' is not running" in proc.stderr
    assert "Traceback" not in proc.stderr

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    up = rlinf(
        "net", "up", "--name", "notun", "--role", "bootstrap", "--network-name", "rlinf-e2e",
        "--secret-file", str(secret_file), "--ipv4", "10.148.0.1", "--no-tun",
        "--listen", f"tcp://127.0.0.1:{port}", "--timeout", "15", "--detach",
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        for extra in (("--net-instance", "notun"), ()):  # by name, and as the only running instance
            proc = rlinf(*start, *extra)
            assert proc.returncode == 1, proc.stdout + proc.stderr
            assert "--network easytier: overlay instance 'notun' runs with --no-tun" in proc.stderr
            assert "Traceback" not in proc.stderr
        assert not list((tmp_path / "state").glob("node-*.json"))  # Ray was never started
    finally:
        rlinf("net", "down", "--name", "notun")

"""Fixtures for rlinf-net-easytier tests: an isolated state directory, a way to run the real
``rlinf`` CLI (optionally inside a network namespace), and a lab of network namespaces joined by
veth pairs on a bridge that the fixture creates and always removes."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

RLINF = str(Path(sys.executable).with_name("rlinf"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Runner:
    """Runs ``rlinf`` with ``RLINF_STATE_DIR`` set; remembers instances to stop at teardown."""

    state: Path
    env: dict[str, str]
    started: list[tuple[str, str | None]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def __call__(
        self, *args: str, netns: str | None = None, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [RLINF, *args]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        if "up" in args and "--name" in args:
            self.started.append((args[args.index("--name") + 1], netns))
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**self.env, **(env or {})}, check=False
        )
        self.outputs.append(proc.stdout + proc.stderr)
        return proc

    def stop_all(self) -> None:
        """Stop every instance still running in this test's state directory (SIGTERM, then
        SIGKILL), judged by the instance lock, so nothing outlives the test."""
        from rlinf_net_easytier.state import InstancePaths

        root = self.state / "net"
        running = [InstancePaths(p.stem, root) for p in root.glob("*.lock")] if root.is_dir() else []
        running = [p for p in running if p.is_running()]
        for paths in running:
            pid = paths.read_pid()
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(p.is_running() for p in running):
            time.sleep(0.05)
        for paths in running:
            pid = paths.read_pid()
            if paths.is_running() and pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def rlinf_cli(tmp_path: Path) -> Iterator[Runner]:
    state = tmp_path / "state"
    env = {**os.environ, "RLINF_STATE_DIR": str(state)}
    env.pop("RLINF_DEBUG", None)
    runner = Runner(state, env)
    yield runner
    runner.stop_all()


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("RLINF_STATE_DIR", str(state))
    return state


@pytest.fixture
def secret_file(tmp_path: Path) -> tuple[Path, str]:
    secret = "rlinf-test-" + secrets.token_hex(12)
    path = tmp_path / "secret"
    path.write_text(secret + "\n")
    path.chmod(0o600)
    return path, secret


# -- network namespaces ------------------------------------------------------------------------------
def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def netns_unavailable_reason() -> str | None:
    """Why this process cannot build a namespace lab (``None`` if it can)."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    probe = f"rlinftest-{os.getpid()}-probe-{uuid.uuid4().hex[:6]}"
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
    if not Path("/dev/net/tun").exists():
        return "/dev/net/tun is missing, so TUN devices cannot be created"
    return None


@dataclass
class NetLab:
    """Namespaces ``<prefix>-<node>`` each with ``eth0`` = 192.168.<subnet>.<i>/24 on one bridge
    (in the namespace ``<prefix>-hub``)."""

    prefix: str
    subnet: int
    nodes: dict[str, str] = field(default_factory=dict)  # node -> underlay IP

    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def exec(self, node: str, *cmd: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.ns(node), *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kw,
        )

    def popen(self, node: str, *cmd: str, **kw) -> subprocess.Popen[str]:
        return subprocess.Popen(["ip", "netns", "exec", self.ns(node), *cmd], text=True, **kw)

    def namespaces(self) -> list[str]:
        return [self.ns("hub"), *(self.ns(n) for n in self.nodes)]

    def teardown(self) -> None:
        for ns in self.namespaces():
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False)
            for pid in out.stdout.split():  # processes this test started inside its own namespaces
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
        for ns in self.namespaces():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def build_netlab(nodes: list[str]) -> NetLab:
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"network-namespace test skipped: {reason}")
    tag = uuid.uuid4().hex[:6]
    lab = NetLab(prefix=f"rlinftest-{os.getpid()}-{tag}", subnet=int(tag[:2], 16) % 200 + 20)
    try:
        hub = lab.ns("hub")
        _ip("netns", "add", hub)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        for i, node in enumerate(nodes, start=1):
            ns = lab.ns(node)
            _ip("netns", "add", ns)
            lab.nodes[node] = f"192.168.{lab.subnet}.{i}"
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", hub, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{lab.nodes[node]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
    except BaseException:
        lab.teardown()
        raise
    return lab


@pytest.fixture
def netlab3() -> Iterator[NetLab]:
    """Three namespaces ``b``, ``e1``, ``e2`` on one bridge, removed afterwards."""
    lab = build_netlab(["b", "e1", "e2", "bad"])
    try:
        yield lab
    finally:
        lab.teardown()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
        assert lab.prefix not in left, f"namespaces left behind: {left}"


@pytest.fixture
def get_free_port():
    """A function returning a free TCP port on 127.0.0.1."""
    return free_port

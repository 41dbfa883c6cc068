"""``rlinf node start --network PROVIDER [--net-instance NAME]`` and the overlay columns of
``rlinf cluster status``, without a real overlay (this package does not depend on one).

The overlay itself (EasyTier TUN nodes in network namespaces, Ray head and worker joining over
it) is tested end to end in ``tests/test_e2e_overlay_ray.py`` at the repository root. Here the
network provider is :class:`LoopNet`, a stand-in whose "running instance" is this host's
loopback interface: a TUN device needs root, the loopback interface does not. Everything else
(the plugin registry lookup, the local-interface check, ``ray start``, the probes) is real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import ClassVar

import pytest

from rlinf_core.errors import ConfigError, NetworkError, PluginError
from rlinf_core.network import NetworkProvider
from rlinf_core.plugins import load_plugins
from rlinf_scheduler.cli import _network_view
from rlinf_scheduler.runtime.cluster import NodeInfo
from rlinf_scheduler.runtime.node import (
    NodeRecord,
    NodeStartOptions,
    bind_to_network,
    build_ray_start,
    join_instructions,
)

pytestmark = pytest.mark.xdist_group("loopback")  # fixed loopback addresses: see conftest.py


class LoopNet(NetworkProvider):
    """A provider whose instances sit on the loopback interface (see the module docstring)."""

    PLUGIN_NAME: ClassVar[str] = "loopnet"
    answer: ClassVar[tuple[str, str]] = ("lo", "127.0.0.2")
    asked: ClassVar[list[str | None]] = []

    @classmethod
    def bind_address_of(cls, name: str | None = None) -> tuple[str, str]:
        cls.asked.append(name)
        if name == "down":
            raise NetworkError("overlay instance 'down' is not running (no instance is running)")
        return cls.answer


class Silent(NetworkProvider):
    """A provider that keeps the interface's default ``bind_address_of``."""

    PLUGIN_NAME: ClassVar[str] = "silent"


class Providers:
    """The part of :class:`rlinf_core.plugins.Registry` that ``bind_to_network`` uses."""

    def __init__(self, *classes: type) -> None:
        self._by_name = {c.PLUGIN_NAME: c for c in classes}

    def get(self, name: str) -> type:
        return self._by_name[name]


PROVIDERS = Providers(LoopNet, Silent)


@pytest.fixture(autouse=True)
def _reset_loopnet(monkeypatch):
    # `--auth` must agree with RAY_AUTH_MODE, which an embedded Ray earlier in this process (or
    # the user's shell) may have set
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    LoopNet.answer = ("lo", "127.0.0.2")  # not 127.0.0.1, which `ray start` replaces by the host's address
    LoopNet.asked = []


def opts(**kw) -> NodeStartOptions:
    return NodeStartOptions(**{"rank": 0, "head": True, "auth": "disabled", **kw})


# -- bind_to_network --------------------------------------------------------------------------------
def test_network_binds_ray_to_the_instance_address_and_device():
    bound = bind_to_network(opts(network="loopnet", net_instance="edge-1", port=6390), PROVIDERS)
    assert (bound.node_ip, bound.net_device, bound.network) == ("127.0.0.2", "lo", "loopnet")
    assert LoopNet.asked == ["edge-1"]
    cmd, env, node_ip, address = build_ray_start(bound)
    assert "--node-ip-address=127.0.0.2" in cmd and address == "127.0.0.2:6390" and node_ip == "127.0.0.2"
    assert env["RLINF_COMM_NET_DEVICES"] == "lo" and env["RLINF_NET_PROVIDER"] == "loopnet"
    # without --net-instance the provider's default instance is asked for
    bind_to_network(opts(network="loopnet"), PROVIDERS)
    assert LoopNet.asked[-1] is None


def test_without_network_nothing_changes():
    o = opts(node_ip="10.0.0.1")
    assert bind_to_network(o, PROVIDERS) is o
    _, env, _, _ = build_ray_start(o)
    assert "RLINF_NET_PROVIDER" not in env and "RLINF_COMM_NET_DEVICES" not in env


def test_network_conflicts_with_explicit_addresses():
    with pytest.raises(ConfigError, match="takes the node IP and the net device from the overlay instance; drop --node-ip and --net-device"):  # fmt: skip
        bind_to_network(opts(network="loopnet", node_ip="1.2.3.4", net_device="eth0"), PROVIDERS)
    with pytest.raises(ConfigError, match="--net-instance needs --network PROVIDER"):
        bind_to_network(opts(net_instance="edge-1"), PROVIDERS)


def test_an_instance_that_is_not_up_is_reported_with_the_provider():
    with pytest.raises(NetworkError, match=r"^--network loopnet: overlay instance 'down' is not running"):
        bind_to_network(opts(network="loopnet", net_instance="down"), PROVIDERS)


def test_a_device_missing_here_means_another_host_or_namespace():
    LoopNet.answer = ("et9", "10.10.0.11")
    with pytest.raises(NetworkError) as err:
        bind_to_network(opts(network="loopnet", net_instance="edge-1"), PROVIDERS)
    msg = str(err.value)
    assert "instance 'edge-1' reports device 'et9' with 10.10.0.11" in msg
    assert "network interface 'et9' has no IPv4 address or does not exist" in msg
    assert "in the host (or network namespace) where that instance runs" in msg


def test_a_device_carrying_another_address_is_refused():
    LoopNet.answer = ("lo", "10.10.0.11")
    with pytest.raises(NetworkError, match=r"reports 10.10.0.11 on 'lo', but 'lo' here has 127.0.0.1"):
        bind_to_network(opts(network="loopnet"), PROVIDERS)


def test_a_provider_without_lookup_says_so():
    with pytest.raises(NetworkError, match="provider 'silent' cannot look up a running instance by name"):
        bind_to_network(opts(network="silent"), PROVIDERS)


def test_an_unknown_provider_names_what_is_installed():
    with pytest.raises(PluginError, match="unknown network provider 'nosuch'; installed: "):
        bind_to_network(opts(network="nosuch"), load_plugins().network_providers)


def test_the_head_tells_workers_to_use_the_same_network():
    rec = NodeRecord(
        rank=0, head=True, node_ip="10.10.0.1", address="10.10.0.1:6379", sid=1, pids=[1],
        auth_mode="disabled", token_path=None, temp_dir=None, log_path="", started_at=0.0,
        net_device="et0", network="easytier",
    )  # fmt: skip
    text = join_instructions(rec)
    assert "started on the easytier overlay (et0): rank 0, 10.10.0.1" in text
    assert "rlinf node start --rank R --address 10.10.0.1:6379 --network easytier" in text
    assert "its own easytier instance (`rlinf net up --role node ... --detach`)" in text


# -- the CLI ----------------------------------------------------------------------------------------
def _rlinf(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RLINF_"))}
    env["RLINF_STATE_DIR"] = str(tmp_path / "state")
    return subprocess.run(
        [sys.executable, "-m", "rlinf_core", *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--network", "nosuch"], 1, "unknown network provider 'nosuch'; installed: "),
        (["--network", "easytier", "--node-ip", "10.0.0.1"], 2, "drop --node-ip / --net-device"),
        (["--net-instance", "edge-1"], 2, "--net-instance needs --network PROVIDER"),
    ],
    ids=["unknown-provider", "with-node-ip", "instance-without-network"],
)
def test_cli_errors_are_clear(tmp_path, args, code, needle):
    proc = _rlinf(tmp_path, "node", "start", "--rank", "0", "--head", "--auth", "disabled", *args)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").glob("node-*.json"))


# -- cluster status: which nodes are on an overlay ------------------------------------------------
NET = {"lo": "127.0.0.1", "eth0": "192.168.1.5", "et0": "10.10.0.11"}


def node(ip: str, env: dict[str, str] | None = None) -> NodeInfo:
    return NodeInfo(node_id="n1", ip=ip, rank=1, raw_rank="1", env=env or {})


def test_status_marks_a_node_bound_to_its_overlay_device():
    keys, problems = _network_view(
        node("10.10.0.11", {"RLINF_COMM_NET_DEVICES": "et0"}), {"provider": "easytier", "interfaces": NET}
    )
    assert keys == {
        "ip_device": "et0",
        "net_addresses": {"et0": "10.10.0.11"},
        "overlay": {"provider": "easytier", "device": "et0", "ipv4": "10.10.0.11"},
    }
    assert problems == []


def test_status_flags_ray_and_collectives_on_different_networks():
    keys, problems = _network_view(
        node("192.168.1.5", {"RLINF_COMM_NET_DEVICES": "et0"}), {"provider": None, "interfaces": NET}
    )
    assert keys["ip_device"] == "eth0" and keys["overlay"] is None
    assert problems == [
        "node 1 (192.168.1.5): Ray is bound to 192.168.1.5 on eth0 but RLINF_COMM_NET_DEVICES is et0 "
        "(et0 10.10.0.11): Ray and collectives would use different networks; restart Ray there with "
        "`rlinf node start --network PROVIDER` (overlay) or `--net-device DEV`"
    ]


def test_status_flags_an_overlay_device_that_went_away():
    interfaces = {"lo": "127.0.0.1", "eth0": "192.168.1.5"}
    keys, problems = _network_view(
        node("10.10.0.11", {"RLINF_COMM_NET_DEVICES": "et0"}),
        {"provider": "easytier", "interfaces": interfaces},
    )
    assert keys == {"ip_device": None, "net_addresses": {"et0": None}, "overlay": None}
    assert problems == [
        "node 1 (10.10.0.11): RLINF_COMM_NET_DEVICES names 'et0', which has no IPv4 address on that node "
        "(is its overlay instance down?)"
    ]


def test_status_of_a_plain_node_and_of_an_unprobed_one():
    assert _network_view(node("192.168.1.5"), {"provider": None, "interfaces": NET}) == (
        {"ip_device": "eth0", "overlay": None},
        [],
    )
    assert _network_view(node("192.168.1.5"), None) == ({"ip_device": None, "overlay": None}, [])


# -- real Ray: start over the (loopback) network, then cluster status -----------------------------
@pytest.mark.network
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_node_started_on_a_network_shows_as_overlay_in_cluster_status():
    pytest.importorskip("ray")
    from rlinf_scheduler.runtime.cluster import free_tcp_ports
    from rlinf_scheduler.runtime.node import session_pids, start_node, stop_nodes

    base = Path(tempfile.mkdtemp(prefix="rlnn", dir="/tmp"))
    state = base / "state"
    port, *agents = free_tcp_ports(6, "127.0.0.2")
    extra = [
        f"--dashboard-agent-listen-port={agents[0]}",
        f"--dashboard-agent-grpc-port={agents[1]}",
        f"--metrics-export-port={agents[2]}",
        f"--runtime-env-agent-port={agents[3]}",
        f"--ray-client-server-port={agents[4]}",
        "--object-store-memory=80000000",
        "--include-dashboard=false",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RLINF_"))}
    env.update(RLINF_STATE_DIR=str(state), RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    try:
        rec = None
        for attempt in range(3):  # a busy machine can make a raylet give up on its agents
            try:
                rec = start_node(
                    opts(network="loopnet", net_instance="lo-1", port=port, num_cpus=1, temp_dir=str(base / "t"),
                         extra_args=extra, timeout=240),
                    directory=state,
                    providers=PROVIDERS,
                )  # fmt: skip
                break
            except Exception:
                if attempt == 2:
                    raise
        assert rec is not None
        assert (rec.node_ip, rec.net_device, rec.network) == ("127.0.0.2", "lo", "loopnet")
        proc = subprocess.run(
            [sys.executable, "-m", "rlinf_core", "cluster", "status", "--json", "--address", rec.address],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        (n,) = json.loads(proc.stdout)["nodes"]
        assert (n["ip"], n["net_devices"], n["ip_device"]) == ("127.0.0.2", "lo", "lo")
        assert n["overlay"] == {"provider": "loopnet", "device": "lo", "ipv4": "127.0.0.2"}
        assert n["net_addresses"] == {"lo": "127.0.0.1"}
        listed = subprocess.run(
            [sys.executable, "-m", "rlinf_core", "node", "list"], env=env, capture_output=True, text=True
        )
        assert "127.0.0.2 on the loopnet overlay (lo)" in listed.stdout, listed.stdout + listed.stderr
        stopped = stop_nodes(directory=state, grace=30)  # by recorded PID; never `ray stop`
        assert [r.sid for r, _ in stopped] == [rec.sid]
        deadline = time.monotonic() + 10  # SIGKILLed stragglers take a moment to go
        while session_pids(rec.sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert session_pids(rec.sid) == []
    finally:
        stop_nodes(directory=state, grace=5)
        shutil.rmtree(base, ignore_errors=True)

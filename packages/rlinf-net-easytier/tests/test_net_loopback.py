"""Real EasyTier nodes peering over loopback in no-TUN mode (no root needed), with public
discovery (STUN, UPnP) off: detached CLI instances, the in-process provider, and every bad-input
path a user can hit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlinf_core.errors import ConfigError, NetworkError
from rlinf_net_easytier.config import EasyTierConfig
from rlinf_net_easytier.provider import EasyTierProvider

pytestmark = [pytest.mark.network, pytest.mark.xdist_group("loopback")]


def up_args(name, role, ipv4, secret_path, *, network="rlinf-lo", listen=None, peers=(), extra=()):
    args = [
        "net",
        "up",
        "--name",
        name,
        "--role",
        role,
        "--network-name",
        network,
        "--ipv4",
        ipv4,
        "--secret-file",
        str(secret_path),
        "--no-tun",
        "--timeout",
        "10",
    ]
    if listen:
        args += ["--listen", f"tcp://127.0.0.1:{listen}"]
    for p in peers:
        args += ["--peer", p]
    return [*args, *extra]


def wait_status(rlinf_cli, name, predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        proc = rlinf_cli("net", "status", "--name", name, "--json")
        if proc.returncode == 0:
            status = json.loads(proc.stdout)
            if predicate(status):
                return status
        time.sleep(0.5)
    raise AssertionError(f"status of {name} never matched; last: {status}")


def proc_cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.slow  # 20-35 s: many `rlinf` CLI runs, each ~1 s of start-up
def test_three_nodes_peer_over_loopback_and_never_leak_the_secret(rlinf_cli, secret_file, get_free_port):
    path, secret = secret_file
    port = get_free_port()
    boot = rlinf_cli(*up_args("lo-boot", "bootstrap", "10.231.0.1", path, listen=port), "--detach")
    assert boot.returncode == 0, boot.stderr
    assert "10.231.0.1" in boot.stdout and "none (--no-tun)" in boot.stdout
    peer = [f"tcp://127.0.0.1:{port}"]
    e1 = rlinf_cli(*up_args("lo-e1", "node", "10.231.0.11", path, peers=peer), "--detach", "--json")
    assert e1.returncode == 0, e1.stderr
    st = json.loads(e1.stdout)
    assert st["ipv4"] == "10.231.0.11" and st["device"] is None and st["state"] == "up"
    assert [p["ipv4"] for p in st["peers"]] == ["10.231.0.1"]
    assert st["peers"][0]["hostname"] == "lo-boot" and st["peers"][0]["latency_ms"] is not None
    # the third node takes its secret from an environment variable instead of a file
    args = up_args("lo-e2", "node", "10.231.0.12", path, peers=peer)
    i = args.index("--secret-file")
    args[i : i + 2] = ["--secret-env", "ET_TEST_SECRET"]
    e2 = rlinf_cli(*args, "--detach", env={"ET_TEST_SECRET": secret})
    assert e2.returncode == 0, e2.stderr

    # every node sees the two others (e2 reaches e1 through the bootstrap)
    st = wait_status(
        rlinf_cli, "lo-e2", lambda s: {p["ipv4"] for p in s["peers"]} == {"10.231.0.1", "10.231.0.11"}
    )
    assert set(st) >= {"ipv4", "device", "peers", "routes"}
    assert all(set(p) >= {"ipv4", "hostname", "latency_ms"} for p in st["peers"])
    wait_status(rlinf_cli, "lo-boot", lambda s: len(s["peers"]) == 2)
    # e1 learns e2's route from the bootstrap a moment after e2 has both (CI saw it still missing)
    wait_status(
        rlinf_cli, "lo-e1", lambda s: {p["ipv4"] for p in s["peers"]} == {"10.231.0.1", "10.231.0.12"}
    )
    text = rlinf_cli("net", "status", "--name", "lo-e1")
    assert text.returncode == 0 and "10.231.0.12" in text.stdout and "lo-e2" in text.stdout

    verify = rlinf_cli("net", "verify", "--name", "lo-e1", "--peers", "10.231.0.1,10.231.0.12")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    verify = rlinf_cli("net", "verify", "--name", "lo-e1", "--peers", "10.231.0.1,10.231.0.99")
    assert verify.returncode == 1 and "10.231.0.99" in verify.stderr and "10.231.0.1 " not in verify.stderr

    # the secret is in no command line, no log and no output
    state = rlinf_cli.state / "net"
    for name in ("lo-boot", "lo-e1", "lo-e2"):
        pid = int((state / f"{name}.pid").read_text())
        assert secret not in proc_cmdline(pid)
        assert "rlinf_net_easytier.daemon" in proc_cmdline(pid)
    for log in state.glob("*.log"):
        assert secret not in log.read_text()
    for f in state.glob("*.json"):
        assert secret not in f.read_text()
    assert all(secret not in out for out in rlinf_cli.outputs)

    # a second instance under a taken name is refused
    again = rlinf_cli(*up_args("lo-e1", "node", "10.231.0.13", path, peers=peer), "--detach")
    assert again.returncode == 1 and "'lo-e1' is already running" in again.stderr

    for name in ("lo-e2", "lo-e1", "lo-boot"):
        down = rlinf_cli("net", "down", "--name", name)
        assert down.returncode == 0 and "stopped" in down.stdout
    assert not list(state.glob("*.pid"))
    assert rlinf_cli("net", "status", "--name", "lo-e1").returncode == 1


@pytest.mark.slow  # 20-35 s: many `rlinf` CLI runs, each ~1 s of start-up
def test_bad_input_against_a_live_bootstrap(rlinf_cli, secret_file, get_free_port, tmp_path):
    path, _ = secret_file
    port = get_free_port()
    assert (
        rlinf_cli(*up_args("bad-boot", "bootstrap", "10.232.0.1", path, listen=port), "--detach").returncode
        == 0
    )
    peer = [f"tcp://127.0.0.1:{port}"]
    first = rlinf_cli(*up_args("bad-e1", "node", "10.232.0.11", path, peers=peer), "--detach")
    assert first.returncode == 0, first.stderr

    # duplicate overlay IP
    dup = rlinf_cli(*up_args("bad-dup", "node", "10.232.0.11", path, peers=peer))
    assert dup.returncode == 1
    assert "10.232.0.11 is already used by peer 'bad-e1'" in dup.stderr and "Traceback" not in dup.stderr

    # wrong secret: reached but not admitted (judged by routes)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-secret")
    wrong.chmod(0o600)
    ws = rlinf_cli(*up_args("bad-ws", "node", "10.232.0.21", wrong, peers=peer, extra=["--timeout", "3"]))
    assert ws.returncode == 1
    assert "was not admitted" in ws.stderr and "secret" in ws.stderr and "Traceback" not in ws.stderr
    assert "not-the-secret" not in ws.stderr + ws.stdout

    # wrong network name
    wn = rlinf_cli(
        *up_args("bad-wn", "node", "10.232.0.22", path, network="other", peers=peer, extra=["--timeout", "3"])
    )
    assert wn.returncode == 1 and "was not admitted" in wn.stderr

    # unreachable bootstrap: a timeout with a message naming the URL
    closed = get_free_port()
    t0 = time.monotonic()
    ur = rlinf_cli(
        *up_args(
            "bad-ur",
            "node",
            "10.232.0.23",
            path,
            peers=[f"tcp://127.0.0.1:{closed}"],
            extra=["--timeout", "2"],
        ),
        "--detach",
    )
    assert ur.returncode == 1 and time.monotonic() - t0 < 20
    assert (
        f"could not reach the bootstrap within 2 s (tcp://127.0.0.1:{closed}: Connection refused)"
        in ur.stderr
    )
    assert "Traceback" not in ur.stderr

    # the bootstrap stayed healthy and only admitted bad-e1
    st = json.loads(rlinf_cli("net", "status", "--name", "bad-boot", "--json").stdout)
    assert [p["hostname"] for p in st["peers"]] == ["bad-e1"]

    # a listener port that is already taken
    busy = rlinf_cli(*up_args("bad-busy", "bootstrap", "10.232.0.2", path, listen=port))
    assert busy.returncode == 1 and "cannot listen on" in busy.stderr


def test_provider_in_process(state_dir, secret_file, get_free_port):
    path, _ = secret_file
    port = get_free_port()
    common = {"network_name": "rlinf-prov", "secret_file": str(path), "no_tun": True}
    boot = EasyTierProvider(
        EasyTierConfig(
            name="p-boot", role="bootstrap", ipv4="10.233.0.1", listen=[f"tcp://127.0.0.1:{port}"], **common
        )
    )
    node = EasyTierProvider(
        {
            "name": "p-node",
            "role": "node",
            "ipv4": "10.233.0.2",
            "peers": [f"tcp://127.0.0.1:{port}"],
            **common,
        }
    )
    try:
        st = boot.up(timeout=5)
        assert st.running and st.ipv4 == "10.233.0.1" and st.device is None
        st = node.up(timeout=10)
        assert [p.ipv4 for p in st.peers] == ["10.233.0.1"] and node.first_peer_seconds is not None
        assert node.verify(["10.233.0.1", "10.233.0.7"]) == {
            "10.233.0.1": None,
            "10.233.0.7": "no overlay route (the peer is offline, not admitted, or uses another network)",
        }
        with pytest.raises(NetworkError, match="--no-tun"):
            node.bind_address()
    finally:
        node.down()
        boot.down()
    assert not node.status().running


def test_provider_rejects_a_bad_mapping():
    with pytest.raises(ConfigError, match="ipv4"):
        EasyTierProvider({"role": "bootstrap", "network_name": "n", "secret_env": "X", "ipv4": "nope"})


def test_foreground_up_stops_cleanly_on_sigterm(rlinf_cli, secret_file, get_free_port):
    path, secret = secret_file
    port = get_free_port()
    cmd = [
        str(Path(sys.executable).with_name("rlinf")),
        *up_args("fg-boot", "bootstrap", "10.234.0.1", path, listen=port),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=rlinf_cli.env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "overlay instance 'fg-boot' is up" in first
        assert secret not in proc_cmdline(proc.pid)
        st = json.loads(rlinf_cli("net", "status", "--name", "fg-boot", "--json").stdout)
        assert st["pid"] == proc.pid and st["listeners"] == [f"tcp://127.0.0.1:{port}"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert secret not in out + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rlinf_cli("net", "status", "--name", "fg-boot").returncode == 1

"""Real EasyTier nodes with TUN devices in network namespaces that the tests create (veth pairs on
a bridge) and always remove: a bootstrap and two edges, TCP traffic between overlay addresses,
peers and routes from `rlinf net status`, a wrong secret refused, and the clear TUN-permission
errors. Skipped, with the reason, where namespaces cannot be created (not root)."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.xdist_group("loopback")]

ECHO_SERVER = r"""
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2]))); srv.listen(4); print("listening", flush=True)
srv.settimeout(60)
while True:
    conn, _ = srv.accept()
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            conn.sendall(data)
"""

ECHO_CLIENT = r"""
import hashlib, os, socket, sys, threading
payload = os.urandom(int(sys.argv[3]))
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
def send():
    s.sendall(payload); s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send); t.start()
got = bytearray()
while True:
    d = s.recv(65536)
    if not d:
        break
    got += d
t.join()
print(hashlib.sha256(payload).hexdigest(), hashlib.sha256(bytes(got)).hexdigest(), len(got))
"""


def node_args(name, role, ipv4, secret_path, peers=(), network="rlinf-ns"):
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
        "--dev-name",
        "et0",
        "--timeout",
        "15",
        "--detach",
    ]
    for p in peers:
        args += ["--peer", p]
    return args


def wait_peers(rlinf_cli, name, want, timeout=20.0):
    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        proc = rlinf_cli("net", "status", "--name", name, "--json")
        if proc.returncode == 0:
            st = json.loads(proc.stdout)
            if {p["ipv4"] for p in st["peers"]} >= set(want):
                return st
        time.sleep(0.5)
    raise AssertionError(f"{name} never saw peers {want}; last status {st}")


def test_bootstrap_and_two_edges_with_tun_carry_tcp(netlab3, rlinf_cli, secret_file, monkeypatch):
    lab = netlab3
    path, secret = secret_file
    boot_url = f"tcp://{lab.nodes['b']}:11010"
    r = rlinf_cli(*node_args("ns-b", "bootstrap", "10.144.0.1", path), netns=lab.ns("b"))
    assert r.returncode == 0, r.stderr
    assert "device:       et0" in r.stdout
    for node, ip in (("e1", "10.144.0.11"), ("e2", "10.144.0.12")):
        r = rlinf_cli(*node_args(f"ns-{node}", "node", ip, path, [boot_url]), netns=lab.ns(node))
        assert r.returncode == 0, r.stderr
        assert ip in r.stdout and "10.144.0.1 " in r.stdout

    # the TUN device carries the overlay address inside each namespace
    for node, ip in (("b", "10.144.0.1"), ("e1", "10.144.0.11"), ("e2", "10.144.0.12")):
        out = lab.exec(node, "ip", "-4", "addr", "show", "dev", "et0")
        assert f"inet {ip}/24" in out.stdout, out.stdout + out.stderr

    # peers and routes as `rlinf net status` reports them: e1 reaches e2 through the bootstrap
    st = wait_peers(rlinf_cli, "ns-e1", {"10.144.0.1", "10.144.0.12"})
    assert st["ipv4"] == "10.144.0.11" and st["device"] == "et0"
    peers = {p["ipv4"]: p for p in st["peers"]}
    assert peers["10.144.0.1"]["hostname"] == "ns-b" and peers["10.144.0.1"]["latency_ms"] is not None
    routes = {r["ipv4"]: r for r in st["routes"]}
    assert routes["10.144.0.1"]["cost"] == 1
    assert routes["10.144.0.12"]["hostname"] == "ns-e2"
    text = rlinf_cli("net", "status", "--name", "ns-e1").stdout
    assert "ns-e2" in text and "latency_ms" in text

    # TCP between overlay addresses across namespaces (1 MiB echoed back intact)
    server = lab.popen("e2", sys.executable, "-c", ECHO_SERVER, "10.144.0.12", "6390", stdout=-1)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        out = lab.exec("e1", sys.executable, "-c", ECHO_CLIENT, "10.144.0.12", "6390", str(1 << 20))
        sent, got, n = out.stdout.split()
        assert sent == got and int(n) == 1 << 20, out.stderr
        # verify: ICMP to every peer, then a port that listens and one that does not
        v = rlinf_cli(
            "net", "verify", "--name", "ns-e1", "--peers", "10.144.0.1,10.144.0.12", netns=lab.ns("e1")
        )
        assert v.returncode == 0 and "icmp" in v.stdout, v.stdout + v.stderr
        v = rlinf_cli(
            "net",
            "verify",
            "--name",
            "ns-e1",
            "--peers",
            "10.144.0.12",
            "--ports",
            "6390",
            netns=lab.ns("e1"),
        )
        assert v.returncode == 0, v.stdout + v.stderr
        v = rlinf_cli(
            "net",
            "verify",
            "--name",
            "ns-e1",
            "--peers",
            "10.144.0.1,10.144.0.12",
            "--ports",
            "6391",
            "--timeout",
            "2",
            netns=lab.ns("e1"),
        )
        assert v.returncode == 1 and "10.144.0.1 (tcp 10.144.0.1:6391 refused" in v.stderr
        assert "10.144.0.12 (tcp 10.144.0.12:6391 refused" in v.stderr
    finally:
        server.kill()
        server.wait()

    # the public API the Ray runtime uses
    monkeypatch.setenv("RLINF_STATE_DIR", str(rlinf_cli.state))
    from rlinf_net_easytier import overlay_address

    assert overlay_address("ns-e1") == ("et0", "10.144.0.11")

    # the secret is in no command line, log, status file or output
    for name in ("ns-b", "ns-e1", "ns-e2"):
        pid = int((rlinf_cli.state / "net" / f"{name}.pid").read_text())
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            assert secret.encode() not in fh.read()
    for f in (rlinf_cli.state / "net").iterdir():
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f
    assert all(secret not in out for out in rlinf_cli.outputs)

    # down removes the device
    assert rlinf_cli("net", "down", "--name", "ns-e1").returncode == 0
    out = lab.exec("e1", "ip", "link", "show", "et0")
    assert out.returncode != 0


def test_wrong_secret_is_refused(netlab3, rlinf_cli, secret_file, tmp_path):
    lab = netlab3
    path, _ = secret_file
    boot_url = f"tcp://{lab.nodes['b']}:11010"
    assert rlinf_cli(*node_args("ws-b", "bootstrap", "10.145.0.1", path), netns=lab.ns("b")).returncode == 0
    assert (
        rlinf_cli(*node_args("ws-e1", "node", "10.145.0.11", path, [boot_url]), netns=lab.ns("e1")).returncode
        == 0
    )
    wrong = tmp_path / "wrong"
    wrong.write_text("definitely-not-it")
    wrong.chmod(0o600)
    args = node_args("ws-bad", "node", "10.145.0.66", wrong, [boot_url])
    args[args.index("15")] = "4"
    r = rlinf_cli(*args, netns=lab.ns("bad"))
    assert r.returncode == 1
    assert "was not admitted to network 'rlinf-ns'" in r.stderr and "Traceback" not in r.stderr
    # admission is judged by routes: neither member ever routes to the rejected address
    for name in ("ws-b", "ws-e1"):
        st = json.loads(rlinf_cli("net", "status", "--name", name, "--json").stdout)
        assert "10.145.0.66" not in {x["ipv4"] for x in st["routes"]}
    assert lab.exec("bad", "ip", "link", "show", "et0").returncode != 0  # the refused node cleaned up


@pytest.mark.parametrize(
    ("wrap", "reason"),
    [
        (
            ["setpriv", "--bounding-set", "-net_admin,-net_raw", "--inh-caps", "-net_admin,-net_raw"],
            "permission denied",
        ),
        (
            ["unshare", "-m", "sh", "-c", 'mount --bind /dev/null /dev/net/tun && exec "$@"', "sh"],
            "/dev/net/tun is missing",
        ),
    ],
    ids=["no-cap-net-admin", "no-dev-net-tun"],
)
def test_missing_tun_permission_gives_the_docker_flags(netlab3, rlinf_cli, secret_file, wrap, reason):
    import shutil

    if shutil.which(wrap[0]) is None:
        pytest.skip(f"{wrap[0]} is not installed")
    path, _ = secret_file
    rlinf = os.path.join(os.path.dirname(sys.executable), "rlinf")
    up = [
        "net",
        "up",
        "--name",
        "tunless",
        "--role",
        "bootstrap",
        "--network-name",
        "n",
        "--ipv4",
        "10.146.0.1",
        "--secret-file",
        str(path),
    ]
    proc = netlab3.exec("b", *wrap, rlinf, *up, env=rlinf_cli.env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    for needle in ("NET_ADMIN", "NET_RAW", "/dev/net/tun", "--no-tun", reason):
        assert needle in err, err
    assert "Traceback" not in err

"""EasyTier overlay vs the bare veth path, measured in one run on this machine.

Builds three network namespaces joined by veth pairs on a bridge (a bootstrap ``b`` and two edges
``e1``, ``e2``), brings the overlay up with ``rlinf net up --detach`` (TUN device ``et0`` in each
namespace), then measures with plain Python sockets:

- TCP throughput (one stream, ``--seconds`` long) and TCP request/response latency (1-byte
  ping-pong, TCP_NODELAY; median and p99) for
  - ``veth``: e1 -> b over the underlay addresses (the bare path),
  - ``overlay direct``: e1 -> b over the overlay addresses (one EasyTier hop),
  - ``overlay relayed``: e1 -> e2 over the overlay (relayed by the bootstrap: edges behind NAT
    have no listener of their own);
- bring-up: seconds from starting an edge node to its first route (``first_peer_seconds``, in
  the node process), and the wall time of the whole ``rlinf net up --detach`` command.

Needs root (it creates namespaces); removes everything it created. Prints a table; ``--json PATH``
writes the figures; ``--quick`` is a short run. Never fails on timing.

    sudo uv run python benchmarks/net_overlay.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

SERVER = r"""
import socket, sys, time, threading
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], int(sys.argv[2]))); srv.listen(8); print("ready", flush=True)
def handle(c):
    with c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mode = c.recv(1)
        if mode == b"S":
            n = 0; t0 = None
            while True:
                d = c.recv(1 << 18)
                if not d: break
                if t0 is None: t0 = time.perf_counter()
                n += len(d)
            dt = time.perf_counter() - (t0 or time.perf_counter())
            c.sendall(f"{n} {dt}".encode())
        elif mode == b"E":
            while True:
                d = c.recv(1)
                if not d: break
                c.sendall(d)
while True:
    conn, _ = srv.accept()
    threading.Thread(target=handle, args=(conn,), daemon=True).start()
"""

CLIENT = r"""
import json, socket, sys, time
host, port, seconds, pings = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
s = socket.create_connection((host, port), timeout=30)
s.sendall(b"S"); buf = b"\0" * (1 << 18); t0 = time.perf_counter()
while time.perf_counter() - t0 < seconds:
    s.sendall(buf)
s.shutdown(socket.SHUT_WR)
n, dt = s.recv(100).decode().split(); s.close()
e = socket.create_connection((host, port), timeout=30)
e.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); e.sendall(b"E")
rtts = []
for _ in range(pings):
    t = time.perf_counter(); e.sendall(b"x"); e.recv(1); rtts.append((time.perf_counter() - t) * 1000)
e.close()
print(json.dumps({"bytes": int(n), "seconds": float(dt), "rtts_ms": rtts}))
"""


def sh(*cmd: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=120, **kw)


class Lab:
    def __init__(self, nodes: list[str]) -> None:
        self.prefix = f"rlinfbench-{os.getpid()}-{uuid.uuid4().hex[:4]}"
        self.subnet = 100 + os.getpid() % 100
        self.nodes: dict[str, str] = {}
        self.names = [f"{self.prefix}-hub"]
        hub = self.names[0]
        sh("ip", "netns", "add", hub)
        sh("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", hub, "link", "set", "br0", "up")
        for i, node in enumerate(nodes, start=1):
            ns = self.ns(node)
            sh("ip", "netns", "add", ns)
            self.names.append(ns)
            self.nodes[node] = f"192.168.{self.subnet}.{i}"
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", hub, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", hub, "link", "set", f"p{i}", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.nodes[node]}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def cmd(self, node: str, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(node), *cmd]

    def teardown(self) -> None:
        for ns in self.names:
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False)
            for pid in out.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def measure(
    lab: Lab, server_node: str, client_node: str, host: str, seconds: float, pings: int
) -> dict[str, Any]:
    port = "5201"
    server = subprocess.Popen(
        lab.cmd(server_node, sys.executable, "-c", SERVER, host, port), stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"server on {host} did not start")
        out = sh(*lab.cmd(client_node, sys.executable, "-c", CLIENT, host, port, str(seconds), str(pings)))
        data = json.loads(out.stdout)
    finally:
        server.kill()
        server.wait()
    rtts = sorted(data["rtts_ms"])
    return {
        "throughput_MBps": data["bytes"] / data["seconds"] / 1e6,
        "rtt_p50_ms": statistics.median(rtts),
        "rtt_p99_ms": rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))],
        "pings": len(rtts),
        "seconds": data["seconds"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (1 s streams, 300 pings, 2 bring-ups)")
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    ap.add_argument("--seconds", type=float, help="length of each throughput stream")
    args = ap.parse_args(argv)
    seconds = args.seconds or (1.0 if args.quick else 4.0)
    pings = 300 if args.quick else 3000
    bringups = 2 if args.quick else 5

    if os.geteuid() != 0 or shutil.which("ip") is None or not Path("/dev/net/tun").exists():
        print("skipped: this benchmark needs root, iproute2 and /dev/net/tun (it creates network namespaces)")
        return 0
    rlinf = str(Path(sys.executable).with_name("rlinf"))
    tmp = Path(tempfile.mkdtemp(prefix="rlinf-net-bench-"))
    secret_path = tmp / "secret"
    secret_path.write_text(secrets.token_hex(16))
    secret_path.chmod(0o600)
    env = {**os.environ, "RLINF_STATE_DIR": str(tmp / "state")}
    lab = Lab(["b", "e1", "e2"])
    results: dict[str, Any] = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "quick": args.quick}

    def up(node: str, name: str, role: str, ip: str, peers: list[str]) -> tuple[dict[str, Any], float]:
        cmd = [
            rlinf,
            "net",
            "up",
            "--name",
            name,
            "--role",
            role,
            "--network-name",
            "bench",
            "--ipv4",
            ip,
            "--secret-file",
            str(secret_path),
            "--dev-name",
            "et0",
            "--detach",
            "--json",
        ]
        for p in peers:
            cmd += ["--peer", p]
        t0 = time.perf_counter()
        out = sh(*lab.cmd(node, *cmd), env=env)
        return json.loads(out.stdout), time.perf_counter() - t0

    def down(name: str) -> None:
        sh(rlinf, "net", "down", "--name", name, env=env, check=False)

    try:
        boot_url = f"tcp://{lab.nodes['b']}:11010"
        up("b", "bench-b", "bootstrap", "10.150.0.1", [])
        up("e2", "bench-e2", "node", "10.150.0.12", [boot_url])
        firsts, walls = [], []
        for _ in range(bringups):
            st, wall = up("e1", "bench-e1", "node", "10.150.0.11", [boot_url])
            firsts.append(st["first_peer_seconds"])
            walls.append(wall)
            down("bench-e1")
        up("e1", "bench-e1", "node", "10.150.0.11", [boot_url])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            st = json.loads(sh(rlinf, "net", "status", "--name", "bench-e1", "--json", env=env).stdout)
            if "10.150.0.12" in {p["ipv4"] for p in st["peers"]}:
                break
            time.sleep(0.3)
        results["bringup"] = {
            "first_peer_s_median": statistics.median(firsts),
            "first_peer_s_all": firsts,
            "cli_up_detach_wall_s_median": statistics.median(walls),
            "runs": bringups,
        }
        paths = {
            "veth (bare, e1 -> b)": ("b", lab.nodes["b"]),
            "overlay direct (e1 -> b)": ("b", "10.150.0.1"),
            "overlay relayed (e1 -> e2 via b)": ("e2", "10.150.0.12"),
        }
        results["paths"] = {}
        for label, (server_node, host) in paths.items():
            results["paths"][label] = measure(lab, server_node, "e1", host, seconds, pings)
    finally:
        for name in ("bench-e1", "bench-e2", "bench-b"):
            down(name)
        lab.teardown()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nEasyTier overlay vs bare veth ({'quick' if args.quick else 'full'} run, {os.cpu_count()} CPUs)")
    print(f"{'path':<36} {'TCP MB/s':>10} {'RTT p50 ms':>11} {'RTT p99 ms':>11}")
    for label, r in results["paths"].items():
        print(f"{label:<36} {r['throughput_MBps']:>10.1f} {r['rtt_p50_ms']:>11.3f} {r['rtt_p99_ms']:>11.3f}")
    b = results["bringup"]
    print(
        f"\nbring-up to first peer: {b['first_peer_s_median'] * 1000:.1f} ms median over {b['runs']} runs "
        f"(in the node); `rlinf net up --detach` wall time {b['cli_up_detach_wall_s_median']:.2f} s median "
        "(process start, imports, the 0.5 s duplicate-address settle)"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

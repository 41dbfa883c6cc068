"""The two ways to run an EasyTier node.

``pyo3`` (default)
    the EasyTier core in this process through ``easytier-pyo3`` (LGPL-3.0; nothing to download).
``easytier-core``
    an ``easytier-core`` binary found on ``PATH``, started with a TOML config file (mode 0600,
    so the secret is never on its command line) and queried through ``easytier-cli``.

Both report snapshots in one shape (:class:`Snapshot`) so the provider's readiness logic,
duplicate-address check and status output do not care which one runs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlinf_core.errors import NetworkError
from rlinf_net_easytier.config import EasyTierConfig, redact, to_toml

__all__ = [
    "Backend",
    "CoreBinaryBackend",
    "Pyo3Backend",
    "Snapshot",
    "make_backend",
    "tun_error_message",
]

TUN_HELP = (
    "creating the TUN device {dev!r} failed: {reason}. An overlay node with a TUN device needs "
    "root or the NET_ADMIN capability and the /dev/net/tun device. In Docker add: --cap-add NET_ADMIN "
    "--cap-add NET_RAW --device /dev/net/tun:/dev/net/tun. Or run without a device with --no-tun "
    "(the node still relays and can be reached, but this host cannot dial overlay addresses)."
)


def tun_error_message(raw: str, dev: str | None) -> str | None:
    """The clear TUN-permission message for a raw core error, or ``None`` if it is something else."""
    low = raw.lower()
    if "operation not permitted" in low or "permission denied" in low:
        reason = "permission denied (this process lacks CAP_NET_ADMIN)"
    elif "inappropriate ioctl" in low or ("no such file" in low and "tun" in low) or "no such device" in low:
        reason = "/dev/net/tun is missing or is not the TUN device"
    else:
        return None
    if "tun" not in low and "device" not in low:
        return None
    return TUN_HELP.format(dev=dev or "", reason=reason)


@dataclass
class Snapshot:
    """What a backend reports about its node at one moment."""

    ipv4: str | None = None
    device: str | None = None
    routes: list[dict[str, Any]] = field(default_factory=list)
    connectors: list[dict[str, Any]] = field(default_factory=list)
    listeners: list[str] = field(default_factory=list)
    raw_peer_count: int = 0
    running: bool = True
    error: str | None = None


def _ipv4_of(value: Any) -> str | None:
    """An overlay address from easytier's JSON: ``{"address": {"addr": int}}``, ``{"addr": int}``,
    an int, or a string with or without prefix."""
    if value is None:
        return None
    if isinstance(value, dict):
        if "address" in value:
            return _ipv4_of(value["address"])
        if "addr" in value:
            return _ipv4_of(value["addr"])
        return None
    if isinstance(value, int):
        return str(ipaddress.IPv4Address(value))
    if isinstance(value, str) and value:
        with contextlib.suppress(ValueError):
            return str(ipaddress.IPv4Interface(value).ip)
    return None


def _num(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def parse_routes(routes: list[dict[str, Any]], peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Routes and connections (easytier's ``routes()`` / ``peers()`` JSON) -> one row per peer:
    ``ipv4, hostname, peer_id, next_hop, cost, latency_ms, loss_rate, direct``.

    ``latency_ms`` and ``loss_rate`` are measured on the direct connection to the peer; for a peer
    reached through another (``next_hop``) they are ``None`` (easytier's ``path_latency`` is a
    routing cost of 500 per hop, not a measurement). ``rlinf net verify`` measures those with ICMP.
    """
    direct: dict[int, tuple[float | None, float | None]] = {}
    for peer in peers:
        best_lat: float | None = None
        loss: float | None = None
        for conn in peer.get("conns", []) or []:
            stats = conn.get("stats") or {}
            lat_us = _num(stats.get("latency_us"))
            if lat_us is not None and (best_lat is None or lat_us / 1000.0 < best_lat):
                best_lat = lat_us / 1000.0
            lr = _num(conn.get("loss_rate", stats.get("loss_rate")))
            if lr is not None:
                loss = lr if loss is None else min(loss, lr)
        pid = peer.get("peer_id")
        if isinstance(pid, int):
            direct[pid] = (best_lat, loss)
    by_id = {r.get("peer_id"): r for r in routes}
    rows = []
    for r in routes:
        pid = r.get("peer_id")
        lat, loss = direct.get(pid, (None, None)) if isinstance(pid, int) else (None, None)
        if lat is None and "latency_ms" in r:  # easytier-cli rows; easytier's own path_latency is a
            lat = _num(r.get("latency_ms"))  # per-hop cost, not a measurement, so it is not used
        hop = r.get("next_hop_peer_id")
        hop_name = None
        if hop is not None and hop != pid and hop in by_id:
            hop_name = by_id[hop].get("hostname")
        rows.append(
            {
                "ipv4": _ipv4_of(r.get("ipv4_addr", r.get("ipv4"))),
                "hostname": r.get("hostname") or "",
                "peer_id": pid,
                "next_hop": hop_name,
                "cost": r.get("cost"),
                "latency_ms": None if lat is None else round(lat, 3),
                "loss_rate": loss,
                "direct": isinstance(pid, int) and pid in direct,
            }
        )
    rows.sort(key=lambda x: tuple(int(p) for p in (x["ipv4"] or "255.255.255.255").split(".")))
    return rows


class Backend:
    """One running EasyTier node (in-process or a child process)."""

    name = "base"

    def __init__(self, cfg: EasyTierConfig) -> None:
        self.cfg = cfg
        self._secret: str | None = None
        self.event_log: deque[dict[str, Any]] = deque(maxlen=200)
        self.device: str | None = None

    def start(self, secret: str) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def snapshot(self) -> Snapshot:
        raise NotImplementedError

    def poll_events(self) -> list[dict[str, Any]]:
        """New events since the last call (also kept in ``event_log``)."""
        return []

    def redact(self, text: str) -> str:
        return redact(text, self._secret)


class Pyo3Backend(Backend):
    """The EasyTier core inside this process (``easytier_pyo3.Node``)."""

    name = "pyo3"

    def __init__(self, cfg: EasyTierConfig) -> None:
        super().__init__(cfg)
        self.node: Any = None

    def start(self, secret: str) -> None:
        try:
            import easytier_pyo3
        except ImportError as err:  # pragma: no cover - it is a dependency
            raise NetworkError(
                f"easytier-pyo3 is not importable ({err}); reinstall rlinf-net-easytier or use --backend easytier-core"
            ) from None
        self._secret = secret
        try:
            self.node = easytier_pyo3.Node(self.cfg.core_config(secret))
        except (ValueError, RuntimeError) as err:
            raise NetworkError(f"easytier rejected the node configuration: {self.redact(str(err))}") from None
        try:
            self.node.start()
        except RuntimeError as err:
            raw = self.redact(str(err))
            with contextlib.suppress(Exception):
                self.node.stop()
            self.node = None
            tun = None if self.cfg.no_tun else tun_error_message(raw, self.cfg.dev_name)
            if tun:
                raise NetworkError(tun) from None
            if "listener" in raw.lower():
                raise NetworkError(
                    f"cannot listen on {', '.join(self.cfg.listen)}: {raw} (is the port in use by another "
                    "node? pick another --listen port)"
                ) from None
            if "busy" in raw.lower() or "exists" in raw.lower():
                raise NetworkError(
                    f"cannot create device {self.cfg.dev_name!r}: {raw}; another node on this host may use "
                    "it: pick another --dev-name"
                ) from None
            raise NetworkError(f"easytier node failed to start: {raw}") from None
        if not self.cfg.no_tun:
            self.device = self.cfg.dev_name

    def stop(self) -> None:
        node, self.node = self.node, None
        if node is not None:
            with contextlib.suppress(Exception):
                node.stop()

    def poll_events(self) -> list[dict[str, Any]]:
        if self.node is None:
            return []
        try:
            events = list(self.node.events())
        except Exception:
            return []
        for ev in events:
            if isinstance(ev, dict) and "TunDeviceReady" in ev:
                self.device = str(ev["TunDeviceReady"])
            self.event_log.append(ev)
        return events

    def snapshot(self) -> Snapshot:
        node = self.node
        if node is None:
            return Snapshot(running=False)
        self.poll_events()
        try:
            info = node.node_info()
            routes = node.routes()
            peers = node.peers()
            connectors = node.connectors()
            listeners = [str(x) for x in node.running_listeners()]
            state = node.state()
            err = node.latest_error()
        except Exception as exc:
            return Snapshot(running=False, error=self.redact(str(exc)))
        return Snapshot(
            ipv4=_ipv4_of(info.get("ipv4_addr")) or self.cfg.address,
            device=self.device if not self.cfg.no_tun else None,
            routes=parse_routes(routes, peers),
            connectors=list(connectors),
            listeners=[x for x in listeners if not x.startswith("ring://")],
            raw_peer_count=len(peers),
            running=state in ("Running", "Starting"),
            error=self.redact(err) if err else None,
        )


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CoreBinaryBackend(Backend):
    """An ``easytier-core`` child process.

    The configuration, secret included, goes into a TOML file of mode 0600 in the state
    directory; the command line is only ``easytier-core --config-file FILE`` and the RPC portal
    on loopback that ``easytier-cli`` queries for status. The file is removed when the node stops.
    """

    name = "easytier-core"

    def __init__(
        self,
        cfg: EasyTierConfig,
        config_path: Path,
        log_path: Path | None = None,
        *,
        core: str | None = None,
        cli: str | None = None,
    ) -> None:
        super().__init__(cfg)
        self.config_path = config_path
        self.log_path = log_path
        self.core = core or shutil.which("easytier-core")
        self.cli = cli or shutil.which("easytier-cli")
        self.rpc_port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        if self.core is None:
            raise NetworkError(
                "--backend easytier-core needs the easytier-core binary on PATH (see the EasyTier installation "
                "guide); the default --backend pyo3 needs nothing besides this package"
            )

    def config_text(self, secret: str, rpc_port: int) -> str:
        data = self.cfg.core_config(secret)
        data = {**data, "rpc_portal": f"127.0.0.1:{rpc_port}"}
        return to_toml(data, header=f"easytier-core config of rlinf overlay instance {self.cfg.name}")

    def command(self) -> list[str]:
        """The full command line: the binary and the config file path; nothing secret."""
        return [str(self.core), "--config-file", str(self.config_path)]

    def cli_command(self, *args: str) -> list[str]:
        if self.cli is None or self.rpc_port is None:
            raise NetworkError("easytier-cli is not on PATH; it is needed to query an easytier-core node")
        return [str(self.cli), "--rpc-portal", f"127.0.0.1:{self.rpc_port}", "--output", "json", *args]

    def start(self, secret: str) -> None:
        from rlinf_net_easytier.state import atomic_write

        self._secret = secret
        self.rpc_port = _free_loopback_port()
        atomic_write(self.config_path, self.config_text(secret, self.rpc_port), mode=0o600)
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        except OSError as err:
            raise NetworkError(f"cannot run {self.core}: {err.strerror or err}") from None
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        time.sleep(0.3)
        if self.proc.poll() is not None:
            tail = _tail(self.log_path) if self.log_path else ""
            tun = None if self.cfg.no_tun else tun_error_message(tail, self.cfg.dev_name)
            raise NetworkError(
                tun or f"easytier-core exited at once with status {self.proc.returncode}: {self.redact(tail)}"
            )
        if not self.cfg.no_tun:
            self.device = self.cfg.dev_name

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            self.config_path.unlink()

    def _query(self, *args: str) -> Any:
        try:
            out = subprocess.run(
                self.cli_command(*args), capture_output=True, text=True, timeout=5, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise NetworkError(f"easytier-cli {' '.join(args)} failed: {err}") from None
        if out.returncode != 0:
            raise NetworkError(f"easytier-cli {' '.join(args)} failed: {self.redact(out.stderr.strip())}")
        return json.loads(out.stdout or "null")

    def snapshot(self) -> Snapshot:
        if self.proc is None or self.proc.poll() is not None:
            return Snapshot(running=False, error="easytier-core is not running")
        try:
            routes = self._query("route") or []
            peers = self._query("peer") or []
            connectors = self._query("connector") or []
        except (NetworkError, ValueError) as err:
            return Snapshot(ipv4=self.cfg.address, device=self.device, error=str(err))
        routes = [r.get("route", r) for r in routes if isinstance(r, dict)]
        peers = [p.get("peer", p) for p in peers if isinstance(p, dict)]
        return Snapshot(
            ipv4=self.cfg.address,
            device=self.device,
            routes=parse_routes(routes, [p for p in peers if isinstance(p, dict)]),
            connectors=[c for c in connectors if isinstance(c, dict)],
            raw_peer_count=len(peers),
        )


def _tail(path: Path | None, n: int = 2000) -> str:
    if path is None:
        return ""
    try:
        return path.read_bytes()[-n:].decode("utf-8", "replace").strip()
    except OSError:
        return ""


def make_backend(cfg: EasyTierConfig, *, state_paths: Any = None) -> Backend:
    """The backend the config asks for."""
    if cfg.backend == "easytier-core":
        from rlinf_net_easytier.state import instance_paths

        paths = state_paths or instance_paths(cfg.name)
        paths.ensure()
        return CoreBinaryBackend(cfg, paths.core_config, paths.log.with_suffix(".core.log"))
    return Pyo3Backend(cfg)

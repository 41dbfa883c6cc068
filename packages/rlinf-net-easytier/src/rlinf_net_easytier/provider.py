"""The ``easytier`` network provider: one EasyTier node managed from Python.

``up`` starts the node and waits until it is really on the overlay:

- a bootstrap is up once its listeners run;
- a node is up once it has a *route* to at least one peer. Routes, not connections, are the
  proof of admission: a node with a wrong secret still sees a connection (``peers()``) for a
  moment on each retry, but the bootstrap never gives it routes.

While waiting it watches for an overlay address that another peer already uses, and when the
timeout expires it says why: the bootstrap could not be reached (with the socket error), or it
was reached but did not admit this node (secret or network name mismatch).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from rlinf_core.errors import NetworkError
from rlinf_core.network import NetworkProvider, NetworkStatus, PeerInfo, RouteInfo
from rlinf_net_easytier.backends import Backend, Snapshot, make_backend
from rlinf_net_easytier.config import EasyTierConfig, load_secret

__all__ = ["EasyTierProvider"]

_POLL_S = 0.05
_DUP_SETTLE_S = 0.5


def _short_reason(text: str) -> str:
    m = re.search(r'message: "([^"]+)"', text)
    if m:
        return m.group(1)
    m = re.search(r'context: "([^"]+)"', text)
    if m:
        return m.group(1)
    return " ".join(text.split())[:200]


class EasyTierProvider(NetworkProvider):
    """An EasyTier overlay node (see the module docstring for what ``up`` waits for)."""

    PLUGIN_NAME: ClassVar[str] = "easytier"
    config_model: ClassVar[type[EasyTierConfig]] = EasyTierConfig

    def __init__(self, config: EasyTierConfig, backend: Backend | None = None) -> None:
        if not isinstance(config, EasyTierConfig):
            config = EasyTierConfig.from_mapping(config)
        super().__init__(config)
        self.config: EasyTierConfig = config
        self.backend = backend
        self.up_seconds: float | None = None
        self.first_peer_seconds: float | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def up(self, *, timeout: float | None = None) -> NetworkStatus:
        cfg = self.config
        timeout = cfg.ready_timeout if timeout is None else timeout
        secret = load_secret(cfg)
        if self.backend is None:
            self.backend = make_backend(cfg)
        t0 = time.monotonic()
        self.backend.start(secret)
        try:
            snap = self._wait_ready(t0, timeout)
        except BaseException:
            self.backend.stop()
            raise
        self.up_seconds = time.monotonic() - t0
        return self._to_status(snap)

    def _wait_ready(self, t0: float, timeout: float) -> Snapshot:
        cfg = self.config
        assert self.backend is not None
        deadline = t0 + timeout
        ready_at: float | None = None
        while True:
            snap = self.backend.snapshot()
            if not snap.running:
                raise NetworkError(
                    f"easytier node {cfg.name!r} stopped while starting: {snap.error or 'no reason given'}"
                )
            self._check_duplicate(snap)
            now = time.monotonic()
            if snap.routes and self.first_peer_seconds is None:
                self.first_peer_seconds = now - t0
            if ready_at is None and (cfg.role == "bootstrap" or snap.routes):
                ready_at = now
            if ready_at is not None and (cfg.role == "bootstrap" or now - ready_at >= _DUP_SETTLE_S):
                return snap
            if now >= deadline:
                raise NetworkError(self._diagnose_timeout(snap, timeout))
            time.sleep(_POLL_S)

    def _check_duplicate(self, snap: Snapshot) -> None:
        mine = self.config.address
        for route in snap.routes:
            if route.get("ipv4") == mine:
                raise NetworkError(
                    f"overlay address {mine} is already used by peer {route.get('hostname')!r} on network "
                    f"{self.config.network_name!r}; every node needs a unique --ipv4"
                )

    def _diagnose_timeout(self, snap: Snapshot, timeout: float) -> str:
        cfg = self.config
        assert self.backend is not None
        events = list(self.backend.event_log)
        connected = [ev for ev in events if "PeerConnAdded" in ev or "PeerAdded" in ev]
        errors: dict[str, str] = {}
        for ev in events:
            payload = ev.get("ConnectError")
            if isinstance(payload, list | tuple) and payload:
                errors[str(payload[0])] = _short_reason(self.backend.redact(str(payload[-1])))
        peers = ", ".join(cfg.peers)
        if connected or snap.raw_peer_count:
            return (
                f"reached {peers} but was not admitted to network {cfg.network_name!r} within {timeout:g} s: "
                f"the peer refused this node. Check that the secret ({cfg.secret_source()}) and --network-name "
                "are the same on every node"
            )
        if errors:
            detail = "; ".join(f"{url}: {why}" for url, why in errors.items())
            return (
                f"could not reach the bootstrap within {timeout:g} s ({detail}). Check the address and port in "
                "--peer, that the bootstrap runs (`rlinf net status` there) and that a firewall lets TCP through"
            )
        status = ", ".join(f"{c.get('url')}: {c.get('status')}" for c in snap.connectors) or peers
        return (
            f"no peer answered within {timeout:g} s ({status}). Check --peer and that the bootstrap is "
            "reachable from this host"
        )

    def down(self, *, timeout: float = 10.0) -> None:
        if self.backend is not None:
            self.backend.stop()

    # -- reporting ----------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        if self.backend is None:
            return Snapshot(running=False)
        return self.backend.snapshot()

    def status(self) -> NetworkStatus:
        return self._to_status(self.snapshot())

    def _to_status(self, snap: Snapshot) -> NetworkStatus:
        peers = [PeerInfo(r["ipv4"], r["hostname"], r["latency_ms"], r["loss_rate"]) for r in snap.routes]
        routes = [
            RouteInfo(r["ipv4"], r["hostname"], r["next_hop"], r["cost"], r["latency_ms"])
            for r in snap.routes
        ]
        return NetworkStatus(
            running=snap.running,
            ipv4=snap.ipv4 if snap.running else None,
            device=snap.device if snap.running else None,
            peers=peers,
            routes=routes,
        )

    def status_dict(self, snap: Snapshot | None = None) -> dict[str, Any]:
        """The JSON status (``rlinf net status --json``): ``ipv4``, ``device``, ``peers`` (``ipv4,
        hostname, latency_ms, loss_rate``), ``routes`` (with ``next_hop`` and ``cost``), plus the
        instance's settings and any problems (such as a duplicate address)."""
        cfg = self.config
        snap = snap or self.snapshot()
        problems = []
        dups = [r for r in snap.routes if r.get("ipv4") == cfg.address]
        for r in dups:
            problems.append(f"peer {r.get('hostname')!r} uses this node's overlay address {cfg.address}")
        if snap.error:
            problems.append(snap.error)
        return {
            "name": cfg.name,
            "backend": cfg.backend,
            "role": cfg.role,
            "network_name": cfg.network_name,
            "running": snap.running,
            "ipv4": snap.ipv4,
            "prefix": cfg.ipv4,
            "device": snap.device,
            "no_tun": cfg.no_tun,
            "private_mode": cfg.private_mode,
            "listeners": snap.listeners,
            "connectors": snap.connectors,
            "peers": [
                {
                    "ipv4": r["ipv4"],
                    "hostname": r["hostname"],
                    "latency_ms": r["latency_ms"],
                    "loss_rate": r["loss_rate"],
                    "direct": r["direct"],
                }
                for r in snap.routes
            ],
            "routes": [
                {k: r[k] for k in ("ipv4", "hostname", "next_hop", "cost", "latency_ms", "peer_id")}
                for r in snap.routes
            ],
            "problems": problems,
        }

    def verify(
        self, peers: Sequence[str], ports: Sequence[int] = (), *, timeout: float = 5.0
    ) -> dict[str, str | None]:
        from rlinf_net_easytier.reach import check_peers

        snap = self.snapshot()
        res = check_peers(peers, ports, routes=snap.routes, tun=not self.config.no_tun, timeout=timeout)
        return {ip: (None if r["ok"] else r["reason"]) for ip, r in res.items()}

    @classmethod
    def bind_address_of(cls, name: str | None = None) -> tuple[str, str]:
        """``(device, ipv4)`` of the running instance ``name`` (``rlinf net up --name NAME``,
        default: the host name, or the only running instance), read from its status file in the
        state directory without importing easytier. :class:`NetworkError` when it is not running,
        not up, or runs with ``--no-tun``."""
        from rlinf_net_easytier.api import overlay_address

        return overlay_address(name)

    def bind_address(self) -> tuple[str, str]:
        cfg = self.config
        if cfg.no_tun:
            raise NetworkError(
                f"overlay instance {cfg.name!r} runs with --no-tun: no device carries {cfg.address}, so Ray and "
                "collectives cannot bind to it; start it with a TUN device"
            )
        snap = self.snapshot()
        return (snap.device or cfg.dev_name, cfg.address)

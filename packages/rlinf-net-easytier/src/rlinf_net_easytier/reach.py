"""Reachability checks through the overlay: ICMP echo and TCP connects to overlay addresses.

Used by ``rlinf net verify`` and :meth:`EasyTierProvider.verify`. ICMP uses an unprivileged
ICMP datagram socket where ``net.ipv4.ping_group_range`` allows it, a raw socket as root, and
otherwise falls back to the overlay's own view (a route to the peer).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["check_peers", "icmp_ping", "parse_peer_list", "parse_port_list", "tcp_probe"]


def parse_peer_list(text: str | Iterable[str]) -> list[str]:
    """``"10.10.0.1,10.10.0.11"`` -> addresses; raises ValueError naming the bad entry."""
    items = text.split(",") if isinstance(text, str) else [x for part in text for x in part.split(",")]
    out = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        try:
            out.append(str(ipaddress.IPv4Address(item)))
        except ValueError:
            raise ValueError(f"{item!r} is not an IPv4 overlay address (e.g. 10.10.0.11)") from None
    if not out:
        raise ValueError("give at least one overlay address, e.g. --peers 10.10.0.1,10.10.0.11")
    return out


def parse_port_list(text: str | Iterable[str] | None) -> list[int]:
    if not text:
        return []
    items = text.split(",") if isinstance(text, str) else [x for part in text for x in part.split(",")]
    out = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        if not item.isdigit() or not 1 <= int(item) <= 65535:
            raise ValueError(
                f"{item!r} is not a TCP port; use numbers from 1 to 65535, e.g. --ports 6379,8265"
            )
        out.append(int(item))
    return out


def tcp_probe(ip: str, port: int, timeout: float) -> str | None:
    """``None`` when a TCP connection to ``ip:port`` opens within ``timeout``, else the reason."""
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"tcp {ip}:{port} timed out after {timeout:g} s"
    except ConnectionRefusedError:
        return f"tcp {ip}:{port} refused (the host is reachable but nothing listens on {port})"
    except OSError as err:
        return f"tcp {ip}:{port}: {err.strerror or err}"


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def icmp_ping(ip: str, timeout: float, count: int = 1, interval: float = 1.0) -> float | None:
    """Best round-trip time in ms of ``count`` ICMP echo replies from ``ip``; ``None`` if none
    came within ``timeout``.

    Like ``ping -w``, an echo goes out every ``interval`` seconds until a reply arrives or
    ``timeout`` passes, so one request lost while the overlay is still building its routes (the
    first seconds after a node joins) does not fail the check.

    Raises :class:`PermissionError` when this process may open neither an ICMP datagram socket
    nor a raw socket (the caller then judges by routes).
    """
    raw = False
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except PermissionError:
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            raw = True
        except PermissionError:
            raise PermissionError("no ICMP socket permitted") from None
    ident = os.getpid() & 0xFFFF
    best: float | None = None
    replies = 0
    sent: dict[int, float] = {}
    deadline = time.perf_counter() + timeout
    with contextlib.closing(sock):
        seq = 0
        while replies < count and time.perf_counter() < deadline:
            seq = (seq + 1) & 0xFFFF
            payload = struct.pack("!d", time.perf_counter()) + b"rlinf-net-verify"
            header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            packet = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, seq) + payload
            sent[seq] = time.perf_counter()
            try:
                sock.sendto(packet, (ip, 0))
            except OSError:
                pass  # no route yet: try again at the next interval
            resend_at = min(deadline, sent[seq] + interval)
            while replies < count:
                left = resend_at - time.perf_counter()
                if left <= 0:
                    break
                sock.settimeout(left)
                try:
                    data, addr = sock.recvfrom(2048)
                except (TimeoutError, OSError):
                    break
                if raw:
                    data = data[(data[0] & 0x0F) * 4 :]
                if addr[0] != ip or len(data) < 8 or data[0] != 0:
                    continue
                _, _, _, _rid, rseq = struct.unpack("!BBHHH", data[:8])
                if rseq not in sent or (raw and _rid != ident):
                    continue
                rtt = (time.perf_counter() - sent.pop(rseq)) * 1000.0
                best = rtt if best is None else min(best, rtt)
                replies += 1
    return best


def check_peers(
    peers: Sequence[str],
    ports: Sequence[int] = (),
    *,
    routes: list[dict[str, Any]] | None = None,
    tun: bool = True,
    timeout: float = 5.0,
) -> dict[str, dict[str, Any]]:
    """Check every peer address; returns ``{ip: {"ok": bool, "reason": str|None, "rtt_ms": float|None,
    "method": str}}``.

    ``routes`` is the local node's route list (from its status), or ``None`` when no rlinf
    instance runs here; a peer without a route is unreachable. With ``tun=False`` (a ``--no-tun``
    node) this host cannot dial overlay addresses, so only the route is checked and port checks
    are reported as impossible.
    """
    by_ip = {r.get("ipv4"): r for r in (routes or [])}
    results: dict[str, dict[str, Any]] = {}
    for ip in peers:
        res: dict[str, Any] = {"ok": True, "reason": None, "rtt_ms": None, "method": ""}
        route = by_ip.get(ip)
        if routes is not None and route is None:
            res.update(
                ok=False,
                reason="no overlay route (the peer is offline, not admitted, or uses another network)",
            )
            results[ip] = res
            continue
        if route is not None:
            res["rtt_ms"] = route.get("latency_ms")
            res["method"] = "route"
        if not tun:
            if ports:
                res.update(
                    ok=False,
                    reason="this node runs with --no-tun, so this host cannot open TCP connections to overlay "
                    "addresses; restart it with a TUN device to check ports",
                )
            results[ip] = res
            continue
        if ports:
            fails = [r for r in (tcp_probe(ip, p, timeout) for p in ports) if r]
            res["method"] = "tcp"
            if fails:
                res.update(ok=False, reason="; ".join(fails))
        else:
            try:
                rtt = icmp_ping(ip, timeout)
            except PermissionError:
                if route is None:
                    res.update(ok=False, reason="cannot send ICMP here and no rlinf instance reports routes")
            else:
                res["method"] = "icmp"
                if rtt is None:
                    res.update(ok=False, reason=f"no ICMP echo reply within {timeout:g} s")
                else:
                    res["rtt_ms"] = round(rtt, 3)
        results[ip] = res
    return results

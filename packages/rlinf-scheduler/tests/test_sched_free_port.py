"""The rendezvous port a worker group is given: free, and outside the kernel's ephemeral range,
so the processes that start between choosing it and rank 0 binding it (Ray workers bind and
connect on ephemeral ports) cannot take it (a CI run once failed with EADDRINUSE)."""

from __future__ import annotations

import socket
from pathlib import Path

from rlinf_scheduler.runtime.cluster import make_free_port


def _ephemeral_low() -> int:
    path = Path("/proc/sys/net/ipv4/ip_local_port_range")
    return int(path.read_text().split()[0]) if path.is_file() else 32768


def test_the_rendezvous_port_is_free_and_below_the_ephemeral_range() -> None:
    free_port = make_free_port()
    ports = {free_port("127.0.0.1") for _ in range(20)}
    assert all(20000 <= p < _ephemeral_low() for p in ports), ports
    assert len(ports) > 1  # drawn at random, so two groups rarely collide
    for p in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", p))  # still free


def test_a_busy_port_is_not_handed_out() -> None:
    free_port = make_free_port()
    held = []
    try:
        for _ in range(50):
            p = free_port("127.0.0.1")
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", p))
            s.listen()
            held.append(s)
        assert len({s.getsockname()[1] for s in held}) == len(held)
    finally:
        for s in held:
            s.close()

"""The runtime's one door to the scheduler's transport: every ``rlinf_scheduler`` import of the
training runtime is here (weights published and fetched by name, the direct env <-> rollout links,
this node's address, the routing of env slots over rollout ranks), so moving them behind
``rlinf_core``'s scheduler interface is a change of this file alone.

Imports nothing heavy at import time: the scheduler's modules load on first use, inside the
processes that use them.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["connect_weights", "create_weights", "node_address", "open_link", "route_plan"]


def create_weights(name: str, timeout: float) -> Any:
    """A new weight broadcast ``name`` (the learner's rank 0): ``publish(state_dict, version=v)``."""
    from rlinf_scheduler.weights import WeightBroadcast

    return WeightBroadcast.create(name, default_timeout=timeout)


def connect_weights(name: str, timeout: float, connect_timeout: float | None = None) -> Any:
    """The weight broadcast ``name``, waiting ``connect_timeout`` (default ``timeout``) for it to
    exist: ``fetch(min_version=..., timeout=...)`` and ``fetch_if_newer(version)``."""
    from rlinf_scheduler.weights import WeightBroadcast

    wait = timeout if connect_timeout is None else connect_timeout
    return WeightBroadcast.connect(name, timeout=wait, default_timeout=timeout)


def open_link(sock: socket.socket, timeout: float, peer: str) -> Any:
    """An authenticated frame link over a connected socket (:class:`rlinf_scheduler.link.Link`:
    ``send``, ``recv(what)``, ``send_hello``, ``recv_hello``, ``close``)."""
    from rlinf_scheduler.link import Link as _Link

    return _Link(sock, timeout, peer)


def node_address() -> str:
    """The address this node's Ray uses (an overlay's address when Ray is bound to one);
    ``127.0.0.1`` outside Ray (a worker tested on its own)."""
    try:
        from rlinf_scheduler.channel import node_address as _address

        return _address()
    except Exception:
        return "127.0.0.1"


def route_plan(batch_size: int, src_size: int, dst_size: int) -> list[Any]:
    """Contiguous shards of ``batch_size`` slots from ``src_size`` ranks to ``dst_size`` ranks
    (each with ``src``, ``dst``, ``src_offset``, ``dst_offset``, ``size``)."""
    from rlinf_scheduler.routing import route_plan as _plan

    return _plan(batch_size, src_size, dst_size)

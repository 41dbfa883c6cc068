"""Public functions for other rlinf packages (the Ray runtime): find the overlay address of a
running instance without importing easytier."""

from __future__ import annotations

from typing import Any

from rlinf_core.errors import NetworkError
from rlinf_net_easytier.config import default_instance_name
from rlinf_net_easytier.state import list_instances, read_status

__all__ = ["instance_status", "overlay_address", "resolve_instance_name"]


def resolve_instance_name(name: str | None = None) -> str:
    """``name``, or the default one (the host name); when that one is not running but exactly one
    other instance is, that instance."""
    if name:
        return name
    default = default_instance_name()
    running = list_instances()
    if default not in running and len(running) == 1:
        return running[0]
    return default


def instance_status(name: str | None = None) -> dict[str, Any]:
    """The last status a running instance reported (what ``rlinf net status --json`` prints):
    ``ipv4``, ``device``, ``peers`` (``ipv4``, ``hostname``, ``latency_ms``...), ``routes``,
    ``state``, ``problems``... Raises :class:`NetworkError` when it is not running."""
    return read_status(resolve_instance_name(name))


def overlay_address(name: str | None = None) -> tuple[str, str]:
    """``(device, ipv4)`` of running overlay instance ``name`` (default: see
    :func:`resolve_instance_name`): what Ray binds to (``--node-ip-address ipv4``) and what
    ``RLINF_COMM_NET_DEVICES`` names.

    Raises :class:`~rlinf_core.errors.NetworkError` when the instance is not running, has not come
    up, or has no TUN device (``--no-tun``: nothing on this host carries the address).
    """
    status = instance_status(name)
    label = status.get("name", name)
    if status.get("state") != "up":
        raise NetworkError(
            f"overlay instance {label!r} is {status.get('state', 'not up')}"
            + (f": {status['error']}" if status.get("error") else "")
        )
    if status.get("no_tun") or not status.get("device"):
        raise NetworkError(
            f"overlay instance {label!r} runs with --no-tun: no device carries {status.get('ipv4')}, so Ray and "
            "collectives cannot bind to it; restart it with a TUN device (drop --no-tun)"
        )
    if not status.get("ipv4"):
        raise NetworkError(f"overlay instance {label!r} reports no overlay address yet")
    return str(status["device"]), str(status["ipv4"])

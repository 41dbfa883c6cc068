"""rlinf_net_easytier: an EasyTier overlay for rlinf cloud-edge clusters.

Public API (importing it does not import easytier):

- :func:`overlay_address` -> ``(device, ipv4)`` of a running instance, for binding Ray;
- :func:`instance_status` -> the JSON status of a running instance;
- :class:`EasyTierConfig` and :class:`EasyTierProvider` (the ``easytier`` network provider).
"""

from __future__ import annotations

import importlib.metadata as _md

from rlinf_net_easytier.api import instance_status, overlay_address
from rlinf_net_easytier.config import EasyTierConfig
from rlinf_net_easytier.state import list_instances, state_dir

try:
    __version__ = _md.version("rlinf-net-easytier")
except _md.PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "EasyTierConfig",
    "EasyTierProvider",
    "instance_status",
    "list_instances",
    "overlay_address",
    "state_dir",
]


def __getattr__(name: str):  # the provider module is imported on first use
    if name == "EasyTierProvider":
        from rlinf_net_easytier.provider import EasyTierProvider

        return EasyTierProvider
    raise AttributeError(name)

"""rlinf-core: the small core every rlinf package builds on.

It defines the interfaces (:class:`Worker`, :class:`Channel`, :class:`HardwarePlugin`,
:class:`NetworkProvider`, :class:`Scheduler`, :class:`Algorithm`, :class:`WeightSync`,
:class:`Links`), the pluggy hook specifications, the plugin manager factory and registries,
configuration helpers, the error hierarchy and the ``rlinf`` CLI host. Importing it pulls in neither torch nor ray nor any robot or
network SDK.
"""

from __future__ import annotations

import importlib.metadata as _md

from rlinf_core.algorithm import Algorithm
from rlinf_core.channel import DEFAULT_KEY, Channel, LocalChannel
from rlinf_core.envs import EnvSpec
from rlinf_core.errors import (
    ChannelClosed,
    ChannelEmpty,
    ChannelError,
    ChannelFull,
    ChannelTimeout,
    ConfigError,
    ConfigProblem,
    HardwareError,
    NetworkError,
    PluginError,
    RlinfError,
    SchedulerError,
    WaitTimeout,
)
from rlinf_core.hardware import HardwareConfig, HardwarePlugin, HardwareResource
from rlinf_core.links import Link, LinkListener, Links, LocalLinks
from rlinf_core.network import NetworkProvider, NetworkStatus, PeerInfo, RouteInfo
from rlinf_core.plugins import PluginHost, Registry, hookimpl, load_plugins
from rlinf_core.rollout import RolloutEngine
from rlinf_core.scheduler import ComponentPlan, PlacementPlan, ProcessPlan, Scheduler
from rlinf_core.weights import LocalWeightSync, WeightSync, WeightSyncStats
from rlinf_core.worker import GroupCall, Worker, WorkerGroup, WorkerInfo

try:
    __version__ = _md.version("rlinf-core")
except _md.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_KEY",
    "Algorithm",
    "Channel",
    "ChannelClosed",
    "ChannelEmpty",
    "ChannelError",
    "ChannelFull",
    "ChannelTimeout",
    "ComponentPlan",
    "ConfigError",
    "ConfigProblem",
    "EnvSpec",
    "GroupCall",
    "HardwareConfig",
    "HardwareError",
    "HardwarePlugin",
    "HardwareResource",
    "Link",
    "LinkListener",
    "Links",
    "LocalChannel",
    "LocalLinks",
    "LocalWeightSync",
    "NetworkError",
    "NetworkProvider",
    "NetworkStatus",
    "PeerInfo",
    "PlacementPlan",
    "PluginError",
    "PluginHost",
    "ProcessPlan",
    "Registry",
    "RlinfError",
    "RolloutEngine",
    "RouteInfo",
    "Scheduler",
    "SchedulerError",
    "WaitTimeout",
    "WeightSync",
    "WeightSyncStats",
    "Worker",
    "WorkerGroup",
    "WorkerInfo",
    "__version__",
    "hookimpl",
    "load_plugins",
]

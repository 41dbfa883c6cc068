"""The network-provider interface: an overlay network (such as EasyTier) that gives every node of
a cloud-edge cluster a reachable address, so Ray and collectives can bind to it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel

from rlinf_core.errors import NetworkError

__all__ = ["NetworkProvider", "NetworkStatus", "PeerInfo", "RouteInfo"]


@dataclass(frozen=True)
class PeerInfo:
    """A peer of this node on the overlay."""

    ipv4: str | None
    hostname: str
    latency_ms: float | None = None
    loss_rate: float | None = None


@dataclass(frozen=True)
class RouteInfo:
    """A route to an overlay address: through which peer, at what cost."""

    ipv4: str | None
    hostname: str
    next_hop: str | None = None
    cost: int | None = None
    latency_ms: float | None = None


@dataclass(frozen=True)
class NetworkStatus:
    """What ``rlinf net status`` shows: this node's overlay address and device, its peers and routes."""

    running: bool
    ipv4: str | None = None
    device: str | None = None
    peers: list[PeerInfo] = field(default_factory=list)
    routes: list[RouteInfo] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class NetworkProvider(ABC):
    """Base class of an overlay network provider.

    ``PLUGIN_NAME`` is the name users select (``rlinf net up --provider easytier``);
    ``config_model`` validates the provider's settings. An instance manages one overlay node.
    """

    PLUGIN_NAME: ClassVar[str]
    config_model: ClassVar[type[BaseModel]]

    def __init__(self, config: BaseModel) -> None:
        self.config = config

    @abstractmethod
    def up(self, *, timeout: float = 30.0) -> NetworkStatus:
        """Bring this node onto the overlay; return once it is up or raise
        :class:`~rlinf_core.errors.NetworkError` (naming what it waited for) after ``timeout``."""

    @abstractmethod
    def down(self, *, timeout: float = 10.0) -> None:
        """Leave the overlay and release its device. Harmless when not up."""

    @abstractmethod
    def status(self) -> NetworkStatus:
        """This node's overlay address, device, peers and routes."""

    @abstractmethod
    def verify(
        self, peers: Sequence[str], ports: Sequence[int] = (), *, timeout: float = 5.0
    ) -> dict[str, str | None]:
        """Check that each peer address (and each TCP port on it) is reachable through the
        overlay. Returns ``{peer: None}`` for a reachable peer and ``{peer: reason}`` otherwise."""

    @abstractmethod
    def bind_address(self) -> tuple[str, str]:
        """``(device, ipv4)`` that Ray (``--node-ip-address``) and collectives
        (``RLINF_COMM_NET_DEVICES``) should bind to on this node."""

    @classmethod
    def bind_address_of(cls, name: str | None = None) -> tuple[str, str]:
        """``(device, ipv4)`` of this provider's instance ``name`` that is already running on this
        host (started by another process, e.g. ``rlinf net up --detach --name NAME``); ``None``
        means the provider's default instance. This is how ``rlinf node start --network PROVIDER``
        binds Ray without owning the overlay node.

        Raises :class:`~rlinf_core.errors.NetworkError` saying why when the instance is not
        running, not up yet, or has no device that carries its address. Providers that cannot
        look up running instances keep this default, which says so.
        """
        raise NetworkError(
            f"network provider {getattr(cls, 'PLUGIN_NAME', cls.__name__)!r} cannot look up a running "
            "instance by name; bind Ray with --node-ip and --net-device instead"
        )

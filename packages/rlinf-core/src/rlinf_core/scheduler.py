"""The scheduler interface: turns a validated cluster configuration into running components."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel

from rlinf_core.channel import Channel
from rlinf_core.worker import Worker, WorkerGroup

__all__ = ["Scheduler"]


class Scheduler(ABC):
    """Base class of a runtime that places components on a cluster (``ray`` is the one shipped).

    ``PLUGIN_NAME`` is what ``runner.scheduler`` selects. An instance owns one cluster
    connection: :meth:`start` attaches to (or starts) the cluster and checks it against the
    configuration, :meth:`launch` starts a component's processes where the placement says,
    :meth:`channel` creates or connects to a named channel, :meth:`shutdown` stops what it started.
    """

    PLUGIN_NAME: ClassVar[str]
    config_model: ClassVar[type[BaseModel] | None] = None

    @abstractmethod
    def start(self, config: Any, *, timeout: float | None = None) -> None:
        """Attach to or start the cluster described by ``config`` (the run configuration)."""

    @abstractmethod
    def launch(self, component: str, worker_cls: type[Worker], *args: Any, **kwargs: Any) -> WorkerGroup:
        """Start one process of ``worker_cls`` per placement of ``component``; ``args`` and
        ``kwargs`` go to every process's constructor."""

    @abstractmethod
    def channel(self, name: str, *, maxsize: int = 0, **options: Any) -> Channel:
        """Create the channel ``name``, or connect to it if it exists."""

    @abstractmethod
    def shutdown(self) -> None:
        """Stop every process and channel this scheduler started."""

"""The Worker interface: one process of a component (actor, rollout, env, reward, ...).

A user subclasses :class:`Worker`; a scheduler launches one process per placement and a
:class:`WorkerGroup` dispatches method calls to all ranks or a subset, returning results in rank
order. Inside a worker, :attr:`Worker.info` says who and where it is.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["GroupCall", "Worker", "WorkerGroup", "WorkerInfo"]

T = TypeVar("T")


@dataclass(frozen=True)
class WorkerInfo:
    """Identity and placement of one worker process.

    Attributes:
        component: the component name (``actor``, ``rollout``...).
        rank: the process rank within the component, ``0..world_size-1``.
        world_size: number of processes of the component.
        node_rank: the node (``RLINF_NODE_RANK``) the process runs on.
        local_rank: the process's index among the component's processes on its node.
        local_world_size: number of the component's processes on that node.
        hardware: plugin-defined facts of the hardware it was placed on (robot IP, cameras...).
    """

    component: str = "main"
    rank: int = 0
    world_size: int = 1
    node_rank: int = 0
    local_rank: int = 0
    local_world_size: int = 1
    hardware: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerInfo:
        """Read the identity a launcher exported (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
        ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``RLINF_COMPONENT``); missing values default to a
        single process."""
        env = os.environ if env is None else env
        return cls(
            component=env.get("RLINF_COMPONENT", "main"),
            rank=int(env.get("RANK", 0)),
            world_size=int(env.get("WORLD_SIZE", 1)),
            node_rank=int(env.get("NODE_RANK", env.get("RLINF_NODE_RANK", 0))),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", 1)),
        )


class Worker:
    """Base class of a component's processes.

    Subclass it and add methods; call them on every rank through a :class:`WorkerGroup`. The
    constructor takes whatever arguments your subclass defines; the launcher binds the
    :class:`WorkerInfo` before :meth:`setup` runs. Outside a launcher (a unit test, a notebook)
    the info comes from the environment, which defaults to a single process.
    """

    _rlinf_info: WorkerInfo | None = None

    @property
    def info(self) -> WorkerInfo:
        if self._rlinf_info is None:
            self._rlinf_info = WorkerInfo.from_env()
        return self._rlinf_info

    def bind(self, info: WorkerInfo) -> None:
        """Called by the launcher once, before :meth:`setup`."""
        self._rlinf_info = info

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def component(self) -> str:
        return self.info.component

    def setup(self) -> None:
        """Called once after launch and :meth:`bind`; allocate models, envs, channels here."""

    def teardown(self) -> None:
        """Called once before the process exits normally; release what :meth:`setup` took."""


class GroupCall(ABC, Generic[T]):
    """A pending method call on several ranks. Results come back in rank order."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> list[T]:
        """Block until every rank answered; raise the first failure (naming component, rank and
        node, with the remote traceback) or :class:`~rlinf_core.errors.WaitTimeout`."""

    @abstractmethod
    def __await__(self) -> Any:  # pragma: no cover - interface
        """``await call`` is the asyncio form of :meth:`wait`."""


class WorkerGroup(ABC):
    """All processes of one component. ``group.method(*args)`` calls ``method`` on every rank and
    returns a :class:`GroupCall`; ``group.on([0, 2]).method(...)`` calls a subset."""

    component: str
    world_size: int

    @abstractmethod
    def on(self, ranks: int | Sequence[int]) -> WorkerGroup:
        """A view of this group restricted to ``ranks``."""

    @abstractmethod
    def call(self, method: str, *args: Any, **kwargs: Any) -> GroupCall[Any]:
        """Call ``method`` on every rank of this view."""

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)

        def _call(*args: Any, **kwargs: Any) -> GroupCall[Any]:
            return self.call(method, *args, **kwargs)

        return _call

    @abstractmethod
    def shutdown(self, *, timeout: float = 30.0) -> None:
        """Stop every process of the group (teardown first, then kill what does not exit)."""

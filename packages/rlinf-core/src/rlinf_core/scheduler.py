"""The scheduler interface: turns a validated cluster configuration into running components.

Besides launching workers and creating channels, a scheduler gives an algorithm what it needs
of the cluster through this interface alone, so any scheduler plugin can run any algorithm:
the run's weight sync (:meth:`Scheduler.weight_sync`), direct links between workers
(:meth:`Scheduler.links`) and, before anything starts, the placement plan a dry run prints
(:meth:`Scheduler.plan_placement`, a class method). A plan is read through the :class:`PlacementPlan`,
:class:`ComponentPlan` and :class:`ProcessPlan` protocols.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel

from rlinf_core.channel import Channel
from rlinf_core.errors import SchedulerError
from rlinf_core.links import Links
from rlinf_core.weights import WeightSync
from rlinf_core.worker import Worker, WorkerGroup

__all__ = ["ComponentPlan", "PlacementPlan", "ProcessPlan", "Scheduler"]


@runtime_checkable
class ProcessPlan(Protocol):
    """Where one process of a component runs (what a dry run shows of it)."""

    component: str
    rank: int
    node_rank: int
    node_group: str
    hardware_type: str
    hardware_ranks: tuple[int, ...]
    local_hardware_ranks: tuple[int, ...]
    visible_accelerators: tuple[int, ...]
    """The accelerator indices of its node that the process may see."""
    python: str | None
    env: Mapping[str, str]


@runtime_checkable
class ComponentPlan(Protocol):
    """Every process of one component, in rank order (``len``, iteration and ``[rank]``)."""

    name: str
    node_groups: tuple[str, ...]
    placement: Any
    processes: tuple[ProcessPlan, ...]

    @property
    def world_size(self) -> int: ...

    def __iter__(self) -> Iterator[ProcessPlan]: ...

    def __len__(self) -> int: ...

    def __getitem__(self, rank: int) -> ProcessPlan: ...


@runtime_checkable
class PlacementPlan(Protocol):
    """Every component's processes (``plan["actor"]`` is a :class:`ComponentPlan`)."""

    num_nodes: int
    components: Mapping[str, ComponentPlan]

    def __getitem__(self, name: str) -> ComponentPlan: ...

    def __contains__(self, name: object) -> bool: ...

    def to_dict(self) -> dict[str, Any]:
        """``{"num_nodes": N, "components": {name: [process, ...]}}`` (JSON-ready)."""
        ...

    def render(self) -> str:
        """The plan as a text table, one row per process (``rlinf train --dry-run``)."""
        ...


class Scheduler(ABC):
    """Base class of a runtime that places components on a cluster (``ray`` is the one shipped).

    ``PLUGIN_NAME`` is what ``runner.scheduler`` selects. An instance owns one cluster
    connection: :meth:`start` attaches to (or starts) the cluster and checks it against the
    configuration, :meth:`launch` starts a component's processes where the placement says,
    :meth:`channel` creates or connects to a named channel, :meth:`weight_sync` and
    :meth:`links` give the run's weight sync and links, :meth:`shutdown` stops what it started.
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

    def weight_sync(
        self,
        name: str,
        *,
        mode: str = "auto",
        devices: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        **options: Any,
    ) -> WeightSync:
        """Create the versioned weights ``name`` of a run and return its handle.

        Called by the driver, once per publisher (a learner restarted from a checkpoint
        publishes under a new name). The handle is passed to the publisher (the learner's rank
        0) and the consumers as a call argument and used there (see
        :class:`~rlinf_core.weights.WeightSync`); :meth:`shutdown` destroys it.

        Parameters:
            name: unique within the cluster's namespace.
            mode: one of :data:`~rlinf_core.weights.WEIGHT_SYNC_MODES` (``rollout.weight_sync``).
            devices: each member's planned device (``{"actor rank 0": "cuda:0", "rollout rank 0":
                "cuda:1", ...}``), which ``auto`` decides by and ``collective`` checks
                (:func:`~rlinf_core.weights.resolve_weight_sync_mode`); ``None``: unknown (``auto``
                then picks ``object_store``).
            timeout: the handle's default timeout of every wait, in seconds.
            options: scheduler-specific (bucket size, where the registry lives...).

        Raises :class:`~rlinf_core.errors.ConfigError` for a mode the devices do not allow and
        :class:`~rlinf_core.errors.SchedulerError` when this scheduler has no weight sync.
        """
        raise SchedulerError(f"the {self.PLUGIN_NAME!r} scheduler provides no weight sync")

    def links(self, secret: str) -> Links:
        """The run's :class:`~rlinf_core.links.Links` factory, authenticated with ``secret``
        (a random string the driver makes per run; it travels only as a call argument).

        Raises :class:`~rlinf_core.errors.SchedulerError` when this scheduler has no links."""
        raise SchedulerError(f"the {self.PLUGIN_NAME!r} scheduler provides no direct links")

    @classmethod
    def plan_placement(
        cls, config: Any, inventory: Any = None, *, hardware: Any = None
    ) -> PlacementPlan | None:
        """Plan every component of ``config`` (a run configuration or its ``cluster`` section)
        without starting anything: ``rlinf train --dry-run`` and ``rlinf cluster plan``.

        ``inventory`` says what the machines have: its YAML mapping (``{nodes: [{node_ranks:
        "0-1", gpus: 8}]}``), a whole number (every node has that many accelerators:
        ``--gpus-per-node``) or ``None`` (none). ``hardware`` is where hardware types are looked
        up (a PluginHost or a Registry). Returns ``None`` for a scheduler that places nothing
        (one that runs every component in the driver's process). Raises
        :class:`~rlinf_core.errors.ConfigError` listing every problem with its YAML path.
        """
        return None

"""The ``ray`` scheduler plugin: :class:`RayScheduler` implements :class:`rlinf_core.Scheduler`.

This module imports without Ray (the plugin hook returns the class); Ray is imported when a
scheduler starts. Typical use by a runner::

    scheduler = RayScheduler()
    scheduler.start(run_config)            # attach or start Ray, check node ranks, plan placement
    actor = scheduler.launch("actor", ActorWorker, model_cfg)
    rollout = scheduler.launch("rollout", RolloutWorker, model_cfg)
    actor.train_step(batch).wait(timeout=600)
    scheduler.shutdown()

It also gives the run's weight sync (:meth:`RayScheduler.weight_sync`: ``collective`` or
``object_store``, :mod:`rlinf_scheduler.weights`), the direct links between workers
(:meth:`RayScheduler.links`, :class:`~rlinf_scheduler.link.SocketLinks`) and, without starting
anything, the placement plan (:meth:`RayScheduler.plan_placement`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rlinf_core.channel import Channel
from rlinf_core.errors import ConfigError, SchedulerError
from rlinf_core.scheduler import Scheduler
from rlinf_core.weights import WeightSync
from rlinf_core.worker import Worker

if TYPE_CHECKING:
    from rlinf_scheduler.link import SocketLinks
    from rlinf_scheduler.placement import Plan
    from rlinf_scheduler.runtime.cluster import Cluster
    from rlinf_scheduler.runtime.worker_group import RayWorkerGroup

__all__ = ["RayScheduler", "cluster_section"]


def cluster_section(config: Any) -> Any:
    """The ``cluster`` section of a run configuration (a mapping, an object with ``.cluster``, or
    the section itself)."""
    if isinstance(config, Mapping):
        if "cluster" in config:
            return config["cluster"]
        if "num_nodes" in config:
            return config
        raise ConfigError(
            f"the run configuration has no `cluster` section (top-level keys: {', '.join(map(str, config)) or 'none'})",
            "cluster",
        )
    section = getattr(config, "cluster", None)
    if section is not None:
        return section
    if getattr(config, "num_nodes", None) is not None:
        return config
    raise ConfigError(f"cannot find a `cluster` section in {type(config).__name__}", "cluster")


class RayScheduler(Scheduler):
    """Places components on a Ray cluster (embedded on one machine, attached on many).

    Parameters:
        address: a Ray address (default: ``RAY_ADDRESS``, a cluster on this machine, else embedded).
        hardware: where hardware types are looked up for planning (a PluginHost or Registry;
            ``None`` loads the installed plugins when the config names a hardware type).
        ray_init: extra ``ray.init`` arguments (e.g. ``num_cpus`` of an embedded Ray).
    """

    PLUGIN_NAME: ClassVar[str] = "ray"

    def __init__(
        self, *, address: str | None = None, hardware: Any = None, ray_init: Mapping[str, Any] | None = None
    ) -> None:
        self.address = address
        self.hardware = hardware
        self.ray_init = dict(ray_init or {})
        self.cluster: Cluster | None = None
        self.plan: Plan | None = None
        self._channels: dict[str, Channel] = {}
        self._weights: dict[str, WeightSync] = {}

    def start(self, config: Any, *, timeout: float | None = None) -> None:
        """Attach to or start Ray, wait for ``cluster.num_nodes`` ranked nodes (up to ``timeout``,
        default ``RLINF_CLUSTER_TIMEOUT``), and plan every component against the probed nodes."""
        from rlinf_scheduler.runtime.cluster import Cluster, section_num_nodes

        section = cluster_section(config)
        if hasattr(section, "model_dump") and not isinstance(section, Mapping):
            section = section.model_dump()
        if self.cluster is not None:
            raise SchedulerError("this scheduler is already started; call shutdown() first")
        from rlinf_core.cluster import resolve_cluster

        # Report every configuration problem before touching Ray (the GPU counts come later,
        # from the probed nodes).
        resolve_cluster(section, self.hardware)
        cluster = Cluster(
            section_num_nodes(section), address=self.address, timeout=timeout, ray_init=self.ray_init
        )
        try:
            self.plan = cluster.plan(section, hardware=self.hardware)
        except BaseException:
            cluster.shutdown()
            raise
        self.cluster = cluster

    def _require(self) -> Cluster:
        if self.cluster is None or self.plan is None:
            raise SchedulerError("the scheduler is not started; call start(config) first")
        return self.cluster

    def launch(self, component: str, worker_cls: type[Worker], *args: Any, **kwargs: Any) -> RayWorkerGroup:
        """Start ``worker_cls`` on every planned process of ``component`` (constructor arguments
        ``args``/``kwargs``); returns once every process ran ``__init__`` and ``setup``."""
        cluster = self._require()
        assert self.plan is not None
        if component not in self.plan:
            raise ConfigError(
                f"component {component!r} has no placement; placed: {', '.join(self.plan.components) or 'none'}",
                f"cluster.component_placement.{component}",
            )
        return cluster.launch(self.plan[component], worker_cls, *args, **kwargs)

    def channel(self, name: str, *, maxsize: int = 0, **options: Any) -> Channel:
        """Create the Ray-backed channel ``name`` or connect to it
        (:class:`rlinf_scheduler.channel.RayChannel`).

        Options: ``node_rank`` puts the channel actor on that node (default: the driver's node);
        ``distributed=True`` makes a :class:`~rlinf_scheduler.channel.DistributedRayChannel` (one
        replica per node); the rest (``default_timeout``, ``detached``...) go to ``create``.
        """
        cluster = self._require()
        if name in self._channels:
            return self._channels[name]
        from rlinf_scheduler.channel import DistributedRayChannel, RayChannel

        node_rank = options.pop("node_rank", None)
        if node_rank is not None:
            options["node_id"] = cluster.node(int(node_rank)).node_id
        factory = DistributedRayChannel if options.pop("distributed", False) else RayChannel
        ch = factory.create(name, maxsize=maxsize, **options)
        self._channels[name] = ch
        return ch

    def weight_sync(
        self,
        name: str,
        *,
        mode: str = "auto",
        devices: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        **options: Any,
    ) -> WeightSync:
        """Create the weights ``name`` (:meth:`rlinf_core.Scheduler.weight_sync`):
        :class:`~rlinf_scheduler.weights.WeightBroadcast` for ``object_store``,
        :class:`~rlinf_scheduler.weights.CollectiveWeightSync` (NCCL when every member in
        ``devices`` is on CUDA, else Gloo) for ``collective``.

        Options: ``node_rank`` puts the registry actor on that node (default: the driver's);
        ``bucket_bytes``: the collective's bucket size (default 64 MiB). :meth:`shutdown`
        destroys every weight sync created here.
        """
        cluster = self._require()
        if name in self._weights:
            raise SchedulerError(f"weights {name!r} exist already; a new publisher needs a new name")
        from rlinf_scheduler.weights import make_weight_sync

        node_rank = options.pop("node_rank", None)
        node_id = cluster.node(int(node_rank)).node_id if node_rank is not None else None
        unknown = sorted(set(options) - {"bucket_bytes", "namespace"})
        if unknown:
            raise SchedulerError(
                f"unknown weight sync option(s) {', '.join(unknown)}; valid: node_rank, bucket_bytes, namespace"
            )
        handle = make_weight_sync(
            name, mode=mode, devices=devices, timeout=timeout, node_id=node_id, **options
        )
        self._weights[name] = handle
        return handle

    def links(self, secret: str) -> SocketLinks:
        """The run's :class:`~rlinf_scheduler.link.SocketLinks` (TCP on each node's Ray address)."""
        from rlinf_scheduler.link import SocketLinks

        return SocketLinks(secret)

    @classmethod
    def plan_placement(cls, config: Any, inventory: Any = None, *, hardware: Any = None) -> Plan:
        """The placement plan of ``config`` (:func:`rlinf_scheduler.placement.plan_placement`);
        ``inventory``: its YAML mapping, an :class:`~rlinf_scheduler.placement.Inventory`, a
        whole number of accelerators on every node, or ``None``."""
        from rlinf_scheduler.placement import Inventory, plan_placement

        if isinstance(inventory, int) and not isinstance(inventory, bool):
            inventory = Inventory.uniform(inventory)
        return plan_placement(cluster_section(config), inventory, hardware=hardware)

    def shutdown(self) -> None:
        """Destroy the weight syncs and close the channels it created, stop every worker group
        and disconnect from Ray."""
        for handle in self._weights.values():
            try:
                handle.destroy()
            except Exception:  # pragma: no cover - best effort
                pass
        self._weights.clear()
        for ch in self._channels.values():
            try:
                ch.close()
            except Exception:  # pragma: no cover - best effort
                pass
        self._channels.clear()
        if self.cluster is not None:
            self.cluster.shutdown()
        self.cluster = None
        self.plan = None

    def __enter__(self) -> RayScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

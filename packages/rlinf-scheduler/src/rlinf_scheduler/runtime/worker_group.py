"""Worker groups on Ray: one actor per planned process of a component.

:func:`launch_worker_group` turns a :class:`~rlinf_scheduler.placement.ComponentPlacement` into
running actors:

- each actor is pinned to its node with hard node affinity;
- accelerators are assigned through the visibility variable (``CUDA_VISIBLE_DEVICES``,
  ``HIP_VISIBLE_DEVICES``, ``ASCEND_RT_VISIBLE_DEVICES``), never through Ray's GPU resources, so
  components placed on the same GPU can share it;
- its environment is the plan's env vars plus ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
  ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``MASTER_ADDR``/``MASTER_PORT`` (a free port on rank 0's
  node) and ``RLINF_COMPONENT``; ``RLINF_COMM_NET_DEVICES`` (the node's or the plan's) fills
  ``GLOO_SOCKET_IFNAME`` and ``NCCL_SOCKET_IFNAME`` where those are unset;
- ``python_interpreter_path`` becomes the actor's interpreter, after checking on that node that it
  exists;
- unless code sync ships the code, each actor compares its rlinf versions with the driver's.

:class:`RayWorkerGroup` dispatches ``group.method(...)`` to every rank and
``group.on(ranks).method(...)`` to some; :class:`RayGroupCall` returns results in rank order through
``.wait(timeout)`` or ``await``. A failure reaches the driver as one :class:`WorkerError` that names
the component, rank, node and method and carries the remote traceback of the root cause; the
group's other actors are then stopped, so secondary "actor died" errors never hide it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rlinf_core.errors import ConfigError, PeerLost, SchedulerError, WaitTimeout
from rlinf_core.worker import GroupCall, Worker, WorkerGroup, WorkerInfo
from rlinf_scheduler.runtime._ray import import_ray
from rlinf_scheduler.runtime.node_info import NET_DEVICES_ENV, NODE_RANK_ENV, NodeInfo

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rlinf_scheduler.placement import ComponentPlacement, ProcessPlacement
    from rlinf_scheduler.runtime.code_sync import CodeSync

__all__ = [
    "VISIBILITY_VARS",
    "LaunchCluster",
    "RayGroupCall",
    "RayWorkerGroup",
    "WorkerError",
    "launch_worker_group",
    "process_env",
]

log = logging.getLogger("rlinf.scheduler")

VISIBILITY_VARS: Mapping[str, tuple[str, ...]] = {
    "GPU": ("CUDA_VISIBLE_DEVICES",),
    "AMD": ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "NPU": ("ASCEND_RT_VISIBLE_DEVICES",),
}
"""Visibility variables per accelerator kind (``AMD``: a GPU node whose model starts with AMD)."""

FAILURE_GRACE_S = 0.5
"""After the first failure, how long to wait for the other ranks' errors to pick the root cause."""

PEER_GRACE_S = 5.0
"""When every failure in so far is a consequence (a :class:`~rlinf_core.errors.PeerLost`: a rank
whose peer is gone), how long to wait for the peer's own failure, the root cause, to come in."""


class WorkerError(SchedulerError):
    """A worker failed. ``str()`` starts with the component, rank, process id, node and method,
    then the remote traceback of the root cause; ``others`` lists the other ranks that failed or
    were stopped. The root cause is the rank whose own code raised, else a rank whose process
    died, else a rank that only reports a lost peer (:class:`~rlinf_core.errors.PeerLost`).

    Attributes:
        component, rank, node_rank, node_ip, method: where it failed.
        pid: the process id of the failed rank (``None`` when unknown).
        error_type: the remote exception's class name (``ValueError``, ``ActorDied``...).
        remote_traceback: the remote traceback text ('' when the process died without one).
        cause: the remote exception object when it could be deserialized.
    """

    def __init__(
        self,
        *,
        component: str,
        rank: int,
        node_rank: int,
        node_ip: str,
        method: str,
        error_type: str,
        summary: str,
        remote_traceback: str = "",
        cause: BaseException | None = None,
        others: Sequence[str] = (),
        pid: int | None = None,
    ) -> None:
        self.component = component
        self.pid = pid
        self.rank = rank
        self.node_rank = node_rank
        self.node_ip = node_ip
        self.method = method
        self.error_type = error_type
        self.summary = summary
        self.remote_traceback = remote_traceback
        self.cause = cause
        self.others = list(others)
        head = (
            f"component {component!r} rank {rank}{f' (pid {pid})' if pid else ''} on node {node_rank} "
            f"({node_ip}) failed in {method}(): "
            f"{error_type}: {summary}"
        )
        parts = [head]
        if remote_traceback:
            parts.append("remote traceback:\n" + remote_traceback.rstrip())
        if self.others:
            parts.append("then: " + "; ".join(self.others))
        super().__init__("\n".join(parts))


# -- the actor side ------------------------------------------------------------------------------
def _rlinf_actor_init(self: Any, spec: dict[str, Any]) -> None:
    self._rlinf_spec = spec


def _rlinf_start(self: Any, args_kwargs: tuple[tuple[Any, ...], dict[str, Any]]) -> dict[str, Any]:
    """Bind the identity, check versions, run the user's ``__init__`` and ``setup``."""
    import os

    spec = self._rlinf_spec
    info = WorkerInfo(**spec["info"])
    self._rlinf_info = info
    if spec.get("versions") is not None:
        from rlinf_scheduler.runtime.versions import check_versions

        check_versions(spec["versions"], where=f"node {info.node_rank} ({spec['node_ip']})")
    args, kwargs = args_kwargs
    spec["worker_cls"].__init__(self, *args, **kwargs)
    self.bind(info)
    self.setup()
    return {"pid": os.getpid()}


def _rlinf_teardown(self: Any) -> None:
    self.teardown()


_ACTOR_CLASSES: dict[type, Any] = {}


def _actor_class(worker_cls: type[Worker]) -> Any:
    """A Ray actor class for ``worker_cls``: a subclass carrying rlinf's start/stop methods. It is
    created once per worker class and pickled by value (the user class by reference)."""
    ray = import_ray()
    cached = _ACTOR_CLASSES.get(worker_cls)
    if cached is None:
        attrs = {
            "__init__": _rlinf_actor_init,
            "_rlinf_start": _rlinf_start,
            "_rlinf_teardown": _rlinf_teardown,
            "__module__": "rlinf_scheduler.runtime._actors",  # not importable: pickled by value
            "__qualname__": worker_cls.__name__,
        }
        sub = type(worker_cls.__name__, (worker_cls,), attrs)
        cached = _ACTOR_CLASSES[worker_cls] = ray.remote(sub)
    return cached


# -- environment ---------------------------------------------------------------------------------
def visibility_vars(node: NodeInfo) -> tuple[str, ...]:
    """The variables that select ``node``'s accelerators (empty for a node without any)."""
    if not node.accelerator or not node.gpus:
        return ()
    if node.accelerator == "GPU" and (node.gpu_model or "").upper().startswith("AMD"):
        return VISIBILITY_VARS["AMD"]
    return VISIBILITY_VARS.get(node.accelerator, ("CUDA_VISIBLE_DEVICES",))


def process_env(
    p: ProcessPlacement,
    *,
    world_size: int,
    local_rank: int,
    local_world_size: int,
    node: NodeInfo,
    master_addr: str,
    master_port: int,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one process: the plan's env vars, ``extra``, then rlinf's own."""
    env: dict[str, str] = dict(p.env)
    env.update(extra or {})
    env.update(
        {
            "RANK": str(p.rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_world_size),
            "NODE_RANK": str(p.node_rank),
            NODE_RANK_ENV: str(p.node_rank),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "RLINF_COMPONENT": p.component,
            "RLINF_NODE_GROUP": p.node_group,
            "RLINF_HARDWARE_TYPE": p.hardware_type,
            "RLINF_HARDWARE_RANKS": ",".join(map(str, p.hardware_ranks)),
            # Ray must not reset the visibility variables of an actor that asks for no GPU.
            "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
        }
    )
    devices = env.get(NET_DEVICES_ENV) or node.env.get(NET_DEVICES_ENV)
    if devices:
        env.setdefault(NET_DEVICES_ENV, devices)
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if var not in env and var not in node.env:
                env[var] = devices
    names = visibility_vars(node)
    if names:
        visible = list(p.visible_accelerators)
        for var in names:
            # A node started with a restricted visibility (CUDA_VISIBLE_DEVICES=2,3 ray start) numbers
            # its accelerators 0..k-1 over that list: map through it.
            frozen = node.env.get(var)
            ids = [x.strip() for x in frozen.split(",")] if frozen else None
            if ids and all(i < len(ids) for i in visible):
                env[var] = ",".join(ids[i] for i in visible)
            else:
                env[var] = ",".join(map(str, visible))
    return env


# -- calls ---------------------------------------------------------------------------------------
@dataclass
class _Member:
    rank: int
    actor: Any
    node: NodeInfo
    placement: ProcessPlacement
    pid: int | None = None
    # how the actor was built, so restart() can build an identical one
    options: dict[str, Any] = field(default_factory=dict, repr=False)
    spec: dict[str, Any] = field(default_factory=dict, repr=False)


class RayGroupCall(GroupCall[Any]):
    """A method call in flight on some ranks of a :class:`RayWorkerGroup`."""

    def __init__(self, group: RayWorkerGroup, method: str, members: Sequence[_Member], refs: Sequence[Any]):
        self._group = group
        self.method = method
        self._members = list(members)
        self.refs = list(refs)
        self.ranks = [m.rank for m in members]

    def wait(self, timeout: float | None = None) -> list[Any]:
        """The results in rank order. Raises :class:`WorkerError` (root cause first) when a rank
        fails, after stopping the group, or :class:`WaitTimeout` naming the ranks still running."""
        ray = import_ray()
        try:
            return ray.get(self.refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            _, pending = ray.wait(self.refs, num_returns=len(self.refs), timeout=0)
            late = [m.rank for m, r in zip(self._members, self.refs, strict=True) if r in set(pending)]
            raise WaitTimeout(
                f"component {self._group.component!r}: {self.method}() did not finish within {timeout:g} s "
                f"on ranks {', '.join(map(str, late)) or '(none)'}"
            ) from None
        except ray.exceptions.RayError:
            raise self._failure() from None

    async def wait_async(self, timeout: float | None = None) -> list[Any]:
        """The asyncio form of :meth:`wait`."""
        futures = [asyncio.wrap_future(ref.future()) for ref in self.refs]
        done, pending = await asyncio.wait(futures, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION)
        failed = any(f.exception() is not None for f in done)
        if not failed and not pending:
            return [f.result() for f in futures]
        for f in pending:
            f.cancel()
        if not failed:
            late = [m.rank for m, f in zip(self._members, futures, strict=True) if f in pending]
            raise WaitTimeout(
                f"component {self._group.component!r}: {self.method}() did not finish within {timeout:g} s "
                f"on ranks {', '.join(map(str, late))}"
            )
        loop = asyncio.get_running_loop()
        error = await loop.run_in_executor(None, self._failure)
        raise error

    def __await__(self) -> Any:
        return self.wait_async().__await__()

    def _failure(self) -> WorkerError:
        """Collect what failed, pick the root cause, stop the group, build the error."""
        ray = import_ray()
        failures = self._collect(FAILURE_GRACE_S)
        if failures and failures[0][0] == CONSEQUENCE and len(failures) < len(self.refs):
            # every rank in so far only lost a peer: give the peer's own failure time to arrive
            failures = self._collect(PEER_GRACE_S, until_root=True)
        if not failures:  # pragma: no cover - ray.get raised, so one is ready
            raise SchedulerError(f"component {self._group.component!r}: {self.method}() failed")
        _, root_member, root = failures[0]
        others = [f"rank {m.rank} also failed ({_kind(ray, e)})" for _, m, e in failures[1:]]
        stopped = self._group._stop_after_failure(exclude={m.rank for _, m, _ in failures})
        if stopped:
            others.append(f"stopped ranks {', '.join(map(str, stopped))} of {self._group.component!r}")
        return _worker_error(ray, self._group.component, root_member, self.method, root, others)

    def _collect(self, grace: float, until_root: bool = False) -> list[tuple[int, _Member, BaseException]]:
        """The failed ranks' ``(severity, member, error)``, root cause first, once every rank
        finished or ``grace`` seconds passed (``until_root``: or once a failure that is not a
        consequence is in)."""
        ray = import_ray()
        deadline = time.monotonic() + grace
        while True:
            left = max(0.0, deadline - time.monotonic())
            step = min(left, 0.1) if until_root else left
            ready, _ = ray.wait(self.refs, num_returns=len(self.refs), timeout=step)
            ready_set = set(ready)
            failures: list[tuple[int, _Member, BaseException]] = []
            for m, ref in zip(self._members, self.refs, strict=True):
                if ref not in ready_set:
                    continue
                try:
                    ray.get(ref, timeout=0)
                except ray.exceptions.RayError as err:
                    failures.append((_severity(ray, err), m, err))
            failures.sort(key=lambda f: (f[0], f[1].rank))
            rooted = failures and failures[0][0] < CONSEQUENCE
            if len(ready) == len(self.refs) or left <= 0 or (until_root and rooted):
                return failures


CONSEQUENCE = 2
"""The severity of a rank that failed only because a peer is gone (:func:`_severity`)."""


def _severity(ray: Any, err: BaseException) -> int:
    """0: an exception raised by the worker's code; 1: the worker process died; 2 (:data:`CONSEQUENCE`):
    the worker's code reports a lost peer (:class:`~rlinf_core.errors.PeerLost`); 3: anything else."""
    if isinstance(err, ray.exceptions.RayTaskError):
        return CONSEQUENCE if isinstance(getattr(err, "cause", None), PeerLost) else 0
    if isinstance(err, ray.exceptions.RayActorError):
        return 1
    return 3


def _kind(ray: Any, err: BaseException) -> str:
    if isinstance(err, ray.exceptions.RayTaskError):
        cause = getattr(err, "cause", None)
        return type(cause).__name__ if cause is not None else "error"
    if isinstance(err, ray.exceptions.RayActorError):
        return "its process died"
    return type(err).__name__


def _worker_error(
    ray: Any, component: str, m: _Member, method: str, err: BaseException, others: list[str]
) -> WorkerError:
    if isinstance(err, ray.exceptions.RayTaskError):
        cause = getattr(err, "cause", None)
        error_type = type(cause).__name__ if cause is not None else "Error"
        summary = str(cause) if cause is not None else str(err).strip().splitlines()[-1]
        # the dual-class exception Ray raises keeps the remote traceback in its message only
        tb = err.__dict__.get("traceback_str") or str(err)
    elif isinstance(err, ray.exceptions.RayActorError):
        error_type = "WorkerDied"
        summary = "the worker's process died" + (
            " while starting" if getattr(err, "actor_init_failed", False) else ""
        )
        tb = str(err)
    else:
        error_type = type(err).__name__
        summary = str(err)
        tb = ""
    name = "__init__" if method == "_rlinf_start" else method
    return WorkerError(
        component=component,
        rank=m.rank,
        node_rank=m.placement.node_rank,
        node_ip=m.node.ip,
        method=name,
        error_type=error_type,
        summary=summary,
        remote_traceback=tb,
        cause=getattr(err, "cause", None),
        others=others,
        pid=m.pid,
    )


# -- groups --------------------------------------------------------------------------------------
@dataclass
class _GroupState:
    members: list[_Member]
    worker_cls: type[Worker]
    stopped: bool = False
    stop_on_failure: bool = True
    methods: set[str] = field(default_factory=set)
    args_ref: Any = None


class RayWorkerGroup(WorkerGroup):
    """The actors of one component (or a view of some of its ranks).

    ``group.method(*args)`` returns a :class:`RayGroupCall` on every rank of the view;
    ``group.on([0, 2])`` is a view; results come back in rank order.
    """

    def __init__(self, component: str, state: _GroupState, ranks: Sequence[int] | None = None) -> None:
        self.component = component
        self._state = state
        all_ranks = [m.rank for m in state.members]
        self._ranks = list(all_ranks if ranks is None else ranks)
        self._view = [state.members[r] for r in self._ranks]
        self.world_size = len(state.members)

    @property
    def ranks(self) -> list[int]:
        """The ranks this view calls, sorted."""
        return list(self._ranks)

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles of this view, in rank order (for advanced use)."""
        return [m.actor for m in self._view]

    @property
    def placements(self) -> list[ProcessPlacement]:
        return [m.placement for m in self._view]

    @property
    def worker_cls(self) -> type[Worker]:
        return self._state.worker_cls

    @property
    def stop_on_failure(self) -> bool:
        """Whether a failed call stops the whole group (the default). Set it to ``False`` for a
        component whose ranks are restarted one by one (:meth:`restart`), such as preemptible
        rollout workers: the other ranks then keep running."""
        return self._state.stop_on_failure

    @stop_on_failure.setter
    def stop_on_failure(self, value: bool) -> None:
        self._state.stop_on_failure = bool(value)

    def restart(self, ranks: int | Sequence[int] | None = None, *, timeout: float = 300.0) -> None:
        """Replace the processes of ``ranks`` (default: every rank of this view) with fresh ones on
        the same placement, built with the same constructor arguments, and wait until each ran
        ``__init__`` and ``setup``. A process still alive is killed first. Calls in flight on a
        replaced rank fail; later calls go to the new process."""
        ray = import_ray()
        wanted = self._ranks if ranks is None else ([ranks] if isinstance(ranks, int) else list(ranks))
        bad = [r for r in wanted if not (isinstance(r, int) and 0 <= r < self.world_size)]
        if bad:
            raise ValueError(
                f"component {self.component!r} has ranks 0..{self.world_size - 1}; not {', '.join(map(repr, bad))}"
            )
        members = [self._state.members[r] for r in sorted(set(wanted))]
        if any(not m.options for m in members) or self._state.args_ref is None:
            raise SchedulerError(f"component {self.component!r} was not launched by rlinf; cannot restart it")
        actor_cls = _actor_class(self._state.worker_cls)
        for m in members:
            try:
                ray.kill(m.actor, no_restart=True)
            except Exception:  # already dead
                pass
            m.actor = actor_cls.options(**m.options).remote(m.spec)
        self._state.stopped = False
        refs = [m.actor._rlinf_start.remote(self._state.args_ref) for m in members]
        answers = RayGroupCall(self, "_rlinf_start", members, refs).wait(timeout)
        for m, a in zip(members, answers, strict=True):
            m.pid = a.get("pid")
        log.info("component %r: restarted ranks %s", self.component, [m.rank for m in members])

    def on(self, ranks: int | Sequence[int]) -> RayWorkerGroup:
        wanted = [ranks] if isinstance(ranks, int) else list(ranks)
        bad = [
            r for r in wanted if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.world_size
        ]
        if bad:
            raise ValueError(
                f"component {self.component!r} has ranks 0..{self.world_size - 1}; not {', '.join(map(repr, bad))}"
            )
        if not wanted:
            raise ValueError("on() needs at least one rank")
        return RayWorkerGroup(self.component, self._state, sorted(set(wanted)))

    def call(self, method: str, *args: Any, **kwargs: Any) -> RayGroupCall:
        if self._state.stopped:
            raise SchedulerError(f"component {self.component!r} was shut down; launch it again")
        if method not in self._state.methods:
            self._check_method(method)
        # async methods run on the actor's event loop (Ray makes a class with one an async actor)
        refs = [getattr(m.actor, method).remote(*args, **kwargs) for m in self._view]
        return RayGroupCall(self, method, self._view, refs)

    def _check_method(self, method: str) -> None:
        target = getattr(self._state.worker_cls, method, None)
        if method.startswith("_") or not callable(target):
            raise AttributeError(
                f"component {self.component!r} ({self._state.worker_cls.__name__}) has no public method {method!r}"
            )
        self._state.methods.add(method)

    def _stop_after_failure(self, exclude: set[int]) -> list[int]:
        if not self._state.stop_on_failure or self._state.stopped:
            return []
        stopped = [m.rank for m in self._state.members if m.rank not in exclude]
        self._kill_all()
        return stopped

    def _kill_all(self) -> None:
        ray = import_ray()
        self._state.stopped = True
        for m in self._state.members:
            try:
                ray.kill(m.actor, no_restart=True)
            except Exception:  # pragma: no cover - already dead
                pass

    def shutdown(self, *, timeout: float = 30.0) -> None:
        """Run every rank's ``teardown`` (up to ``timeout``), then kill the actors."""
        if self._state.stopped:
            return
        ray = import_ray()
        refs = [m.actor._rlinf_teardown.remote() for m in self._state.members]
        try:
            ray.wait(refs, num_returns=len(refs), timeout=timeout)
        finally:
            self._kill_all()

    def __repr__(self) -> str:
        return f"RayWorkerGroup({self.component!r}, ranks={self._ranks}, world_size={self.world_size})"


# -- launch --------------------------------------------------------------------------------------
class LaunchCluster(Protocol):
    """What :func:`launch_worker_group` needs of a cluster; a
    :class:`~rlinf_scheduler.runtime.cluster.Cluster` provides it."""

    @property
    def code_sync(self) -> CodeSync | None: ...

    @property
    def driver_versions(self) -> Mapping[str, str]: ...

    def node(self, rank: int) -> NodeInfo: ...

    def check_paths(self, rank: int, paths: Iterable[str]) -> dict[str, str | None]: ...

    def free_port(self, rank: int) -> int: ...


def launch_worker_group(
    cluster: LaunchCluster,
    placement: ComponentPlacement,
    worker_cls: type[Worker],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    ray_options: Mapping[str, Any] | None = None,
    timeout: float = 300.0,
) -> RayWorkerGroup:
    """Start ``worker_cls`` on every process of ``placement`` and wait until each has run its
    ``__init__`` and ``setup`` (up to ``timeout`` seconds).

    ``args``/``kwargs`` go to every process's constructor (put in the object store once). ``env``
    adds variables to every process (after the plan's). ``ray_options`` are extra
    ``actor.options(...)`` (``max_concurrency``...); scheduling and accelerators are rlinf's.
    """
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not (isinstance(worker_cls, type) and issubclass(worker_cls, Worker)):
        raise TypeError(f"worker_cls must be a subclass of rlinf_core.Worker, got {worker_cls!r}")
    component = placement.name
    procs = list(placement.processes)
    if not procs:
        raise ConfigError(
            f"component {component!r} has no processes in the plan",
            f"cluster.component_placement.{component}",
        )
    for p in procs:
        cluster.node(p.node_rank)  # every node must be part of the cluster

    # interpreters: check each distinct path on each node before launching anything
    wanted: dict[int, set[str]] = {}
    for p in procs:
        if p.python:
            wanted.setdefault(p.node_rank, set()).add(p.python)
    bad = []
    for node_rank, paths in sorted(wanted.items()):
        for path, why in cluster.check_paths(node_rank, paths).items():
            if why:
                node = cluster.node(node_rank)
                groups = sorted(
                    {p.node_group for p in procs if p.node_rank == node_rank and p.python == path}
                )
                bad.append(
                    f"python_interpreter_path {path} {why} on {node.where} (env_configs of node group "
                    f"{', '.join(map(repr, groups))})"
                )
    if bad:
        raise SchedulerError(
            f"cannot launch component {component!r}:\n  "
            + "\n  ".join(bad)
            + "\nInstall that interpreter there (with ray and rlinf) or fix the path in the cluster config"
        )

    master = cluster.node(procs[0].node_rank)
    master_port = cluster.free_port(procs[0].node_rank)
    locals_: dict[int, list[int]] = {}
    for p in procs:
        locals_.setdefault(p.node_rank, []).append(p.rank)
    versions = None if cluster.code_sync is not None else dict(cluster.driver_versions)
    actor_cls = _actor_class(worker_cls)
    members: list[_Member] = []
    base_options = dict(ray_options or {})
    for key in ("scheduling_strategy", "num_gpus", "resources", "runtime_env"):
        if key in base_options:
            raise ConfigError(f"ray_options may not set {key!r}: placement decides it")
    base_options.setdefault("num_cpus", 0)
    base_options.setdefault("max_restarts", 0)
    base_options.setdefault("max_task_retries", 0)
    for p in procs:
        node = cluster.node(p.node_rank)
        on_node = locals_[p.node_rank]
        proc_env = process_env(
            p,
            world_size=len(procs),
            local_rank=on_node.index(p.rank),
            local_world_size=len(on_node),
            node=node,
            master_addr=master.ip,
            master_port=master_port,
            extra=env,
        )
        runtime_env: dict[str, Any] = {"env_vars": proc_env}
        if p.python:
            runtime_env["py_executable"] = p.python
        hardware = {}
        if p.hardware:
            hardware = {
                "type": p.hardware_type,
                "ranks": list(p.hardware_ranks),
                "devices": [
                    {
                        "type": h.type,
                        "local_rank": h.local_rank,
                        "config": h.config.model_dump(mode="json"),
                        **dict(h.info),
                    }
                    for h in p.hardware
                ],
            }
        info = {
            "component": component,
            "rank": p.rank,
            "world_size": len(procs),
            "node_rank": p.node_rank,
            "local_rank": on_node.index(p.rank),
            "local_world_size": len(on_node),
            "hardware": hardware,
        }
        spec = {"info": info, "versions": versions, "node_ip": node.ip, "worker_cls": worker_cls}
        options = {
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node.node_id, soft=False),
            "num_gpus": 0,
            "runtime_env": runtime_env,
            "name": None,
            **base_options,
        }
        actor = actor_cls.options(**options).remote(spec)
        members.append(_Member(p.rank, actor, node, p, options=options, spec=spec))

    args_ref = ray.put((tuple(args), dict(kwargs or {})))
    state = _GroupState(members, worker_cls, args_ref=args_ref)
    group = RayWorkerGroup(component, state)
    refs = [m.actor._rlinf_start.remote(args_ref) for m in members]
    call = RayGroupCall(group, "_rlinf_start", members, refs)
    started = time.monotonic()
    try:
        answers = call.wait(timeout)
    except WaitTimeout as err:
        group._kill_all()
        raise WaitTimeout(
            f"component {component!r}: not every worker started within {timeout:g} s ({err}); a node may lack "
            "the CPU/memory for another process, or a runtime environment (interpreter, code sync) may be "
            "slow to prepare"
        ) from None
    except BaseException:
        group._kill_all()
        raise
    for m, a in zip(members, answers, strict=True):
        m.pid = a.get("pid")
    log.info(
        "component %r: %d workers started in %.1f s", component, len(members), time.monotonic() - started
    )
    return group

"""A second scheduler plugin, ``threads``: every rank of every component is a thread of this
process. Written only against :mod:`rlinf_core` (no Ray, no ``rlinf_scheduler``), as a user's
scheduler plugin would be; ``test_algos_scheduler_plugin.py`` installs it as a distribution with
an ``rlinf`` entry point and runs the algorithms on it.

What it gives, by core's :class:`~rlinf_core.scheduler.Scheduler` interface:

- ``launch``: one worker object per rank (``WorkerInfo`` bound, ``setup`` run), each with its own
  one-thread executor, so a worker takes its calls one at a time in order (as a Ray actor does);
  a group's calls return :class:`~rlinf_core.worker.GroupCall` objects (``wait``, ``await``);
- ``channel``: :class:`~rlinf_core.channel.LocalChannel`;
- ``weight_sync``: :class:`~rlinf_core.weights.LocalWeightSync` (``copy=True``: a publish is a
  snapshot, so a learner that goes on training in place never changes what a rollout thread
  loads, the contract a cross-process sync keeps by construction);
- ``links``: :class:`~rlinf_core.links.LocalLinks`;
- ``plan_placement``: none (it places nothing: the driver learns the group sizes from the groups).

It restarts nothing: a worker that fails fails the run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from rlinf_core.channel import Channel, LocalChannel
from rlinf_core.errors import SchedulerError, WaitTimeout
from rlinf_core.links import Links, LocalLinks
from rlinf_core.plugins import hookimpl
from rlinf_core.scheduler import Scheduler
from rlinf_core.weights import LocalWeightSync, WeightSync, resolve_weight_sync_mode
from rlinf_core.worker import GroupCall, Worker, WorkerGroup, WorkerInfo

WORLD_SIZES: dict[str, int] = {}
"""Ranks per component (default 1); a test may set more."""

CALLS: list[str] = []
"""What runs asked of a threads scheduler, in order (tests read it)."""


class ThreadCall(GroupCall[Any]):
    """The futures of one method call on some ranks, results in rank order."""

    def __init__(self, what: str, futures: list[concurrent.futures.Future[Any]]) -> None:
        self.what, self.futures = what, futures

    def wait(self, timeout: float | None = None) -> list[Any]:
        _, pending = concurrent.futures.wait(self.futures, timeout)
        if pending:
            raise WaitTimeout(f"waited {timeout} s for {self.what}")
        return [f.result() for f in self.futures]

    def __await__(self) -> Any:
        return asyncio.gather(*(asyncio.wrap_future(f) for f in self.futures)).__await__()


class ThreadGroup(WorkerGroup):
    """The ranks ``ranks`` of a component's workers (each with its own one-thread executor)."""

    def __init__(
        self, component: str, workers: list[Worker], pools: list[Any], ranks: Sequence[int], stopped: set[int]
    ) -> None:
        self.component, self.workers, self.pools = component, workers, pools
        self.ranks, self.stopped = list(ranks), stopped  # ``stopped``: shared by every view
        self.world_size = len(workers)

    def on(self, ranks: int | Sequence[int]) -> ThreadGroup:
        picked = [ranks] if isinstance(ranks, int) else list(ranks)
        return ThreadGroup(self.component, self.workers, self.pools, picked, self.stopped)

    def call(self, method: str, *args: Any, **kwargs: Any) -> ThreadCall:
        futures = [
            self.pools[r].submit(getattr(self.workers[r], method), *args, **kwargs) for r in self.ranks
        ]
        return ThreadCall(f"{self.component}.{method}() on ranks {self.ranks}", futures)

    def restart(self, ranks: Any = None, *, timeout: float = 30.0) -> None:
        raise SchedulerError(f"the threads scheduler does not restart workers ({self.component})")

    def shutdown(self, *, timeout: float = 30.0) -> None:
        ranks = [r for r in self.ranks if r not in self.stopped]
        self.stopped.update(ranks)
        calls = [self.pools[r].submit(self.workers[r].teardown) for r in ranks]
        concurrent.futures.wait(calls, timeout)
        for r in ranks:
            self.pools[r].shutdown(wait=False, cancel_futures=True)


class ThreadScheduler(Scheduler):
    """Every component's ranks as threads of this process (see the module docstring)."""

    PLUGIN_NAME: ClassVar[str] = "threads"

    def __init__(self, *, hardware: Any = None) -> None:
        self.groups: list[ThreadGroup] = []
        self.channels: dict[str, LocalChannel] = {}
        self.syncs: list[WeightSync] = []
        self.started = False

    def start(self, config: Any, *, timeout: float | None = None) -> None:
        self.started = True

    def launch(self, component: str, worker_cls: type[Worker], *args: Any, **kwargs: Any) -> ThreadGroup:
        if not self.started:
            raise SchedulerError("start() the threads scheduler first")
        CALLS.append(f"launch {component}")
        world = WORLD_SIZES.get(component, 1)
        workers: list[Worker] = []
        pools = []
        for rank in range(world):
            pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{component}-{rank}")
            worker = pool.submit(worker_cls, *args, **kwargs).result()
            worker.bind(WorkerInfo(component, rank, world, 0, rank, world))
            pool.submit(worker.setup).result()
            workers.append(worker)
            pools.append(pool)
        group = ThreadGroup(component, workers, pools, range(world), set())
        self.groups.append(group)
        return group

    def channel(self, name: str, *, maxsize: int = 0, **options: Any) -> Channel:
        CALLS.append(f"channel {name}")
        if name not in self.channels:
            timeout = options.get("default_timeout")
            extra = {"default_timeout": timeout} if timeout is not None else {}
            self.channels[name] = LocalChannel(name, maxsize=maxsize, **extra)
        return self.channels[name]

    def weight_sync(
        self,
        name: str,
        *,
        mode: str = "auto",
        devices: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        **options: Any,
    ) -> WeightSync:
        resolve_weight_sync_mode(mode, devices)  # a bad mode is still an error
        CALLS.append(f"weight_sync {name} ({mode})")
        handle = LocalWeightSync(name, default_timeout=timeout)
        self.syncs.append(handle)
        return handle

    def links(self, secret: str) -> Links:
        CALLS.append("links")
        return LocalLinks(secret)

    def shutdown(self) -> None:
        for group in self.groups:
            group.shutdown()
        self.groups.clear()
        for ch in self.channels.values():
            ch.close()
        self.channels.clear()
        for handle in self.syncs:
            handle.destroy()
        self.syncs.clear()


@hookimpl
def rlinf_register_schedulers() -> list[type[Scheduler]]:
    return [ThreadScheduler]

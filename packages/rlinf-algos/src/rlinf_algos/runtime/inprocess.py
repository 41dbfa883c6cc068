"""The in-process scheduler: what ``runner.scheduler: local`` runs on.

Every role of the run (env, rollout, actor, reward, reference, agent, tool) is one worker object
in the driver's process, each with a thread of its own that takes its calls one at a time in
order, as a Ray actor does. The driver runs the very flow it runs on Ray
(:class:`~rlinf_algos.flow.Flow`'s ``placed`` run, the role workers of
:mod:`rlinf_algos.runtime.workers`): there is no second copy of the iteration, so a local run
and a Ray run of the same seed log the same rows.

What it does differently from a scheduler of processes, and why a laptop run is as fast as the
old in-process loops were:

- **objects by reference.** Channels are :class:`~rlinf_core.channel.LocalChannel` queues and
  the env <-> rollout links :class:`~rlinf_core.links.LocalLinks`: observations, actions and
  trajectories pass between the roles' threads as the very arrays and tensors, nothing is
  pickled or copied; the weight sync (:class:`~rlinf_core.weights.LocalWeightSync`) snapshots
  the learner's state dict once per publish (the learner goes on training in place) and every
  consumer loads that snapshot;
- **one process, one torch.** The roles share the process's torch thread pool and its global
  random stream: the thread count is set once, from ``runner.torch_threads``, and the roles'
  ``setup`` runs one at a time (each seeds its streams and builds its model without another
  role's setup in between);
- **restarts rebuild the object.** A group restarted in place gets new worker objects, set up
  afresh, on new threads (what a restarted process would be); a failure inside a role is an
  exception of that role's call, never a dead process.

Nothing is placed: :meth:`plan` is ``None``, each role has one rank, and the driver learns the
group sizes from the groups.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from rlinf_algos.env_guard import CallThread
from rlinf_core.channel import Channel, LocalChannel
from rlinf_core.errors import SchedulerError, WaitTimeout
from rlinf_core.links import Links, LocalLinks
from rlinf_core.scheduler import Scheduler
from rlinf_core.weights import LocalWeightSync, WeightSync, resolve_weight_sync_mode
from rlinf_core.worker import GroupCall, Worker, WorkerGroup, WorkerInfo

__all__ = ["InProcessScheduler"]

_SETUP_LOCK = threading.Lock()
"""One role's ``setup`` at a time (they share torch's global random stream and thread pool)."""


class InProcessCall(GroupCall[Any]):
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


class _Rank:
    """One rank: its worker object and the thread that runs its calls."""

    def __init__(self, component: str, rank: int, world: int, build: Any) -> None:
        self.pool = CallThread(f"rlinf-{component}-{rank}")
        self.stopped = False
        try:
            self.worker: Worker = self.pool.submit(self._start, component, rank, world, build).result()
        except BaseException:
            self.pool.shutdown(wait=False)
            raise

    @staticmethod
    def _start(component: str, rank: int, world: int, build: Any) -> Worker:
        worker = build()
        worker.bind(WorkerInfo(component, rank, world, 0, rank, world))
        if hasattr(worker, "threads"):
            worker.threads = 0  # a role worker's: torch's threads are the process's, set once
        with _SETUP_LOCK:
            worker.setup()
        return worker

    def stop(self, timeout: float) -> None:
        if self.stopped:
            return
        self.stopped = True
        done = self.pool.submit(self.worker.teardown)
        concurrent.futures.wait([done], timeout)
        self.pool.shutdown(wait=False, cancel_futures=True)


class InProcessGroup(WorkerGroup):
    """The ranks ``ranks`` of one role's workers in this process."""

    def __init__(self, component: str, ranks_of: list[_Rank], build: Any, ranks: Sequence[int]) -> None:
        self.component, self.ranks_of, self.build = component, ranks_of, build
        self.ranks = list(ranks)
        self.world_size = len(ranks_of)

    @property
    def workers(self) -> list[Worker]:
        """The worker objects of the view's ranks (they are in this process: a test or a tool
        may look at them)."""
        return [self.ranks_of[r].worker for r in self.ranks]

    def on(self, ranks: int | Sequence[int]) -> InProcessGroup:
        picked = [ranks] if isinstance(ranks, int) else list(ranks)
        return InProcessGroup(self.component, self.ranks_of, self.build, picked)

    def call(self, method: str, *args: Any, **kwargs: Any) -> InProcessCall:
        futures = []
        for r in self.ranks:
            rank = self.ranks_of[r]
            futures.append(rank.pool.submit(getattr(rank.worker, method), *args, **kwargs))
        return InProcessCall(f"{self.component}.{method}() on ranks {self.ranks}", futures)

    def restart(self, ranks: Any = None, *, timeout: float = 30.0) -> None:
        """New worker objects for ``ranks`` (default: every rank), set up afresh."""
        picked = self.ranks if ranks is None else ([ranks] if isinstance(ranks, int) else list(ranks))
        for r in picked:
            self.ranks_of[r].stop(timeout)
            self.ranks_of[r] = _Rank(self.component, r, self.world_size, self.build)

    def shutdown(self, *, timeout: float = 30.0) -> None:
        for r in self.ranks:
            self.ranks_of[r].stop(timeout)


class InProcessScheduler(Scheduler):
    """Every role in this process (see the module docstring)."""

    PLUGIN_NAME: ClassVar[str] = "local"

    def __init__(self, *, hardware: Any = None, torch_threads: int | None = None) -> None:
        self.torch_threads = torch_threads
        self.groups: list[InProcessGroup] = []
        self.channels: dict[str, LocalChannel] = {}
        self.syncs: list[WeightSync] = []
        self.started = False

    def start(self, config: Any = None, *, timeout: float | None = None) -> None:
        runner = config.get("runner") if isinstance(config, Mapping) else None
        threads = self.torch_threads
        if threads is None and isinstance(runner, Mapping) and isinstance(runner.get("torch_threads"), int):
            threads = int(runner["torch_threads"])
        if threads:
            from rlinf_algos.runtime.workers.base import set_threads

            set_threads(threads)
        self.started = True

    def launch(self, component: str, worker_cls: type[Worker], *args: Any, **kwargs: Any) -> InProcessGroup:
        if not self.started:
            raise SchedulerError("start() the in-process scheduler first")

        def build() -> Worker:
            return worker_cls(*args, **kwargs)

        group = InProcessGroup(component, [_Rank(component, 0, 1, build)], build, [0])
        self.groups.append(group)
        return group

    def channel(self, name: str, *, maxsize: int = 0, **options: Any) -> Channel:
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
        handle = LocalWeightSync(name, default_timeout=timeout)
        self.syncs.append(handle)
        return handle

    def links(self, secret: str) -> Links:
        return LocalLinks(secret)

    def shutdown(self) -> None:
        for group in self.groups:
            group.shutdown(timeout=10.0)
        self.groups.clear()
        for ch in self.channels.values():
            ch.close()
        self.channels.clear()
        for handle in self.syncs:
            handle.destroy()
        self.syncs.clear()

"""Killed workers of a distributed language-model run (:mod:`rlinf_algos.lm.distributed`).

Every wait of the driver polls its calls (:func:`settle`), so the first worker whose process dies
is named at once (component, rank, process id, method) instead of after
``runner.worker_timeout``. A dead rollout, reward or agent worker is restarted on its placement
(counted against ``runner.max_restarts``); the iteration it was in is ended on every worker (an
:data:`~rlinf_algos.channels.ABORT` on each key a consumer may wait on), its partial batch is
dropped and the iteration runs again under the next generation of channel keys, so nothing of
the lost batch is mixed in. The counters go to ``summary.json`` as embodied runs write them:
``restarts``, ``dropped_batches``, ``learner_restarts`` and ``events``. The actor (the learner,
with the optimiser state) and the reference (the frozen warm start) are not restarted in place:
their death ends the run naming them, and ``--resume`` continues it from the newest checkpoint.

This module imports no torch.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlinf_algos.channels import ABORT
from rlinf_core.errors import RlinfError, WaitTimeout

__all__ = [
    "RESTARTABLE",
    "Aborted",
    "FaultBook",
    "RecoveryMixin",
    "RunFailed",
    "WorkerLost",
    "WorkerPid",
    "is_abort",
    "settle",
]

RESTARTABLE = ("rollout", "reward", "agent")
"""Components whose dead ranks are restarted in place (they hold no training state)."""


class RunFailed(RlinfError):
    """A worker died and is not restarted (the actor or the reference, or restarts used up)."""


class Aborted(Exception):
    """The driver ended the iteration this worker was in (an ``ABORT`` on the key it read)."""


class WorkerLost(Exception):
    """A call on ``component`` rank ``rank`` failed with ``error`` (a scheduler ``WorkerError``)."""

    def __init__(self, component: str, rank: int, error: BaseException) -> None:
        super().__init__(f"{component} rank {rank}: {error}")
        self.component, self.rank, self.error = component, rank, error
        self.settled: dict[tuple[str, int], Any] = {}  # what the other calls returned after the abort

    @property
    def died(self) -> bool:
        """The worker's process died (rather than its code raising)."""
        return getattr(self.error, "error_type", "") == "WorkerDied"


class WorkerPid:
    """``pid()``: the worker's process id (the driver keeps it in ``RemoteComponents.pids``;
    fault tests kill the process by it)."""

    def pid(self) -> int:
        return os.getpid()


def is_abort(item: Any) -> bool:
    return isinstance(item, str) and item == ABORT


def settle(
    calls: Mapping[tuple[str, int], Any],
    timeout: float,
    what: str,
    check: Callable[[], None] | None = None,
    poll_s: float = 0.05,
) -> dict[tuple[str, int], Any]:
    """Wait for every call (``{(component, rank): call}``) and return their results; the first
    call that fails raises :class:`WorkerLost` naming it, while the others still run. ``check``
    runs between polls (it raises :class:`WorkerLost` for a worker found dead elsewhere). A call
    still running after ``timeout`` seconds: a one-line error naming ``what`` and the ranks."""
    pending = dict(calls)
    results: dict[tuple[str, int], Any] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for label, call in list(pending.items()):
            try:
                results[label] = call.wait(0)[0]
            except WaitTimeout:
                continue
            except RlinfError as err:
                raise WorkerLost(label[0], label[1], err) from None
            del pending[label]
        if not pending:
            break
        if check is not None:
            check()
        if time.monotonic() > deadline:
            late = ", ".join(
                f"{c} rank {r} ({getattr(call, 'method', '?')}())" for (c, r), call in pending.items()
            )
            raise RlinfError(f"{what}: {late} did not finish within {timeout:g} s (runner.worker_timeout)")
        time.sleep(poll_s)
    return results


class FaultBook:
    """The restart budget and the counters of killed workers (``summary.json``, checkpoints)."""

    def __init__(self, max_restarts: int, say: Callable[[str], None]) -> None:
        self.max_restarts, self.say = max_restarts, say
        self.restarts = 0
        self.dropped_batches = 0
        self.events: list[str] = []

    def log(self, message: str) -> None:
        self.events.append(message)
        self.say(message)

    def died(self, lost: WorkerLost, where: str, pid: int | None) -> str:
        """The one-line account of ``lost``'s failure ``where`` (an iteration)."""
        method = getattr(lost.error, "method", "?")
        how = "its process died" if lost.died else f"{getattr(lost.error, 'error_type', 'error')}"
        pid_text = f", pid {pid}" if pid else ""
        return f"{lost.component} rank {lost.rank}{pid_text} failed in {method}() {where}: {how}"

    def count_restart(self, account: str, resume_hint: str) -> None:
        """Count a restart; :class:`RunFailed` when ``runner.max_restarts`` are used up."""
        if self.restarts + 1 > self.max_restarts:
            raise RunFailed(
                f"{account}, and is not restarted: runner.max_restarts={self.max_restarts} restarts are used "
                f"up; {resume_hint}"
            )
        self.restarts += 1

    def counters(self) -> dict[str, Any]:
        return {
            "restarts": self.restarts,
            "dropped_batches": self.dropped_batches,
            "learner_restarts": [],
            "events": list(self.events),
        }

    def state(self) -> dict[str, Any]:
        return {
            "restarts": self.restarts,
            "dropped_batches": self.dropped_batches,
            "events": list(self.events),
        }

    def load(self, state: Mapping[str, Any] | None) -> None:
        if state:
            self.restarts = int(state.get("restarts", 0))
            self.dropped_batches = int(state.get("dropped_batches", 0))
            self.events = [str(e) for e in state.get("events", [])]


class RecoveryMixin:
    """The driver's side of :class:`~rlinf_algos.lm.distributed.RemoteComponents`: the rollout
    ranks' serve loops watched, an iteration ended on every worker, dead ranks restarted."""

    groups: dict[str, Any]
    serving: dict[int, Any]
    pids: dict[str, list[int]]
    faults: FaultBook
    timeout: float
    callbacks: Mapping[str, Callable[..., Any]]
    run_dir: Path | None

    @property
    def fault_counters(self) -> dict[str, Any]:
        """``restarts``, ``dropped_batches``, ``learner_restarts`` and ``events`` (summary.json)."""
        return self.faults.counters()

    def _resume_hint(self) -> str:
        from rlinf_algos.lm.checkpoint import latest_lm_checkpoint

        newest = latest_lm_checkpoint(self.run_dir) if self.run_dir is not None else None
        if newest is None:
            return "no checkpoint was written yet, so the run cannot be resumed: start it again"
        cmd = f"rlinf train {self.run_dir / 'config.yaml'} --resume {self.run_dir}"
        return f"the newest checkpoint is {newest}; continue the run from it with `{cmd}`"

    def _note_pids(self, component: str, ranks: list[int] | None = None) -> None:
        group = self.groups[component]
        view = group.on(ranks) if ranks is not None else group
        got = view.pid().wait(self.timeout)
        pids = self.pids.setdefault(component, [0] * group.world_size)
        for r, pid in zip(ranks if ranks is not None else range(len(got)), got, strict=True):
            pids[r] = int(pid)

    def _check_rollouts(self) -> None:
        """:class:`WorkerLost` for a rollout rank whose serve loop failed (its process died)."""
        for rank, call in list(self.serving.items()):
            try:
                call.wait(0)
            except WaitTimeout:
                continue
            except RlinfError as err:
                raise WorkerLost("rollout", rank, err) from None
            raise WorkerLost("rollout", rank, RlinfError("its serve loop ended before the run did"))

    def _watch(self, channel: Any, key: str, hook: str, iteration: int) -> None:
        """Call ``callbacks[hook](self, iteration, report)`` once a worker reports on ``key``
        (a thread: the driver goes on meanwhile)."""

        def wait() -> None:
            try:
                report = channel.get(key, timeout=self.timeout)
            except Exception:  # the iteration ended before anyone reported
                return
            self.callbacks[hook](self, iteration, report)

        threading.Thread(target=wait, name=f"rlinf-{hook}", daemon=True).start()

    def _abort(
        self,
        targets: list[tuple[Any, str]],
        calls: Mapping[tuple[str, int], Any],
        lost: WorkerLost,
    ) -> dict[tuple[str, int], Any]:
        """End an iteration: an ``ABORT`` on each ``(channel, key)`` a worker may wait on, then
        wait for the other ``calls`` (``None`` for one that failed too); returns their results."""
        for channel, key in targets:
            try:
                channel.put(ABORT, key, timeout=5.0)
            except Exception:  # a full or closed channel: its reader is gone anyway
                pass
        settled: dict[tuple[str, int], Any] = {}
        deadline = time.monotonic() + min(self.timeout, 120.0)
        for label, call in calls.items():
            if label == (lost.component, lost.rank):
                continue
            try:
                settled[label] = call.wait(max(1.0, deadline - time.monotonic()))[0]
            except Exception:
                settled[label] = None
        return settled

    def _recover(self, lost: WorkerLost, where: str, resume_hint: str) -> None:
        """Restart ``lost``'s rank when its component holds no training state and its process
        died; otherwise end the run naming it (:class:`RunFailed`, or the worker's own error)."""
        known = self.pids.get(lost.component, [])
        pid = known[lost.rank] if lost.rank < len(known) else None
        account = self.faults.died(lost, where, pid)
        if not lost.died:
            raise lost.error
        if lost.component not in RESTARTABLE:
            holds = {
                "actor": "the policy and its optimiser state",
                "reference": "the frozen warm-start policy",
            }.get(lost.component, "state the run needs")
            raise RunFailed(f"{account}; it holds {holds} and is not restarted in place: {resume_hint}")
        self.faults.count_restart(account, resume_hint)
        self.faults.log(account)
        group = self.groups[lost.component]
        group.restart([lost.rank], timeout=self.timeout)
        self._note_pids(lost.component, [lost.rank])
        if lost.component == "rollout":
            self.serving[lost.rank] = group.on(lost.rank).serve()
        self.faults.log(f"restarted {lost.component} rank(s) [{lost.rank}]")

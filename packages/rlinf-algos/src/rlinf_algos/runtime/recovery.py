"""Worker deaths, for every family: the one place that decides what a dead worker costs.

A flow's placed run declares, for each role, what happens when one of its processes dies
(:data:`RESTART`):

- ``in_place``: the role holds no training state (env, rollout, reward, agent, tool) or state it
  gets back without the learner (a frozen reference: the flow run freezes the same weights again
  in ``after_restart``, from the model folder or from the copy it keeps): the dead ranks
  are restarted on their placement, the iteration they were in is ended on every worker (an
  :data:`~rlinf_algos.channels.ABORT` on each key a consumer may wait on; env and rollout links
  break), its partial batch is dropped (``dropped_batches``) and the iteration runs again under
  the next generation of channel keys, so nothing of the lost batch is mixed in;
- ``learner``: the role holds the optimiser state (the actor): the run goes back to the newest
  checkpoint that loads; the learner is restarted on its placement from the checkpoint's state
  (its flow points the other roles at it) and the run counters go back to the checkpoint
  (``learner_restarts``: ``step``, ``reason``, ``checkpoint``, ``steps_lost``);
- ``never``: the role holds state the run cannot rebuild in place (the language-model actor:
  its optimiser state): the run ends naming the worker (role, rank, pid), after writing the
  policy and the summary, with the ``--resume`` command.

A process that runs out of accelerator memory (``torch.OutOfMemoryError``, in a learner or any
other role, on workers or in this process) is not a death to restart: it would run out again at
the same point. The run ends with :class:`RunFailed` naming the role, the device and the knobs
that lower the need (:func:`out_of_memory_message`); the newest checkpoint, the last good state,
is kept and named with the ``--resume`` command.

Every restart counts against ``runner.max_restarts``; when they are used up (or the learner
cannot come back: no checkpoint to restart it from) the run ends with :class:`RunFailed`, whose
message names the newest checkpoint and the ``--resume`` command. Every wait on a worker is on
its call, so a worker whose process dies is named at once (role, rank, process id, method), not
after ``runner.worker_timeout``.

:class:`Recovery` is a part of :class:`~rlinf_algos.runtime.driver.Driver`.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlinf_algos.flow import await_call
from rlinf_algos.run_files import UnsafeStateFile
from rlinf_algos.rundir import latest_checkpoint, load_checkpoint
from rlinf_core.errors import PeerLost, RlinfError

__all__ = [
    "OOM_KNOBS",
    "RESTART",
    "LearnerDied",
    "Recovery",
    "RunFailed",
    "WorkerHung",
    "failure_reason",
    "out_of_memory",
    "out_of_memory_message",
    "worker_died",
]

RESTART = ("in_place", "learner", "never")
"""What a role's death costs (see the module docstring)."""


class RunFailed(RlinfError):
    """A worker died and could not be restarted (``runner.max_restarts`` used up, a role that is
    never restarted, or the learner with no checkpoint to come back from); the message names the
    newest checkpoint and the ``--resume`` command. The policy and ``summary.json`` (with
    ``error``) are written first. ``exit_code`` 2 when the cause is a file rlinf refuses to load
    (a legacy pickle)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class LearnerDied(Exception):
    """The learner's (actor worker's) process died (``reason``: where and how)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


GROUP_BROKEN = "LearnerGroupBroken"
"""The class name of the error a learner rank raises when its group lost a rank
(:class:`~rlinf_algos.parallel.LearnerGroupBroken`; by name: the driver imports no torch). The
rank exits right after, so the group counts as dead."""


class WorkerHung(RlinfError):
    """A worker's call did not return within ``runner.worker_timeout`` after its iteration was
    ended (its process is stopped, or stuck where no wait of its own is bounded): it is handled as
    a dead worker (its process is killed when it is restarted). The message names the worker
    (role, rank, pid), the call and the seconds waited."""

    error_type = "WorkerHung"

    def __init__(self, component: str, rank: int, pid: int | None, method: str, waited: float) -> None:
        self.component, self.rank, self.pid, self.method = component, rank, pid, method
        self.summary = (
            f"it did not return within {waited:g} s (runner.worker_timeout) after the iteration was ended"
        )
        super().__init__(
            f"{component} rank {rank}{f', pid {pid}' if pid else ''}: {method}(): {self.summary}"
        )


def worker_died(err: BaseException, component: str | None = None) -> bool:
    """``err`` says a worker's process died (of ``component``, when given) or hung
    (:class:`WorkerHung`), or that a learner rank's group lost a rank (it exits: the group is as
    good as dead)."""
    return getattr(err, "error_type", "") in ("WorkerDied", "WorkerHung", GROUP_BROKEN) and (
        component is None or getattr(err, "component", None) == component
    )


OOM_NAMES = frozenset({"OutOfMemoryError", "LearnerOutOfMemory"})
"""Class names of an out-of-memory error: torch's, and the actor worker's
(:class:`~rlinf_algos.parallel.LearnerOutOfMemory`), as raised here or reported by a worker."""

OOM_KNOBS = (
    "lower actor.micro_batch_size (samples per forward and backward; the update stays the same) or "
    "algorithm.minibatch_size, shorten the sequences (algorithm.max_new_tokens, the prompts' length), "
    "train LoRA adapters only (model.lora) or compute in bfloat16 (model.dtype: bfloat16)"
)
"""What lowers a learner's memory, named in the message of a run that ran out of it."""


def out_of_memory(err: BaseException) -> bool:
    """``err`` is an out-of-memory error raised in this process or reported by a worker (by
    class name: the driver imports no torch)."""
    names = {c.__name__ for c in type(err).__mro__} | {str(getattr(err, "error_type", ""))}
    return bool(names & OOM_NAMES)


def out_of_memory_message(err: BaseException, resume_hint: str) -> str:
    """The one-paragraph reason of a run that ran out of memory: where (the role and rank a
    worker reports; ``actor (in this process)`` otherwise), torch's first line, why it is not
    restarted, the knobs (:data:`OOM_KNOBS`) and ``resume_hint`` (the checkpoint kept)."""
    component = getattr(err, "component", None)
    if component is not None:
        where = f"{component} rank {getattr(err, 'rank', 0)} ({getattr(err, 'method', '?')}())"
        detail = str(getattr(err, "summary", "") or err)
    elif type(err).__name__ == "LearnerOutOfMemory":  # the actor's own line (it says where)
        where, detail = "", str(err)
    else:
        where, detail = "the learner (in this process)", str(err)
    first = detail.strip().splitlines()[0] if detail.strip() else "out of memory"
    said = f"{where} ran out of memory: {first}" if where else first
    return (
        f"{said}. It is not restarted: it would run out again at the same point. To fit, {OOM_KNOBS}; "
        f"{resume_hint}"
    )


class WorkerUserError(RlinfError):
    """A worker stopped on the user's mistake (its error was one of rlinf's errors for users,
    exit 2: a failing env, a bad setting found on the worker): the run ends with that error's
    line, prefixed by the worker that met it, without the remote traceback."""

    exit_code = 2


def user_error(err: BaseException) -> WorkerUserError | None:
    """The one-line :class:`WorkerUserError` of a worker's failure ``err`` whose remote cause is an
    rlinf error meant for users (exit code 2); ``None`` for any other failure."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, RlinfError) and getattr(cause, "exit_code", 1) == 2:
        first = str(cause).splitlines()[0]
        where = f"{err.component} rank {err.rank}" if hasattr(err, "component") else ""
        if where and not first.startswith(where):  # a worker's error may name it already
            first = f"{where}: {first}"
        return WorkerUserError(first)
    return None


def failure_reason(err: BaseException) -> str:
    """One line on a worker's failure, the root cause first: the worker (role, rank, pid) and
    its call, then what happened; for a worker that only lost a peer (a
    :class:`~rlinf_core.errors.PeerLost`, whose message names the peer first), its message
    first, then the call."""
    method, summary = getattr(err, "method", None), getattr(err, "summary", None)
    if not (method and summary):
        return (str(err).strip().splitlines() or [type(err).__name__])[0]
    first = (str(summary).strip().splitlines() or [""])[0]
    if isinstance(getattr(err, "cause", None), PeerLost):
        return f"{first} (in {method}())"
    component = getattr(err, "component", None)
    if component is None:
        return f"{method}(): {first}"
    pid = getattr(err, "pid", None)
    return f"{component} rank {getattr(err, 'rank', 0)}{f', pid {pid}' if pid else ''}: {method}(): {first}"


class Recovery:
    """The driver's part that handles worker deaths (uses its groups, run counters and flow run)."""

    groups: dict[str, Any]
    pids: dict[str, list[int]]
    events: list[str]
    flow_run: Any
    run_dir: Path
    timeout: float
    restarts: int
    dropped_batches: int
    dropped_steps: int
    learner_restarts: list[dict[str, Any]]
    gen: int
    steps: int
    iteration: int

    # -- accounts -----------------------------------------------------------------------------------
    def resume_hint(self) -> str:
        """Which checkpoint a ``--resume`` would continue from, and the command."""
        newest = latest_checkpoint(self.run_dir)
        if newest is None:
            if self.runner.checkpoint_interval == 0 and not self.flow.final_checkpoint:
                return (
                    "no checkpoint was written (runner.checkpoint_interval: 0 turns them off), so the run "
                    "cannot be resumed: start it again, with runner.checkpoint_interval > 0 to let a restart "
                    "continue it"
                )
            return "no checkpoint was written yet, so the run cannot be resumed: start it again"
        cmd = f"rlinf train {self.run_dir / 'config.yaml'} --resume {self.run_dir}"
        return f"the newest checkpoint is {newest}; continue the run from it with `{cmd}`"

    def failed(self, role: str, rank: int, err: BaseException) -> tuple[int, int | None]:
        """The rank and process id that failed: the error's own when it names one of ``role``
        (a call on a whole group, such as a learner's, is keyed by rank 0 and its error names the
        root-cause rank), else ``rank`` and its process id as last noted."""
        if getattr(err, "component", None) == role and isinstance(getattr(err, "rank", None), int):
            rank = int(err.rank)  # type: ignore[attr-defined]
        known = self.pids.get(role, [])
        return rank, getattr(err, "pid", None) or (known[rank] if rank < len(known) else None)

    def account(self, role: str, rank: int, err: BaseException, where: str) -> str:
        """One line on how ``role`` rank ``rank`` failed ``where``: the rank and process id that
        failed (:meth:`failed`), the method it was in, and whether its process died."""
        rank, pid = self.failed(role, rank, err)
        method = getattr(err, "method", "?")
        kind = getattr(err, "error_type", type(err).__name__)
        how = {"WorkerDied": "its process died", "WorkerHung": getattr(err, "summary", kind)}.get(kind, kind)
        return f"{role} rank {rank}{f', pid {pid}' if pid else ''} failed in {method}() {where}: {how}"

    def count_restarts(self, what: str, n: int = 1) -> None:
        """Count ``n`` restarts against ``runner.max_restarts``; :class:`RunFailed` (``what``...)
        when they are used up."""
        limit = self.runner.max_restarts
        if self.restarts + n > limit:
            raise RunFailed(
                f"{what} and is not restarted: runner.max_restarts={limit} restarts are used up "
                f"({self.restarts} so far); {self.resume_hint()}"
            )
        self.restarts += n

    # -- restarts in place ------------------------------------------------------------------------
    def replace(self, role: str, ranks: list[int], configure: bool = True, what: str | None = None) -> None:
        """Restart the dead ``ranks`` of ``role`` on their placement (counted against
        ``runner.max_restarts``); the flow run brings them up to date (``after_restart``)."""
        self.count_restarts(what or f"{role} rank(s) {ranks} died", len(ranks))
        self.groups[role].restart(ranks, timeout=self.timeout)
        self.note_pids(role, ranks)  # before the flow run starts a long call on them (a serve loop)
        note = self.flow_run.after_restart(role, ranks, configure)
        self.log(f"restarted {role} rank(s) {ranks}{note or ''}")

    def replace_dead(
        self, dead: Mapping[tuple[str, int], BaseException], where: str, configure: bool = True
    ) -> str | None:
        """Handle the workers found dead ``where`` (``{(role, rank): error}``), each as its role's
        restart policy says: ``in_place`` ranks are restarted, a ``never`` role ends the run
        (:class:`RunFailed` naming it). Returns the reason when the learner died (restarted by
        the caller from a checkpoint, after the rest is settled), else ``None``.

        Calls handle their deaths one at a time: an asynchronous run has several iterations in
        flight, and each one that watched the dead rank reports it. A rank whose process the
        error names is no longer the rank's process was restarted already (by the call before):
        it is not restarted again (which would kill the new process, maybe in its start)."""
        with self.__dict__.setdefault("_replacing", threading.Lock()):
            return self._replace_dead(dead, where, configure)

    def _replace_dead(
        self, dead: Mapping[tuple[str, int], BaseException], where: str, configure: bool
    ) -> str | None:
        learner = None
        by_role: dict[str, list[int]] = {}
        for (role, rank), err in sorted(dead.items()):
            known, (at, failed) = self.pids.get(role, []), self.failed(role, rank, err)
            now = known[at] if at < len(known) else None
            if getattr(err, "pid", None) and now and failed != now:
                self.log(f"{self.account(role, rank, err, where)}; already restarted (now pid {now})")
                continue
            policy = self.flow_run.roles.get(role, "never")
            account = self.account(role, rank, err, where)
            if policy == "learner":
                learner = learner or f"{failure_reason(err)} ({where})"
                continue
            if policy == "never":
                holds = self.flow_run.holds.get(role, "state the run needs")
                raise RunFailed(
                    f"{account}; it holds {holds} and is not restarted in place: {self.resume_hint()}"
                )
            self.log(account)
            by_role.setdefault(role, []).append(rank)
        for role, ranks in by_role.items():
            # a rollout worker follows the learner's weights; when the learner is gone too, its
            # restart (next) rebuilds every rollout worker's policy
            self.replace(role, ranks, configure=configure and learner is None)
        return learner

    def drop(self, k: int, lost: int, why: str) -> None:
        """Count iteration ``k``'s partial batch (``lost`` progress units collected) as dropped and
        start the next generation of channel keys. The event starts with the root cause (the
        first line of ``why``), then the drop."""
        self.dropped_batches += 1
        self.dropped_steps += lost
        cause = (why.strip().splitlines() or ["a worker failed"])[0]
        self.log(
            f"{cause}; iteration {k}: dropped its partial batch ({lost} {self.flow_run.unit}s collected) after "
            f"this worker failure; generation {self.gen} -> {self.gen + 1}"
        )
        self.gen += 1

    def with_restarts(self, role: str, call: Callable[[], Any]) -> Any:
        """``call()`` (a call on ``role``'s workers between iterations); a rank found dead is
        named (the root cause first: its rank, pid and the call) and restarted (counted), and
        the call made again."""
        for _ in range(sum(getattr(g, "world_size", 1) for g in self.groups.values()) + 1):
            try:
                return call()
            except Exception as err:
                if not worker_died(err, role):
                    raise
                rank = int(getattr(err, "rank", 0))
                with self.__dict__.setdefault("_replacing", threading.Lock()):
                    self.log(self.account(role, rank, err, "between iterations"))
                    self.replace(role, [rank])
        return call()

    # -- the learner --------------------------------------------------------------------------------
    def recover_learner(self, reason: str) -> None:
        """The learner died: restart it from the newest checkpoint that loads (the run's start
        when none was due yet), or raise :class:`RunFailed` when it cannot be."""
        step, gen = self.steps, self.gen
        self.run_async(self.flow_run.settle_inflight())
        self.log(f"the learner (actor worker) died at {self.flow_run.unit} {step}: {reason}")
        while True:
            self.count_restarts(f"the learner (actor worker) died at {self.flow_run.unit} {step} ({reason})")
            path: Path | None = None
            state: dict[str, Any] | None = None
            try:
                if latest_checkpoint(self.run_dir) is not None or not self.runner.checkpoint_interval:
                    path, state = load_checkpoint(self.run_dir, self.flow.name)
                # else none is due yet: the run's start is the checkpoint, fewer than
                # checkpoint_interval units ago (the learner starts afresh, as it did)
            except UnsafeStateFile as err:  # a pickle: not loaded, and not a checkpoint to skip
                raise RunFailed(
                    f"the learner (actor worker) died at {self.flow_run.unit} {step} ({reason}) and is not "
                    f"restarted: {err}",
                    exit_code=err.exit_code,
                ) from None
            except RlinfError as err:  # none written (checkpoint_interval: 0), or none loads
                why = (
                    "there is no checkpoint to restart it from"
                    if latest_checkpoint(self.run_dir) is None
                    else err
                )
                raise RunFailed(
                    f"the learner (actor worker) died at {self.flow_run.unit} {step} ({reason}) and cannot be "
                    f"restarted: {why}; {self.resume_hint()}"
                ) from None
            try:
                self.flow_run.restart_learner(state)
            except LearnerDied as again:  # it died again while restarting
                reason = again.reason
                self.log(f"the restarted learner died too: {reason}")
                continue
            break
        run = (state or {}).get("run") or {"steps": 0, "iteration": 0, "episodes": 0, "recent_returns": [],
                                           "recent_lengths": [], "best": -math.inf}  # fmt: skip
        # the run counters go back to the checkpoint; the failure counters do not (those failures happened)
        self.steps, self.iteration = int(run["steps"]), int(run.get("iteration", 0))
        self.rec.rewind(run, self.steps)
        self.last_ckpt_step = self.steps
        self.gen += 1
        at = self.steps
        self.learner_restarts.append(
            {
                "step": step,
                "reason": reason,
                "checkpoint": str(path) if path else None,
                "steps_lost": step - at,
            }
        )
        for skipped in (state or {}).get("skipped_checkpoints", []):
            self.log(f"learner restart: skipped the damaged checkpoint {skipped}")
        origin = path.name if path is not None else "the start of the run (no checkpoint was due yet)"
        self.log(
            f"restarted the learner from {origin} ({self.flow_run.unit} {at}, iteration {self.iteration}): "
            f"{step - at} {self.flow_run.unit}s lost; generation {gen} -> {self.gen}"
        )

    # -- waiting on an iteration's calls ------------------------------------------------------------
    async def gather(
        self,
        calls: Mapping[tuple[str, int], Any],
        *,
        abort: Callable[[], None],
        learn: asyncio.Future[Any] | None = None,
        drain: Callable[[threading.Event], None] | None = None,
        watch: Mapping[tuple[str, int], asyncio.Future[Any]] | None = None,
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], BaseException | None]:
        """Wait for every call (``{(role, rank): call}``); a worker whose process died goes to
        ``dead``, another error to ``fatal``. On the first failure (or a result that says
        ``aborted``) ``abort()`` ends the iteration for everyone, so the survivors return.
        ``watch``: long-running calls (a rollout rank's serve loop) whose end during the wait
        means that worker failed. Once the iteration is ended, the calls still running get
        ``runner.worker_timeout`` to return; one that does not goes to ``dead`` as a
        :class:`WorkerHung` (restarted like a dead worker: its process is killed). ``learn``
        (the iteration's learning side) is watched: if the learner dies meanwhile, ``drain``
        takes what the iteration leaves on its channels until the calls return (no producer waits
        on a bounded key nobody reads) and the death is returned last. Returns ``(results, dead, fatal, learner error)``."""
        futs = {asyncio.ensure_future(await_call(c)): key for key, c in calls.items()}
        watched = {f: key for key, f in (watch or {}).items()}
        results: dict[Any, Any] = {}
        dead: dict[Any, Any] = {}
        fatal: dict[Any, Any] = {}
        pending = set(futs)
        aborted = False
        learner_err: BaseException | None = None
        follow = learn
        stop_drain: threading.Event | None = None
        drained: Any = None
        loop = asyncio.get_running_loop()

        deadline: float | None = None

        async def end() -> None:
            nonlocal aborted, deadline
            if not aborted:
                aborted = True
                await loop.run_in_executor(None, abort)
                deadline = loop.time() + self.timeout

        while pending:
            waiting = pending | set(watched) | ({follow} if follow is not None else set())
            left = None if deadline is None else deadline - loop.time()
            done: set[Any] = set()
            if left is None or left > 0:
                done, _ = await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if not done and deadline is not None and loop.time() >= deadline:
                for f in pending:  # ended, but still running: stopped or stuck
                    role, rank = futs[f]
                    known = self.pids.get(role, [])
                    pid = known[rank] if rank < len(known) else None
                    method = getattr(calls[(role, rank)], "method", "?")
                    dead[(role, rank)] = WorkerHung(role, rank, pid, method, self.timeout)
                    f.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved
                break
            if follow is not None and follow in done:
                err = None if follow.cancelled() else follow.exception()
                follow = None
                if err is not None and worker_died(err, "actor"):
                    learner_err = err
                    if drain is not None:
                        stop_drain = threading.Event()
                        drained = loop.run_in_executor(None, drain, stop_drain)
            for f in done:
                if f in watched:
                    key = watched.pop(f)
                    err = None if f.cancelled() else f.exception()
                    dead[key] = (
                        err if err is not None else RlinfError(f"{key[0]} rank {key[1]}: its loop ended")
                    )
                    await end()
                    continue
                if f not in futs:
                    continue
                pending.discard(f)
                key = futs[f]
                err = f.exception()
                if err is None:
                    results[key] = f.result()[0]
                    if isinstance(results[key], dict) and results[key].get("aborted"):
                        await end()
                elif worker_died(err):
                    dead[key] = err
                else:
                    fatal[key] = err
                if dead or fatal:
                    await end()
        if stop_drain is not None:
            stop_drain.set()
            await drained
        return results, dead, fatal, learner_err

    # -- helpers the driver provides ------------------------------------------------------------
    def note_pids(self, role: str, ranks: list[int] | None = None) -> None:
        """Ask ``role``'s workers (``ranks``, default all) for their process ids."""
        group = self.groups[role]
        try:
            view = group if ranks is None else group.on(ranks)
            got = view.pid().wait(self.timeout)
        except AttributeError:  # a worker class without pid()
            return
        pids = self.pids.setdefault(role, [0] * getattr(group, "world_size", len(got)))
        for r, pid in zip(ranks if ranks is not None else range(len(got)), got, strict=True):
            pids[r] = int(pid)

    # provided by the driver
    flow: Any
    runner: Any
    rec: Any
    last_ckpt_step: int

    def log(self, message: str) -> None:  # pragma: no cover - the driver's
        raise NotImplementedError

    def run_async(self, work: Any) -> Any:  # pragma: no cover - the driver's
        raise NotImplementedError

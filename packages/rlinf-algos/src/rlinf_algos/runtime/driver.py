"""The one driver: the single controller of every run, whatever the algorithm family.

An algorithm is a *flow* (:class:`~rlinf_algos.flow.Flow`: what each role does in an iteration,
which roles there are and what their death costs, its metrics columns and summary figures). The
flow gives the driver its :class:`~rlinf_algos.flow.FlowRun` over the role workers (one
:mod:`~rlinf_algos.runtime.workers` class per role) of the driver's scheduler: Ray's processes,
or, for ``runner.scheduler: local`` (``scheduler=None``), the in-process scheduler's worker
objects in this process (:mod:`~rlinf_algos.runtime.inprocess`): one iteration loop whichever
runs it. The driver owns the rest of the run's life, once for every family:

- the run directory and its records (:class:`~rlinf_algos.runtime.recorder.RunRecorder`: metrics rows,
  ``metrics.csv`` / ``metrics.jsonl``, the progress callback that feeds the loggers and the
  progress bar);
- the role -> worker-group map (:meth:`launch`), their process ids, their shutdown (all at once);
- what the run needs of the cluster, through :class:`rlinf_core.Scheduler`'s interface only (so
  any scheduler plugin runs any flow): channels (:meth:`channel`), the weight sync
  (:meth:`weight_sync`, ``rollout.weight_sync``) and the direct links (:meth:`links`);
- checkpoints: their cadence (``runner.checkpoint_interval``; on workers written *before* an
  iteration would take the run past the interval, so a learner restart loses at most that many
  units), atomic writes in the flow's layout (``checkpoints/step_<n>.safetensors`` for embodied
  runs, ``checkpoints/step_<n>/`` for language-model runs), ``--resume`` from the newest one that
  loads (damaged ones skipped with a warning);
- SIGTERM and Ctrl-C (:class:`~rlinf_algos.runtime.stop.DeferredStop`): the iteration in flight
  finishes, then a checkpoint, the metrics, the policy and the summary are written and
  :class:`~rlinf_algos.training.TrainingInterrupted` is raised; a second Ctrl-C stops at
  once (the checkpoint is still attempted);
- worker deaths (:mod:`~rlinf_algos.runtime.recovery`): restarts in place, dropped batches, the
  learner restarted from checkpoints, and :class:`~rlinf_algos.runtime.recovery.RunFailed`
  after the policy and the summary are written;
- the summary: the counters (``restarts``, ``dropped_batches``, ``learner_restarts``,
  ``events``, ``resumed_from``), what the flow adds, ``error`` when the run failed.

The driver never names an algorithm. Its loop::

    start (resume: load the checkpoint) -> [checkpoint if due -> step] until done or stopped
    -> drain what is in flight -> last row -> checkpoint -> policy -> summary
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlinf_algos.rundir import load_checkpoint, write_checkpoint, write_summary
from rlinf_algos.runtime.recorder import RunRecorder
from rlinf_algos.runtime.recovery import (
    LearnerDied,
    Recovery,
    RunFailed,
    failure_reason,
    out_of_memory,
    out_of_memory_message,
    user_error,
)
from rlinf_algos.runtime.stop import DeferredStop
from rlinf_core.errors import RlinfError
from rlinf_core.links import Links
from rlinf_core.weights import WeightSync

__all__ = ["STOP_GRACE_S", "Driver", "StopUnwaited"]

STOP_GRACE_S = 3.0
"""Seconds a stop (SIGTERM, Ctrl-C) waits for the iteration in flight before it stops without it,
at least; twice the run's longest iteration so far when that is longer (an iteration that is only
long, a language model's, still ends and is checkpointed; one blocked in a user's env is not
waited for)."""

HARD_STOP_CHECKPOINT_S = 5.0
"""Seconds a hard stop (a second Ctrl-C) waits for the workers' state for its checkpoint."""


def _in_daemon_thread(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
    """``fn(*args, **kwargs)`` on a daemon thread of its own; its future."""
    fut: Future[Any] = Future()

    def run() -> None:
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as err:
                fut.set_exception(err)

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


class StopUnwaited(Exception):
    """A stop was asked for ``waited`` seconds ago (``reason``: SIGTERM or Ctrl-C) and the
    iteration in flight has not ended."""

    def __init__(self, reason: str, waited: float) -> None:
        super().__init__(f"{reason}: the iteration in flight did not end within {waited:.0f} s")
        self.reason, self.waited = reason, waited


ProgressFn = Callable[[dict[str, Any]], None]


class Driver(Recovery):
    """One run of ``flow`` (see the module docstring). Build it, call :meth:`run`.

    Args:
        flow: the algorithm's flow (:class:`~rlinf_algos.flow.Flow`).
        scheduler: a started :class:`rlinf_core.scheduler.Scheduler`, or ``None``: an
            :class:`~rlinf_algos.runtime.inprocess.InProcessScheduler` of the driver's own (every
            role in this process; ``runner.scheduler: local``), shut down at the run's end.
        run_dir: the run directory.
        resume: continue from the newest checkpoint of ``run_dir``.
        progress: called with every metrics row.
        callbacks: hooks a flow run calls at points it reports (``on_iteration``,
            ``on_collecting``, ``on_generating``...), with the flow run as first argument.
        rollout_only: run the workers that collect, without learning (a throughput benchmark).
        say: where the flow's lines for people go (``None``: nowhere).

    Attributes a test or a callback may read (through the flow run, which forwards them):
    ``groups`` (``{role: worker group}``), ``pids`` (``{role: [process id by rank]}``, renewed
    after every restart), ``steps``, ``iteration``, ``gen`` (the channel-key generation),
    ``restarts``, ``dropped_batches``, ``learner_restarts``, ``events``.
    """

    def __init__(
        self,
        flow: Any,
        scheduler: Any,
        run_dir: Path,
        *,
        resume: bool = False,
        progress: ProgressFn | None = None,
        callbacks: Mapping[str, Callable[..., Any]] | None = None,
        rollout_only: bool = False,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.flow = flow
        self.runner = flow.runner
        self.scheduler = scheduler
        self.run_dir = Path(run_dir)
        self.resume = resume
        self.progress = progress
        self.callbacks = dict(callbacks or {})
        self.rollout_only = rollout_only
        self.say = say or (lambda _msg: None)
        self.timeout = float(self.runner.worker_timeout)
        self.groups: dict[str, Any] = {}
        self.pids: dict[str, list[int]] = {}
        self.steps = 0
        self.iteration = 0
        self.gen = 0
        self.restarts = 0
        self.dropped_batches = 0
        self.dropped_steps = 0
        self.learner_restarts: list[dict[str, Any]] = []
        self.events: list[str] = []
        self.resumed_from: str | None = None
        self.weight_sync_info: dict[str, Any] | None = None
        self.last_ckpt_step = 0
        self.last_checkpoint: Path | None = None
        self.interrupted = False
        self.unwaited = False  # a stop that did not wait for the iteration in flight
        self.longest_iteration_s = 0.0  # of this process's iterations (a stop's grace)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.own_scheduler: Any = None
        if scheduler is None:  # runner.scheduler: local: every role in this process
            from rlinf_algos.runtime.inprocess import InProcessScheduler

            scheduler = self.own_scheduler = InProcessScheduler(torch_threads=int(self.runner.torch_threads))
            scheduler.start()
            self.scheduler = scheduler
        from rlinf_core.scheduler import Scheduler

        if not isinstance(scheduler, Scheduler):
            raise RlinfError(
                f"the driver needs a started rlinf_core.Scheduler (e.g. the `ray` plugin's), "
                f"got {type(scheduler).__name__}; pass scheduler=None to train in this process"
            )
        self.flow_run = flow.placed(self)

    # -- services for the flow runs ------------------------------------------------------------
    def log(self, message: str) -> None:
        """An event of the run (``events`` in the summary) and a warning in the log."""
        self.events.append(message)
        logging.getLogger("rlinf.train").warning(message)

    def run_async(self, work: Any) -> Any:
        """``work``'s result: run it on the driver's event loop when it is a coroutine (a flow run
        on workers awaits its calls there; futures it keeps between iterations stay on it)."""
        if not inspect.isawaitable(work):
            return work
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(work)

    def plan(self, role: str) -> Any:
        """The scheduler's placement of ``role`` (``None``: not placed, or no plan)."""
        plan = getattr(self.scheduler, "plan", None)
        try:
            return plan[role] if plan is not None else None
        except (KeyError, TypeError):
            return None

    def world(self, role: str) -> int | None:
        """How many processes ``role`` is placed on (``None``: the scheduler does not say)."""
        plan = self.plan(role)
        try:
            return int(plan.world_size) if plan is not None else None
        except (AttributeError, TypeError):
            return None

    def channel(self, name: str, near: str, **options: Any) -> Any:
        """The scheduler's channel ``name``, on the node of ``near``'s first process (its reader)."""
        plan = self.plan(near)
        try:
            options.setdefault("node_rank", int(plan.processes[0].node_rank))
        except (AttributeError, IndexError, TypeError):
            pass
        return self.scheduler.channel(name, **options)

    def weight_sync(
        self, name: str, mode: str, roles: Iterable[str], *, adapter_only: bool = False
    ) -> WeightSync:
        """A new weight sync ``name`` for the learner's rank 0 and the consumers of ``roles``
        (``rollout``, ``reference``...), in ``mode`` (``rollout.weight_sync``) decided against
        their planned devices (:func:`~rlinf_algos.weight_sync.choose_weight_sync`;
        ``adapter_only``: a LoRA adapter alone is published). Created by the scheduler
        (:meth:`rlinf_core.Scheduler.weight_sync`), which destroys it at its shutdown; a learner
        restarted from a checkpoint gets a new one (``runner.scheduler: local``: the in-process
        scheduler's, one snapshot per publish shared by reference)."""
        from rlinf_algos.devices import plan_devices
        from rlinf_algos.weight_sync import choose_weight_sync

        plan = getattr(self.scheduler, "plan", None)  # a scheduler that places nothing has none
        devices = plan_devices(plan, str(getattr(self.runner, "device", "cpu")))
        chosen, members = choose_weight_sync(
            mode, devices, adapter_only=adapter_only, roles=("actor", *roles)
        )
        handle = self.scheduler.weight_sync(name, mode=chosen, devices=members or None, timeout=self.timeout)
        self.weight_sync_info = {"requested": mode, "mode": str(getattr(handle, "mode", chosen))}
        return handle

    def links(self) -> Links:
        """The run's direct links (:meth:`rlinf_core.Scheduler.links`), with a fresh secret that
        travels only as a call argument."""
        return self.scheduler.links(secrets.token_hex(16))

    def launch(self, launches: Mapping[str, tuple[type, tuple[Any, ...], dict[str, Any]]]) -> None:
        """Start every role of ``launches`` (``{role: (worker class, args, kwargs)}``) at once
        (their imports overlap), note their process ids; the groups of roles restarted in place
        or from checkpoints keep their other ranks when one fails."""
        todo = {name: spec for name, spec in launches.items() if name not in self.groups}
        # daemon threads: a Ctrl-C or SIGTERM while a role's set-up is blocked (a user's env that
        # does not return) is not held by them, nor is the process's exit
        futs = {
            name: _in_daemon_thread(f"rlinf-launch-{name}", self.scheduler.launch, name, cls, *args, **kwargs)
            for name, (cls, args, kwargs) in todo.items()
        }
        failed: BaseException | None = None
        for name, fut in futs.items():
            try:
                self.groups[name] = fut.result()  # the others are kept, so the teardown stops them
            except Exception as err:
                failed = failed or err
        if failed is not None:  # a role's set-up failed on the user's mistake: its one line
            raise user_error(failed) or failed
        for name in todo:
            if self.flow_run.roles.get(name, "never") != "never" and hasattr(
                self.groups[name], "stop_on_failure"
            ):
                self.groups[name].stop_on_failure = False
            self.note_pids(name)

    def callback(self, name: str, *args: Any) -> None:
        """Call the hook ``name`` (if given) with the flow run and ``args``."""
        fn = self.callbacks.get(name)
        if fn is not None:
            fn(self.flow_run, *args)

    def row(self, step: int, metrics: Mapping[str, Any], force: bool = False) -> dict[str, Any] | None:
        """A metrics row at ``step`` (written when ``log_interval`` units passed, or ``force``)."""
        return self.rec.row(step, metrics, force=force)

    # -- checkpoints ---------------------------------------------------------------------------
    def run_counters(self) -> dict[str, Any]:
        """The driver's part of a checkpoint (``run``)."""
        return {
            "steps": self.steps,
            "iteration": self.iteration,
            **self.rec.state(),
            "restarts": self.restarts,
            "dropped_batches": self.dropped_batches,
            "dropped_env_steps": self.dropped_steps,
            "learner_restarts": list(self.learner_restarts),
            "events": list(self.events[-20:]),
        }

    def checkpoint(self) -> Path:
        """Write the checkpoint of the current step atomically (nothing may be in flight)."""
        part = dict(self.flow_run.state())
        state = {"algorithm": self.flow.name, **part, "run": {**self.run_counters(), **part.get("run", {})}}
        path = write_checkpoint(
            self.run_dir,
            self.steps,
            state,
            layout=self.flow.checkpoint_layout,
            keep=self.flow.keep_checkpoints,
        )
        self.last_ckpt_step, self.last_checkpoint = self.steps, path
        return path

    def _restore(self, path: Path, state: dict[str, Any]) -> None:
        """Continue from ``state`` (the checkpoint at ``path``): the flow run's part, then the run counters."""
        self.flow_run.load(state)
        run = state.get("run") or self.flow_run.legacy_run_counters(state)
        self.steps = int(run["steps"])
        self.iteration = int(run.get("iteration", self.steps))
        self.rec.load(run, self.steps)
        self.restarts = int(run.get("restarts", 0))
        self.dropped_batches = int(run.get("dropped_batches", 0))
        self.dropped_steps = int(run.get("dropped_env_steps", 0))
        self.learner_restarts = list(run.get("learner_restarts", []))
        self.events = [str(e) for e in run.get("events", [])]
        self.resumed_from = str(path)
        self.last_checkpoint = path
        for skipped in state.get("skipped_checkpoints", []):
            self.log(f"resume: skipped the damaged checkpoint {skipped}")

    def _checkpoint_if_due(self) -> None:
        """Before an iteration: a checkpoint when the units since the last one reach
        ``runner.checkpoint_interval`` (on workers: when the next iteration would take them past it,
        so a learner restart loses at most the interval)."""
        interval = self.runner.checkpoint_interval if not self.rollout_only else 0
        since = self.steps - self.last_ckpt_step
        ahead = self.flow_run.lookahead
        if interval and since > 0 and (since + ahead > interval if ahead else since >= interval):
            self.run_async(self.flow_run.drain())
            self.checkpoint()

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Run the flow to its end; returns the summary (also in ``summary.json``)."""
        from rlinf_algos.training import TrainingInterrupted

        self.run_dir.mkdir(parents=True, exist_ok=True)
        resumed = load_checkpoint(self.run_dir, self.flow.name) if self.resume else None
        flow_run = self.flow_run
        hard_stop = False
        try:
            try:
                flow_run.start(resumed[1] if resumed else None)
                self.rec = RunRecorder(
                    self.run_dir,
                    flow_run.log_interval,
                    flow_run.columns() if "csv" in self.runner.loggers else None,
                    flow_run.episodes,
                    self.progress,
                    resume=self.resume,
                    jsonl=flow_run.jsonl,
                )
                if resumed is not None:
                    self._restore(*resumed)
                self.last_ckpt_step = self.steps
                self.rec.start_clock(self.steps)
                with DeferredStop() as stop:
                    try:
                        self._loop_until_done(stop)
                    except KeyboardInterrupt:  # a second Ctrl-C, or one raised inside a step
                        hard_stop = True
                    except StopUnwaited as unwaited:
                        raise self._stop_unwaited(unwaited) from None
                    self.interrupted = hard_stop or stop.requested
                    reason = stop.reason if stop.requested else "Ctrl-C"
                if hard_stop:
                    if not flow_run.checkpoint_on_hard_stop:
                        raise KeyboardInterrupt
                    self._hard_stop()
            except RunFailed as err:
                raise self._failed(err) from None
            summary = self._finish()
            if self.interrupted:
                self.say(
                    f"{reason}: stopped at {flow_run.unit} {self.steps}; wrote a checkpoint, the metrics, the policy "
                    "and summary.json"
                )
                raise TrainingInterrupted(self.run_dir, self.last_checkpoint)
            return summary
        except RlinfError as err:
            raise flow_run.user_error(err) from None
        finally:
            self._teardown()

    def _loop_until_done(self, stop: DeferredStop) -> None:
        while True:
            try:
                if self._turn(stop):
                    return
            except LearnerDied as died:
                self.recover_learner(died.reason)
            except Exception as err:  # out of memory: ends the run, never restarted into it again
                if not out_of_memory(err):
                    raise
                self.log(f"out of memory: {failure_reason(err)}")
                raise RunFailed(out_of_memory_message(err, self.resume_hint())) from None

    def _turn(self, stop: DeferredStop) -> bool:
        """One turn of the loop: an iteration, or (budget spent, or stopped) the ending: what is
        in flight finishes, the last row, the checkpoint, the final policy. ``True``: done."""
        flow_run = self.flow_run
        if stop.requested or flow_run.done():
            self.run_async(flow_run.drain())
            if not stop.requested:
                flow_run.last_row()
            wanted = stop.requested or self.runner.checkpoint_interval or self.flow.final_checkpoint
            fresh = self.steps != self.last_ckpt_step or self.last_checkpoint is None
            if wanted and fresh and not self.rollout_only and (self.steps > 0 or stop.requested):
                self.checkpoint()
            self.run_async(flow_run.final_policy())
            return True
        self._checkpoint_if_due()
        self._step_or_stop(stop)
        return False

    def _step_or_stop(self, stop: DeferredStop) -> None:
        """One iteration (``flow_run.step()``); when a stop is asked for and the iteration does not
        end within the grace of :data:`STOP_GRACE_S` of it (a call blocked in a user's env, say),
        it is not waited for: :class:`StopUnwaited` (the driver then writes only what needs no
        worker)."""
        began = time.monotonic()
        grace = max(STOP_GRACE_S, 2.0 * self.longest_iteration_s)
        work = self.flow_run.step()
        if not inspect.isawaitable(work):
            return
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        loop = self._loop
        task = asyncio.ensure_future(work, loop=loop)
        while not task.done():
            loop.run_until_complete(asyncio.wait({task}, timeout=0.25))
            if not task.done() and stop.requested and time.monotonic() - stop.at >= grace:
                task.cancel()
                loop.run_until_complete(asyncio.wait({task}, timeout=1.0))
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: the stop ends the run anyway
                raise StopUnwaited(stop.reason, time.monotonic() - stop.at)
        task.result()
        self.longest_iteration_s = max(self.longest_iteration_s, time.monotonic() - began)

    def _stop_unwaited(self, unwaited: StopUnwaited) -> BaseException:
        """A stop whose iteration in flight did not end in time: keep the metrics rows written so
        far, skip what needs a worker's answer (the interrupt checkpoint, the policy,
        ``summary.json``, the workers' own teardown: each may wait on the call that is blocked),
        say so, and return the :class:`~rlinf_algos.training.TrainingInterrupted` to raise."""
        from rlinf_algos.training import TrainingInterrupted

        self.interrupted = self.unwaited = True
        self.rec.close()
        kept = (
            f"the last checkpoint is {self.last_checkpoint}"
            if self.last_checkpoint
            else "no checkpoint was written"
        )
        skipped = (
            f"the iteration in flight did not end within {unwaited.waited:.0f} s of the "
            f"request (a worker's call is blocked); stopped without it at {self.flow_run.unit} {self.steps}: "
            f"skipped the interrupt checkpoint, the policy, summary.json and the workers' teardown; "
            f"metrics.csv holds the rows written; {kept}"
        )
        return TrainingInterrupted(self.run_dir, self.last_checkpoint, skipped=skipped)

    def _hard_stop(self) -> None:
        """A stop that could not wait for the iteration in flight: end it, then write what can be
        written (a checkpoint, when the learner answers)."""
        try:
            self._bounded(self.flow_run.abort(), STOP_GRACE_S)
        except TimeoutError:
            self.log(f"the iteration in flight did not abort within {STOP_GRACE_S:g} s; left to it")
        except Exception as err:
            self.log(f"could not abort the iteration in flight: {err}")
        if self.rollout_only:
            return
        try:
            self._bounded(self.flow_run.drain(), STOP_GRACE_S)
            # the workers' state is asked of them: one blocked in a user's env never answers
            _in_daemon_thread("rlinf-stop-checkpoint", self.checkpoint).result(HARD_STOP_CHECKPOINT_S)
        except TimeoutError:  # a call blocked in a user's env, say: the stop does not wait for it
            self.log(
                "skipped the interrupt checkpoint: the iteration in flight did not end within "
                f"{STOP_GRACE_S:g} s of the hard stop, or its workers did not give their state within "
                f"{HARD_STOP_CHECKPOINT_S:g} s"
            )
        except Exception as err:  # report it; still write the policy and the summary
            self.log(f"could not write the interrupt checkpoint: {err}")

    def _bounded(self, work: Any, timeout: float) -> Any:
        """:meth:`run_async` of ``work``, waiting at most ``timeout`` s (then ``TimeoutError``)."""
        if not inspect.isawaitable(work):
            return work
        return self.run_async(asyncio.wait_for(work, timeout))

    def _failed(self, err: RunFailed) -> RunFailed:
        """A run that cannot go on: write the policy and the summary (with ``error``) first. When
        the flow cannot write its files (the process holding the policy died), summary.json
        still records how the run ended, without the flow's own figures."""
        files = self.flow_run.failure_files
        try:
            self._finish(error=str(err))
            note = f". {files} and summary.json are written."
        except Exception as fin:  # say so, and still give the first error
            note = f"{'' if str(err).endswith('.') else '.'} Writing {files} failed too: {fin}"
            try:
                self._write_summary({"interrupted": self.interrupted}, f"{err}{note}")
                note += "; summary.json is written."
            except Exception as again:
                note += f"; summary.json could not be written either: {again}"
        return RunFailed(f"{err}{note}", exit_code=err.exit_code)

    def _finish(self, error: str | None = None) -> dict[str, Any]:
        if getattr(self, "rec", None) is None:
            raise RlinfError("the run ended before it started")
        self.rec.close()
        return self._write_summary(
            dict(self.flow_run.finish(interrupted=self.interrupted, error=error)), error
        )

    def _write_summary(self, summary: dict[str, Any], error: str | None) -> dict[str, Any]:
        """``summary`` (the flow's figures) with the runtime's counters and ``error``, written
        atomically to summary.json."""
        summary.update(
            {
                "restarts": self.restarts,
                "dropped_batches": self.dropped_batches,
                "learner_restarts": self.learner_restarts,
                "resumed_from": self.resumed_from,
                "events": self.events[-20:],
            }
        )
        if self.weight_sync_info is not None:
            summary["weight_sync"] = dict(self.weight_sync_info)
        if error is not None:
            summary["error"] = error
        write_summary(self.run_dir, summary)
        return summary

    def _teardown(self) -> None:
        """Stop the flow run and every worker group, all at once (a preempted job has about 30 s
        before SIGKILL)."""
        wait = 1.0 if self.unwaited else 10.0  # a stop that did not wait: nor does the teardown
        if not self.unwaited:
            try:
                self.run_async(self.flow_run.close())
            except Exception as err:
                logging.getLogger("rlinf.train").warning("closing the run: %s", err)

        def stop(group: Any) -> None:
            try:
                group.shutdown(timeout=wait)
            except Exception:
                pass

        if self.groups:
            with ThreadPoolExecutor(len(self.groups)) as pool:
                list(pool.map(stop, self.groups.values()))
        if self._loop is not None:
            # calls an aborted iteration cancelled still need one turn of the loop to end
            # (otherwise "Task was destroyed but it is pending!" at exit)
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.wait(pending, timeout=5.0))
            self._loop.close()
            self._loop = None
        if self.own_scheduler is not None:
            self.own_scheduler.shutdown()

"""Restarting workers of a distributed run: env and rollout workers in place, the learner from
the newest checkpoint (:class:`RecoveryMixin`, a part of
:class:`~rlinf_algos.runtime.distributed.DistributedRun`), and the errors that end a run when a
worker cannot come back. The policy of what is restarted and what is dropped is described in
:mod:`rlinf_algos.runtime.distributed`.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlinf_algos.flow import await_call
from rlinf_algos.run_files import UnsafeStateFile
from rlinf_algos.rundir import latest_checkpoint, load_checkpoint
from rlinf_core.errors import RlinfError

__all__ = ["LearnerDied", "RecoveryMixin", "RunFailed", "failure_reason", "worker_died"]


class RunFailed(RlinfError):
    """A worker died and could not be restarted (``runner.max_restarts`` used up, or the learner
    died with checkpoints turned off); the message names the newest checkpoint and the
    ``--resume`` command. ``policy.safetensors`` and ``summary.json`` (with ``error``) are written
    first. ``exit_code`` 2 when the cause is a file rlinf refuses to load (a legacy pickle)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class LearnerDied(Exception):
    """The actor worker's process died (``reason``: where and how)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def worker_died(err: BaseException, component: str | None = None) -> bool:
    """``err`` says a worker's process died (of ``component``, when given)."""
    return getattr(err, "error_type", "") == "WorkerDied" and (
        component is None or getattr(err, "component", None) == component
    )


def failure_reason(err: BaseException) -> str:
    method, summary = getattr(err, "method", None), getattr(err, "summary", None)
    return f"{method}(): {summary}" if method and summary else str(err).splitlines()[0]


class RecoveryMixin:
    """Worker restarts of a :class:`~rlinf_algos.runtime.distributed.DistributedRun` (uses its
    groups, channels, recorder and settings)."""

    def _count_restarts(self, what: str, n: int = 1) -> None:
        """Count ``n`` restarts against ``runner.max_restarts``; :class:`RunFailed` (``what``
        died...) when they are used up."""
        limit = self.runner_cfg.max_restarts
        if self.restarts + n > limit:
            raise RunFailed(
                f"{what} and is not restarted: runner.max_restarts={limit} restarts are used up "
                f"({self.restarts} so far); {self._resume_hint()}"
            )
        self.restarts += n

    def _resume_hint(self) -> str:
        """Which checkpoint a ``--resume`` would continue from, and the command."""
        newest = latest_checkpoint(self.run_dir)
        if newest is None:
            if self.runner_cfg.checkpoint_interval == 0:
                return (
                    "no checkpoint was written (runner.checkpoint_interval: 0 turns them off), so the run "
                    "cannot be resumed: start it again, with runner.checkpoint_interval > 0 to let a restart "
                    "continue it"
                )
            return "no checkpoint was written yet, so the run cannot be resumed: start it again"
        cmd = f"rlinf train {self.run_dir / 'config.yaml'} --resume {self.run_dir}"
        return f"the newest checkpoint is {newest}; continue the run from it with `{cmd}`"

    def _replace(self, comp: str, ranks: list[int], configure: bool = True) -> None:
        """Restart dead env or rollout ``ranks`` (counted against ``runner.max_restarts``)."""
        self._count_restarts(f"{comp} rank(s) {ranks} died", len(ranks))
        self._restart(comp, ranks, configure)
        pulled = "; they pulled the newest weights" if comp == "rollout" and configure else ""
        self._log(f"restarted {comp} rank(s) {ranks}{pulled}")

    def _restart(self, comp: str, ranks: list[int], configure: bool = True) -> None:
        group = self.groups[comp]
        group.restart(ranks, timeout=self.timeout)
        if comp == "rollout":  # rebuild the policy, pull the newest weights, listen anew
            if configure:
                self._configure_rollouts(group.on(ranks))
            for r, addr in zip(ranks, group.on(ranks).link_address().wait(self.timeout), strict=True):
                self.link_addrs[r] = tuple(addr)
        self._note_pids(comp, ranks)

    def _configure_rollouts(self, view: Any) -> None:
        """``configure`` rollout workers (``view``) on the current weight broadcast, which exists
        already: if they cannot reach it, its learner may have died since (then
        :class:`LearnerDied`)."""
        try:
            view.configure(self.spec, weights=self.weights, connect_timeout=min(self.timeout, 30.0)).wait(
                self.timeout
            )
        except Exception as err:
            if worker_died(err):
                raise
            raise self._learner_dead_or(err) from err

    def _learner_dead_or(self, err: BaseException) -> BaseException:
        """After ``err`` on another worker's call that needs the learner's weights:
        :class:`LearnerDied` if the learner's process is dead, else ``err``."""
        try:
            self.groups["actor"].version().wait(min(self.timeout, 60.0))
        except Exception as probe:
            if worker_died(probe, "actor"):
                first = str(err).splitlines()[0][:200]
                return LearnerDied(f"{failure_reason(probe)} (found dead after: {first})")
        return err

    def _with_restarts(self, comp: str, call: Callable[[], Any]) -> Any:
        """``call()`` (a call on ``comp``'s workers between iterations); a rank found dead is
        restarted (counted) and the call made again."""
        for _ in range(self.N + self.M + 1):
            try:
                return call()
            except Exception as err:
                if not worker_died(err, comp):
                    raise
                self._replace(comp, [int(getattr(err, "rank", 0))])
        return call()

    async def _recover_learner(self, reason: str) -> None:
        """The actor worker died: restart it from the newest checkpoint that loads (see the
        module docstring), or raise :class:`RunFailed` when it cannot be."""
        step, gen = self.steps, self.gen
        await self._settle_inflight()
        self._log(f"the learner (actor worker) died at env step {step}: {reason}")
        loop = asyncio.get_running_loop()
        while True:
            self._count_restarts(f"the learner (actor worker) died at env step {step} ({reason})")
            path: Path | None = None
            state: dict[str, Any] | None = None
            try:
                if latest_checkpoint(self.run_dir) is not None or not self.runner_cfg.checkpoint_interval:
                    path, state = load_checkpoint(self.run_dir, self.name)
                # else none is due yet: the run's start is the checkpoint, fewer than
                # checkpoint_interval env steps ago (the learner starts afresh, as it did)
            except UnsafeStateFile as err:  # a pickle: not loaded, and not a checkpoint to skip
                raise RunFailed(
                    f"the learner (actor worker) died at env step {step} ({reason}) and is not restarted: {err}",
                    exit_code=err.exit_code,
                ) from None
            except RlinfError as err:  # none written (checkpoint_interval: 0), or none loads
                why = (
                    "there is no checkpoint to restart it from"
                    if latest_checkpoint(self.run_dir) is None
                    else err
                )
                raise RunFailed(
                    f"the learner (actor worker) died at env step {step} ({reason}) and cannot be restarted: "
                    f"{why}; {self._resume_hint()}"
                ) from None
            try:
                await loop.run_in_executor(None, self._restart_learner, state)
            except LearnerDied as again:  # it died again while restarting
                reason = again.reason
                self._log(f"the restarted learner died too: {reason}")
                continue
            break
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
            self._log(f"learner restart: skipped the damaged checkpoint {skipped}")
        origin = path.name if path is not None else "the start of the run (no checkpoint was due yet)"
        self._log(
            f"restarted the learner from {origin} (env step {at}, iteration {self.iteration}): "
            f"{step - at} env steps lost; generation {gen} -> {self.gen}"
        )

    async def _settle_inflight(self) -> None:
        """End every update in flight (they were the dead learner's) and take what their
        iterations left off the channel."""
        keys = [key for k, _ in self.inflight for key in self.inflight_keys.get(k, [])]
        futs = [fut for _, fut in self.inflight]
        self.inflight.clear()
        self.inflight_keys.clear()
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        stop.set()  # one pass each time
        if keys:  # make room on bounded keys, then end whatever still waits on them
            await loop.run_in_executor(None, self._drain, keys, stop)
            await loop.run_in_executor(None, self._put_abort, keys, 5.0)
        if futs:
            await asyncio.wait(futs, timeout=self.timeout)
            for fut in futs:
                if fut.done() and not fut.cancelled():
                    fut.exception()  # retrieved: the learner's death, already handled
                else:
                    fut.cancel()
        if keys:
            await loop.run_in_executor(None, self._drain, keys, stop)

    def _restart_learner(self, state: dict[str, Any] | None) -> None:
        """Replace the actor's process, load ``state`` (a checkpoint; ``None``: start afresh)
        into it, point the rollout workers at its new weight broadcast and take the run's books
        back to the checkpoint."""
        group = self.groups["actor"]
        self.weights = f"{self.weights_base}-r{len(self.learner_restarts) + 1}-{secrets.token_hex(2)}"
        actor_state = state["actor"] if state is not None else None
        try:
            group.restart(timeout=self.timeout)  # every rank: the learner group meets anew
            init = {"init": self.init_weights} if actor_state is None and self.init_weights else {}
            group.configure(self.spec, weights=self.weights, state=actor_state, **init).wait(self.timeout)
        except Exception as err:
            if worker_died(err, "actor"):
                raise LearnerDied(f"{failure_reason(err)} (restarting)") from err
            raise
        self._note_pids("actor")
        if state is None:  # the run's start: a fresh learner, the books empty
            state = {"run": {"steps": 0, "iteration": 0, "episodes": 0, "recent_returns": [],
                             "recent_lengths": [], "best": -math.inf}}  # fmt: skip
        run = state["run"]
        for name in self.recipe.stateful_components:
            if state.get(name) is not None:
                self.groups[name].load(state[name]).wait(self.timeout)
        rollout = self.groups["rollout"]
        # the rollout workers follow the new broadcast from the checkpoint's version on
        self._with_restarts("rollout", lambda: self._configure_rollouts(rollout))
        rngs = state.get("rollout_rng") or []
        if len(rngs) == self.N:
            for r, rng in enumerate(rngs):
                self._with_restarts(
                    "rollout", lambda r=r, rng=rng: rollout.on(r).set_rng_state(rng).wait(self.timeout)
                )
        steps = int(run["steps"])
        env = self.groups["env"]
        self._with_restarts("env", lambda: env.reseed(self.runner_cfg.seed + steps).wait(self.timeout))
        # the books go back to the checkpoint; the failure counters do not (those failures happened)
        self.steps, self.iteration = steps, int(run["iteration"])
        self.rec.rewind(run, steps)
        self.last_ckpt_step = steps
        self.collected_at.clear()
        self.last_metrics = {}
        self.final_policy = None
        self.gen += 1

    async def _gather(
        self, calls: dict[tuple[str, int], Any], learn: Any = None, keys: list[str] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], BaseException | None]:
        """Wait for every call; a died worker's rank goes to ``dead``, another error to
        ``fatal``. On the first failure the generation is aborted so survivors return. ``learn``
        (the iteration's learning side) is watched: if the learner dies meanwhile, the
        iteration's ``keys`` are drained until the calls return (no producer waits on a bounded
        key nobody reads) and the death is returned last."""
        futs = {asyncio.ensure_future(await_call(c)): key for key, c in calls.items()}
        results: dict[Any, Any] = {}
        dead: dict[Any, Any] = {}
        fatal: dict[Any, Any] = {}
        pending = set(futs)
        aborted = False
        learner_err: BaseException | None = None
        watch = learn
        drain: threading.Event | None = None
        drained: Any = None
        loop = asyncio.get_running_loop()
        while pending:
            waiting = pending | ({watch} if watch is not None else set())
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if watch is not None and watch in done:
                err = None if watch.cancelled() else watch.exception()
                watch = None
                if err is not None and worker_died(err, "actor"):
                    learner_err = err
                    drain = threading.Event()
                    drained = loop.run_in_executor(None, self._drain, list(keys or []), drain)
            for f in done:
                if f not in futs:
                    continue
                pending.discard(f)
                key = futs[f]
                err = f.exception()
                if err is None:
                    results[key] = f.result()[0]
                    if results[key].get("aborted") and not aborted:
                        aborted = True
                        await self._abort_keys()
                elif getattr(err, "error_type", "") == "WorkerDied":
                    dead[key] = err
                else:
                    fatal[key] = err
                if (dead or fatal) and not aborted:
                    aborted = True
                    await self._abort_keys()
        if drain is not None:
            drain.set()
            await drained
        return results, dead, fatal, learner_err

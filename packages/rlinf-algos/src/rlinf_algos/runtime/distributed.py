"""The workers' runtime: any recipe's macro flow (DESIGN.md section 5) on placed workers.

How an iteration flows (:class:`DistributedRun`): the driver asks the recipe for the iteration's
:class:`~rlinf_algos.flow.IterationPlan`, calls the env workers' method and every
``RolloutWorker.collect`` for iteration ``k`` and, at the same time, starts the learning side
(the actor waits for the batch, or learns from data as it streams in, or the recipe's extra
components score it first). Iteration ``k + 1`` starts once ``k`` is collected and the weights it
may use exist: with ``rollout.max_staleness: 1`` (the default) the rollout of ``k + 1`` overlaps
the update on ``k``, the policy is at most one version stale and the ratio accounts for it.

Fault tolerance: env and rollout workers that die are restarted (``WorkerGroup.restart``); the
iteration they were in is aborted on every worker (their links break; an ``ABORT`` item on each
key of the plan), its partial batch is dropped and logged (``dropped_batches``,
``dropped_env_steps`` in the summary), the new worker pulls the newest weights, and the iteration
is run again under the next generation, so nothing of the lost batch is mixed in.

The learner (the actor worker) holds the optimiser state, so when its process dies the run goes
back to the newest checkpoint that loads: the actor is restarted on its placement from the
checkpoint's state and publishes under a new weight broadcast (the old one died with it); the
rollout workers rebuild their policy from it and take the checkpoint's sampling RNG, the envs are
reseeded as a ``--resume`` would, the metrics rows written after the checkpoint are dropped, and
the iterations after it run again under the next generation (a batch collected before the
restart is never trained on). The event goes to ``learner_restarts`` in the summary (``step``,
``reason``, ``checkpoint``, ``steps_lost``). Checkpoints are written before an iteration would
take the env steps since the last one past ``runner.checkpoint_interval``, so a restart loses
at most that many (before the first, the learner starts afresh from the run's start). Every
restart, of any worker, counts against ``runner.max_restarts``; when the learner cannot be
restarted (restarts used up, checkpoints turned off) the run ends with a message
naming the newest checkpoint and the ``--resume`` command, after writing ``policy.safetensors`` (the
newest weights the rollout workers hold) and ``summary.json`` (with ``error``).

Env and rollout workers exchange observations and actions over direct links (see
:mod:`rlinf_algos.runtime.workers`); the driver hands every env worker the rollout workers' link
addresses with each iteration (a restarted rollout worker listens on a new one) and a per-run
secret, created here, that the links are authenticated with.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlinf_algos.channels import ABORT
from rlinf_algos.flow import IterationPlan, Recipe
from rlinf_algos.models import check_policy_spec
from rlinf_algos.perception import warm_start_policy
from rlinf_algos.run_files import POLICY, checkpoint_name, write_state
from rlinf_algos.rundir import (
    BASE_COLUMNS,
    RunRecorder,
    env_record,
    load_checkpoint,
    write_summary,
)
from rlinf_algos.runtime.recovery import LearnerDied, RecoveryMixin, RunFailed, failure_reason, worker_died
from rlinf_algos.runtime.training import TrainingInterrupted
from rlinf_algos.stats import EpisodeStats
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError

__all__ = ["DistributedRun", "RunFailed", "run_distributed"]

ProgressFn = Callable[[dict[str, Any]], None]


def run_distributed(
    recipe: Recipe,
    sections: Any,
    scheduler: Any,
    run_dir: Path,
    *,
    resume: bool = False,
    progress: ProgressFn | None = None,
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
    rollout_only: bool = False,
) -> dict[str, Any]:
    """Run ``recipe`` on env, rollout and actor workers placed by ``scheduler`` (started); see
    :class:`DistributedRun`."""
    from rlinf_core.scheduler import Scheduler

    if not isinstance(scheduler, Scheduler):
        raise RlinfError(
            f"the workers' runtime needs a started rlinf_core.Scheduler (e.g. the `ray` plugin's), "
            f"got {type(scheduler).__name__}; pass scheduler=None to train in this process"
        )
    run = DistributedRun(
        recipe, sections, scheduler, Path(run_dir), resume=resume, progress=progress,
        callbacks=callbacks, rollout_only=rollout_only,
    )  # fmt: skip
    return run.run()


class DistributedRun(RecoveryMixin):
    """One run of a recipe on workers. Build it with a started scheduler, call :meth:`run`.

    Attributes a test or a callback may read: ``groups`` (``{"env", "rollout", "actor", ...}``
    worker groups), ``pids`` (``{component: [process id by rank]}``, renewed after every
    restart), ``iteration``, ``gen`` (the channel-key generation), ``restarts``,
    ``learner_restarts``, ``dropped_batches``, ``dropped_env_steps``, ``steps``, ``traj_ch``,
    ``batch_log`` (per update: the iteration, the generations and weight versions of the items
    it consumed, and the learner's version before it).

    ``callbacks``: ``on_iteration(run, k)`` before iteration ``k`` starts; ``on_collecting(run,
    k)`` once rollout rank 0 has reported that it is collecting iteration ``k`` (fault tests
    inject faults there, at a point the code reports, not after a sleep).
    """

    def __init__(
        self,
        recipe: Recipe,
        sections: Any,
        scheduler: Any,
        run_dir: Path,
        *,
        resume: bool = False,
        progress: ProgressFn | None = None,
        callbacks: Mapping[str, Callable[..., Any]] | None = None,
        rollout_only: bool = False,
    ) -> None:
        self.recipe = recipe
        self.algo = recipe.cfg
        self.name = recipe.name
        self.env_cfg, self.model_cfg = sections.env, sections.model
        self.runner_cfg, self.rollout_cfg = sections.runner, sections.rollout
        self.actor_cfg = getattr(sections, "actor", None)
        self.learner_group: dict[str, Any] = {}
        self.scheduler = scheduler
        self.run_dir = run_dir
        self.resume = resume
        self.progress = progress
        self.callbacks = dict(callbacks or {})
        self.rollout_only = rollout_only
        self.timeout = self.runner_cfg.worker_timeout
        self.groups: dict[str, Any] = {}
        self.iteration = 0
        self.gen = 0
        self.restarts = 0
        self.dropped_batches = 0
        self.dropped_env_steps = 0
        self.steps = 0
        self.collected_at: dict[int, int] = {}  # iteration -> env steps once it was collected
        self.stats = EpisodeStats()
        self.events: list[str] = []
        self.plan_k: IterationPlan | None = None  # the iteration in flight
        self.resume_digest: str | None = None
        self.resumed_from: str | None = None
        self.pids: dict[str, list[int]] = {}
        self.learner_restarts: list[dict[str, Any]] = []
        self.batch_log: list[dict[str, Any]] = []
        self.final_policy: dict[str, Any] | None = None

    # -- set-up ----------------------------------------------------------------------------------
    def _world(self, component: str) -> int | None:
        plan = getattr(self.scheduler, "plan", None)
        try:
            return int(plan[component].world_size) if plan is not None else None
        except (KeyError, TypeError):
            return None

    def _node_rank(self, component: str) -> int | None:
        plan = getattr(self.scheduler, "plan", None)
        try:
            return int(plan[component].processes[0].node_rank) if plan is not None else None
        except (KeyError, TypeError, IndexError):
            return None

    def _check_sizes(self, M: int, N: int) -> None:
        S, total = self.rollout_cfg.pipeline_stages, self.env_cfg.num_envs
        problems = []
        if total % (M * S):
            problems.append(
                ConfigProblem(
                    "env.num_envs",
                    f"{total} envs do not split evenly over {M} env worker(s) x {S} pipeline stage(s); "
                    f"use a multiple of {M * S}",
                )
            )
        elif (total // S) % N:
            problems.append(
                ConfigProblem(
                    "env.num_envs",
                    f"each pipeline stage holds {total // S} envs over all env workers, which do not split "
                    f"evenly over {N} rollout worker(s); use a multiple of {S * N * M // math.gcd(M, N)}",
                )
            )
        if problems:
            raise ConfigError(problems)

    def channel(self, name: str, component: str, maxsize: int = 0) -> Any:
        """The channel ``name``, served on the node of ``component``'s first process."""
        node = self._node_rank(component)
        opts: dict[str, Any] = {"node_rank": node} if node is not None else {}
        return self.scheduler.channel(name, maxsize=maxsize, **opts)

    def setup(self) -> None:
        from rlinf_algos.embodied.flow import EmbodiedFlow
        from rlinf_algos.runtime.workers import WORKERS

        M, N = self._world("env"), self._world("rollout")
        if M is not None and N is not None:
            self._check_sizes(M, N)
        uid = secrets.token_hex(4)
        self.weights = self.weights_base = f"rlinf-{uid}-policy"
        self.link_token = secrets.token_hex(16)  # travels only as a Ray call argument
        S, seed = self.rollout_cfg.pipeline_stages, self.runner_cfg.seed
        self.traj_ch = self.channel(
            f"rlinf-{uid}-traj", "actor", maxsize=self.recipe.channel_maxsize(self.rollout_cfg)
        )
        flow = EmbodiedFlow(self.recipe)
        env_args = (self.env_cfg.model_dump(), seed, S)
        if M is None or N is None:  # a scheduler without a plan: learn the sizes from the env group
            env = self.scheduler.launch(
                "env", WORKERS["env"], *env_args, N or 1, self.link_token, self.timeout
            )
            self.groups["env"] = env
            M, N = env.world_size, N or 1
            self._check_sizes(M, N)
        self.M, self.N, self.S = M, N, S
        self.per_stage = self.env_cfg.num_envs // (M * S)
        actor_cfg = self.actor_cfg.model_dump() if self.actor_cfg is not None else {}
        launches: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
            "env": ((*env_args, N, self.link_token, self.timeout), {}),
            "actor": ((flow,), {
                "timeout": self.timeout, "channels": {"traj": self.traj_ch}, "weights": self.weights,
                "seed": seed, "threads": self.runner_cfg.torch_threads, "device": self.runner_cfg.device,
                "strategy": actor_cfg.get("strategy"), "micro_batch_size": actor_cfg.get("micro_batch_size"),
                "model": self.model_cfg.model_dump(), "rollout_world": N,
            }),
            "rollout": ((flow,), {
                "timeout": self.timeout, "channels": {"traj": self.traj_ch}, "weights": self.weights,
                "seed": seed, "threads": 1, "env_world": M, "per_stage": self.per_stage, "stages": S,
                "link_token": self.link_token,
            }),
            **{name: ((flow,), kw) for name, kw in self.recipe.launch_extra(self).items()},
        }  # fmt: skip
        # the groups start at once: their imports (torch, mujoco) overlap
        with ThreadPoolExecutor(len(launches)) as pool:
            futs = {
                name: pool.submit(self.scheduler.launch, name, WORKERS[name], *args, **kw)
                for name, (args, kw) in launches.items()
                if name not in self.groups
            }
            for name, fut in futs.items():
                self.groups[name] = fut.result()
        spaces = self.groups["env"].on(0).spaces().wait(self.timeout)[0]
        self.max_episode_steps = spaces.get("max_episode_steps")
        self.recipe.check_spaces(self.env_cfg, spaces)
        spec = self.recipe.policy_spec(self.model_cfg, spaces)
        check_policy_spec(spec)
        self.init_weights = None  # the warm start's weights: version 0, also after a learner restart
        self.warm_start: dict[str, Any] | None = None  # its record, for summary.json
        if self.model_cfg.warm_start is not None and not self.resume:
            self.init_weights, self.warm_start = warm_start_policy(
                spec, self.env_cfg, self.model_cfg.warm_start, seed, self.run_dir
            )
        spec["num_slots"] = self.env_cfg.num_envs
        self.spec = spec
        # the actor publishes version 0 first; the others fetch it (reference workers freeze it)
        for name in ("actor", "rollout", *self.recipe.policy_components):
            init = {"init": self.init_weights} if name == "actor" and self.init_weights else {}
            self.groups[name].configure(spec, **init).wait(self.timeout)
        self.link_addrs = [tuple(a) for a in self.groups["rollout"].link_address().wait(self.timeout)]
        if "actor" in self.groups:
            self.learner_group = self.groups["actor"].on(0).world().wait(self.timeout)[0]
        for name in ("env", "rollout", "actor"):
            if hasattr(self.groups[name], "stop_on_failure"):
                self.groups[name].stop_on_failure = False
        for name in self.groups:
            self._note_pids(name)

    def _note_pids(self, component: str, ranks: list[int] | None = None) -> None:
        """Ask ``component``'s workers (``ranks``, default all) for their process ids."""
        group = self.groups[component]
        try:
            view = group if ranks is None else group.on(ranks)
            got = view.pid().wait(self.timeout)
        except AttributeError:  # a worker class without pid()
            return
        pids = self.pids.setdefault(component, [0] * getattr(group, "world_size", len(got)))
        for r, pid in zip(ranks if ranks is not None else range(len(got)), got, strict=True):
            pids[r] = int(pid)

    # -- bookkeeping -----------------------------------------------------------------------------
    @property
    def T(self) -> int:
        """Vector steps per env per iteration (at most, for whole episodes)."""
        return self.recipe.iteration_steps(self.rollout_cfg, self.max_episode_steps)

    @property
    def batch(self) -> int:
        """Env steps per iteration (an upper bound for whole episodes)."""
        return self.T * self.env_cfg.num_envs

    def _log(self, message: str) -> None:
        self.events.append(message)
        logging.getLogger("rlinf.train").warning(message)

    # -- checkpoints -----------------------------------------------------------------------------
    def _run_state(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "iteration": self.iteration,
            **self.rec.state(),
            "restarts": self.restarts,
            "dropped_batches": self.dropped_batches,
            "dropped_env_steps": self.dropped_env_steps,
            "learner_restarts": list(self.learner_restarts),
        }

    def checkpoint(self) -> Path:
        """Write ``checkpoints/step_<n>.safetensors`` atomically (nothing may be in flight)."""
        try:
            actor = self.groups["actor"].state().wait(self.timeout)[0]
        except Exception as err:
            if worker_died(err, "actor"):
                raise LearnerDied(
                    f"{failure_reason(err)} (writing the checkpoint of env step {self.steps})"
                ) from err
            raise
        rngs = self._with_restarts("rollout", lambda: self.groups["rollout"].rng_state().wait(self.timeout))
        path = self.run_dir / "checkpoints" / checkpoint_name(self.steps)
        state = {
            "algorithm": self.name,
            "distributed": True,
            "spec": self.spec,
            "batch": self.batch,
            "run": self._run_state(),
            "actor": actor,
            "rollout_rng": rngs,
        }
        for name in self.recipe.stateful_components:
            state[name] = self.groups[name].on(0).state().wait(self.timeout)[0]
        write_state(state, path)
        self.last_ckpt_step = self.steps
        return path

    def _restore(self) -> None:
        path, state = load_checkpoint(self.run_dir, self.name)
        if not state.get("distributed"):
            raise RlinfError(
                f"{path} was written by the in-process runtime (runner.scheduler: local); resume it with that"
            )
        saved_spec, saved_batch = state.get("spec"), state.get("batch")
        if saved_spec is not None and (saved_spec != self.spec or saved_batch != self.batch):
            diff = sorted(
                k for k in set(saved_spec) | set(self.spec) if saved_spec.get(k) != self.spec.get(k)
            )
            what = ", ".join(f"{k}: {saved_spec.get(k)!r} then, {self.spec.get(k)!r} now" for k in diff)
            if saved_batch != self.batch:
                what = ", ".join(
                    filter(None, [what, f"env steps per iteration: {saved_batch} then, {self.batch} now"])
                )
            raise RlinfError(
                f"{path} was written by a run with other env or model settings ({what}); resume with the "
                "settings of that run (its config.yaml), only runner.total_steps may grow"
            )
        run = state["run"]
        self.groups["actor"].load(state["actor"]).wait(self.timeout)
        self.resume_digest = self.groups["actor"].digest().wait(self.timeout)[0]
        for name in self.recipe.stateful_components:
            if state.get(name) is not None:
                self.groups[name].load(state[name]).wait(self.timeout)
        rngs = state.get("rollout_rng") or []
        if len(rngs) == self.N:
            for r, rng in enumerate(rngs):
                self.groups["rollout"].on(r).set_rng_state(rng).wait(self.timeout)
        # the simulators' state is not saved: start fresh episodes with a seed derived from the step
        self.groups["env"].reseed(self.runner_cfg.seed + int(run["steps"])).wait(self.timeout)
        self.steps = int(run["steps"])
        self.iteration = int(run["iteration"])
        self.rec.load(run, int(run["steps"]))
        self.restarts = int(run.get("restarts", 0))
        self.dropped_batches = int(run.get("dropped_batches", 0))
        self.dropped_env_steps = int(run.get("dropped_env_steps", 0))
        self.learner_restarts = list(run.get("learner_restarts", []))
        self.resumed_from = str(path)
        for skipped in state.get("skipped_checkpoints", []):
            self._log(f"resume: skipped the damaged checkpoint {skipped}")

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        columns = (
            BASE_COLUMNS
            + self.recipe.metric_columns(self.model_cfg)
            + self.recipe.worker_columns
            + ("success_rate",)
        )
        self.rec = RunRecorder(
            self.run_dir,
            self.runner_cfg.log_interval,
            columns if "csv" in self.runner_cfg.loggers else None,
            self.stats,
            self.progress,
            resume=self.resume,
        )
        try:
            self.setup()
            if self.resume:
                self._restore()
            self.last_ckpt_step = self.steps
            self.rec.start_clock(self.steps)
            try:
                asyncio.run(self._main())
            except (KeyboardInterrupt, asyncio.CancelledError):
                raise TrainingInterrupted(self.run_dir, self._interrupt()) from None
            except RunFailed as err:
                try:
                    self._finish(error=str(err))
                    note = ". policy.safetensors (the newest weights the rollout workers held) and summary.json are written."
                except Exception as fin:  # say so, and still give the first error
                    note = f" Writing policy.safetensors and summary.json failed too: {fin}"
                raise RunFailed(f"{err}{note}", exit_code=err.exit_code) from None
            return self._finish()
        finally:
            self._teardown()

    async def _main(self) -> None:
        total = self.runner_cfg.total_steps
        staleness = self.recipe.staleness(self.rollout_cfg)
        # fixed-size iterations end after ceil(total / batch) (steps < total); whole-episode
        # iterations end with their episodes
        self.iterations = max(1, math.ceil(total / self.batch))
        self.inflight: collections.deque[tuple[int, asyncio.Future[Any]]] = collections.deque()
        self.inflight_keys: dict[int, list[str]] = {}
        self.last_metrics: dict[str, Any] = {}
        while True:
            try:
                if await self._turn(total, staleness):
                    return
            except LearnerDied as died:
                await self._recover_learner(died.reason)

    async def _turn(self, total: int, staleness: int) -> bool:
        """One turn of the loop: an iteration or, once the budget is spent, the ending (the last
        updates, the final row, checkpoint and policy). ``True`` when the run is done."""
        interval = self.runner_cfg.checkpoint_interval if not self.rollout_only else 0
        if self.steps >= total:
            while self.inflight:
                await self._finish_train()
            self.rec.row(self.steps, self.last_metrics, force=True)
            if interval and self.steps != self.last_ckpt_step:
                self.checkpoint()
            if not self.rollout_only and "actor" in self.groups:
                self.final_policy = self._policy()
            return True
        k = self.iteration
        while self.inflight and self.inflight[0][0] < k - staleness:
            await self._finish_train()
        # checkpoint before an iteration would take the steps since the last one past the
        # interval: a learner restart loses at most `checkpoint_interval` env steps
        since = self.steps - self.last_ckpt_step
        if interval and since > 0 and since + self.batch > interval:
            while self.inflight:
                await self._finish_train()
            self.checkpoint()
        if "on_iteration" in self.callbacks:
            self.callbacks["on_iteration"](self, k)
        if await self._iteration(k, staleness):
            self.iteration += 1
        return False

    async def _finish_train(self) -> None:
        k, fut = self.inflight.popleft()
        self.inflight_keys.pop(k, None)
        try:
            metrics = (await fut)[0]
        except Exception as err:
            if worker_died(err, "actor"):
                raise LearnerDied(f"{failure_reason(err)} (learning on iteration {k})") from err
            raise
        if metrics.get("aborted"):
            raise RlinfError(f"the actor lost the batch of iteration {k}: {metrics.get('error', 'aborted')}")
        audit = metrics.pop("batch_audit", None)
        if audit is not None:
            items = audit["items"]
            self.batch_log.append(
                {
                    "iteration": k,
                    "gens": sorted({g for g, _ in items}),
                    "versions": sorted({v for _, v in items if v is not None}),
                    "items": len(items),
                    "learner_version": audit["learner_version"],
                }
            )
        metrics.setdefault("rollout_s", getattr(self, "rollout_s", float("nan")))
        self.last_metrics = metrics
        self.rec.row(self.collected_at.pop(k, (k + 1) * self.batch), metrics)

    async def _iteration(self, k: int, staleness: int) -> bool:
        """Collect iteration ``k`` (and start learning on it). ``False`` if it was aborted."""
        env, rollout = self.groups["env"], self.groups["rollout"]
        gen, T = self.gen, self.T
        plan = self.plan_k = self.recipe.plan(self, k)
        kw = dict(plan.rollout_kwargs)
        if self.rollout_only:
            kw["send"] = False
        report = f"g{gen}/collecting/{k}" if "on_collecting" in self.callbacks else None
        if report is not None:
            kw["report"] = report
        on_policy = self.recipe.on_policy and not self.rollout_only
        min_version = max(0, k - staleness) if on_policy else 0
        env_calls = [
            getattr(env.on(r), plan.env_method)(gen, self.link_addrs, *plan.env_args) for r in range(self.M)
        ]
        roll_calls = [rollout.on(r).collect(gen, T, min_version, **kw) for r in range(self.N)]
        train_fut = None
        if not self.rollout_only and plan.learn is not None:
            train_fut = asyncio.ensure_future(plan.learn())
        calls = {("env", r): c for r, c in enumerate(env_calls)} | {
            ("rollout", r): c for r, c in enumerate(roll_calls)
        }
        if report is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._signal_collecting, k, report)
        results, dead, fatal, learner_err = await self._gather(calls, train_fut, plan.abort_keys)
        aborted = dead or fatal or any(res.get("aborted") for res in results.values())
        env_res = [results[("env", r)] for r in range(self.M) if ("env", r) in results]
        for res in env_res:
            self.stats.absorb(res["returns"], res["lengths"], res.get("successes", ()))
        if not aborted and learner_err is not None:  # collected, but the learner is gone
            raise LearnerDied(f"{failure_reason(learner_err)} (learning on iteration {k})")
        if not aborted:
            self.steps += sum(r["steps"] for r in env_res) if plan.count_env_steps else self.batch
            self.collected_at[k] = self.steps
            rollout_s = max(results[("rollout", r)].get("rollout_s", 0.0) for r in range(self.N))
            if train_fut is not None:
                self.inflight.append((k, train_fut))
                self.inflight_keys[k] = list(plan.abort_keys)
                self.rollout_s = rollout_s
            else:  # rollout only: a row per log interval
                self.last_metrics = {"rollout_s": rollout_s}
                self.rec.row(self.steps, self.last_metrics)
            return True
        # -- recovery: drop the partial batch, restart the dead, next generation ------------------
        lost = sum(r.get("steps", 0) for r in env_res)
        self.dropped_batches += 1
        self.dropped_env_steps += lost
        why = (
            "; ".join(f"{c} rank {r}: {e}" for (c, r), e in (dead | fatal).items())
            or "a peer ended the iteration"
        )
        self._log(
            f"iteration {k}: dropped its partial batch ({lost} env steps collected) after a worker failure "
            f"({why}); generation {gen} -> {gen + 1}"
        )
        if train_fut is not None:
            res = None
            try:
                res = (await train_fut)[0]
            except Exception as err:
                if not worker_died(err, "actor"):
                    raise
                learner_err = err
            if res is not None and self.recipe.whole_batch and not res.get("aborted"):
                raise RlinfError(f"iteration {k}: the actor trained on an incomplete batch")  # cannot happen
        if fatal:
            err = next(iter(fatal.values()))
            raise err
        loop = asyncio.get_running_loop()
        for comp in ("env", "rollout"):
            ranks = sorted(r for (c, r) in dead if c == comp)
            if ranks:
                # a rollout worker follows the learner's weights; when the learner is gone too, its
                # restart (next) rebuilds every rollout worker's policy
                await loop.run_in_executor(None, self._replace, comp, ranks, learner_err is None)
        self.gen = gen + 1
        if learner_err is not None:
            raise LearnerDied(f"{failure_reason(learner_err)} (learning on iteration {k})")
        return False

    def _signal_collecting(self, k: int, key: str) -> None:
        """Wait until rollout rank 0 reports (on ``key``) that it is collecting iteration ``k``
        (its first env message arrived), then call ``on_collecting``: a fault injected there lands
        mid-iteration whatever the machine's speed."""
        try:
            self.traj_ch.get(key, timeout=self.timeout)
        except Exception as err:  # the iteration failed before it started collecting
            self._log(f"iteration {k}: no collecting report ({err})")
            return
        self.callbacks["on_collecting"](self, k)

    # -- restarts --------------------------------------------------------------------------------
    def _drain(self, keys: list[str], stop: threading.Event) -> None:
        """Take every item off ``keys`` until ``stop`` is set (then once more)."""
        while True:
            for key in keys:
                for _ in range(1000):
                    try:
                        self.traj_ch.get_nowait(key)
                    except Exception:  # empty
                        break
            if stop.is_set():
                return
            time.sleep(0.05)

    def _put_abort(self, keys: list[str], timeout: float | None = None) -> None:
        """An ``ABORT`` on each of ``keys`` (with ``timeout``: best effort, a full key is skipped)."""
        for key in keys:
            if timeout is None:
                self.traj_ch.put(ABORT, key, timeout=self.timeout)
                continue
            try:
                self.traj_ch.put(ABORT, key, timeout=timeout)
            except Exception as err:
                self._log(f"could not end {key} ({err})")

    async def _abort_keys(self) -> None:
        """End the iteration in flight for its consumers (an ``ABORT`` on every key of its plan).
        Env and rollout workers need none: a worker that fails or gives up closes its links,
        which ends the iteration on its peers in turn."""
        keys = self.plan_k.abort_keys if self.plan_k is not None else []
        await asyncio.get_running_loop().run_in_executor(None, self._put_abort, list(keys))

    # -- endings ---------------------------------------------------------------------------------
    def _interrupt(self) -> Path | None:
        """Ctrl-C: end the iteration in flight, let the learner finish its update, write a
        checkpoint, the final policy and the summary (``interrupted``); returns the checkpoint."""
        path = None
        try:
            asyncio.run(self._abort_keys())
        except Exception as err:
            self._log(f"could not abort the iteration in flight: {err}")
        try:
            self.groups["actor"].version().wait(self.timeout)  # queued behind any update in flight
            if not self.rollout_only:
                path = self.checkpoint()
        except Exception as err:  # report it; still write the policy and the summary
            self._log(f"could not write the interrupt checkpoint: {err}")
        self._finish(interrupted=True)
        return path

    def _policy(self) -> dict[str, Any]:
        """The learner's final policy record (``policy.safetensors``)."""
        try:
            return self.groups["actor"].policy().wait(self.timeout)[0]
        except Exception as err:
            if worker_died(err, "actor"):
                raise LearnerDied(f"{failure_reason(err)} (fetching the final policy)") from err
            raise

    def _rollout_policy(self) -> dict[str, Any] | None:
        """``policy.safetensors`` when the learner is gone: the newest weights a rollout worker holds
        (the last version the learner published that reached them), or ``None``."""
        try:
            held = self.groups["rollout"].policy_weights().wait(self.timeout)
        except Exception as err:
            self._log(
                f"no policy.safetensors: the learner is gone and the rollout workers' weights are not readable ({err})"
            )
            return None
        best = max(held, key=lambda h: h["version"])
        self._log(f"policy.safetensors holds weight version {best['version']}, as the rollout workers had it")
        spec = {k: v for k, v in self.spec.items() if k != "num_slots"}
        return {"algorithm": self.name, "spec": spec, "state_dict": best["state_dict"]}

    def _finish(self, interrupted: bool = False, error: str | None = None) -> dict[str, Any]:
        self.rec.close()
        if not self.rollout_only and "actor" in self.groups:
            policy = self.final_policy
            if policy is None and error is None:
                policy = self.groups["actor"].policy().wait(self.timeout)[0]
            elif policy is None:
                policy = self._rollout_policy()
            if policy is not None:
                policy.update(env_record(self.env_cfg))
                write_state(policy, self.run_dir / POLICY)
        summary = self.rec.summary(self.name, self.env_cfg.id, self.steps, interrupted)
        summary.update(
            {
                "rollout_only": self.rollout_only,
                "iterations": self.iteration,
                "restarts": self.restarts,
                "learner_restarts": self.learner_restarts,
                "dropped_batches": self.dropped_batches,
                "dropped_env_steps": self.dropped_env_steps,
                "workers": {
                    **{name: getattr(group, "world_size", 1) for name, group in self.groups.items()},
                    "pipeline_stages": getattr(self, "S", self.rollout_cfg.pipeline_stages),
                },
                "learner_world_size": self.learner_group.get("world_size", 1),
                "learner": self.learner_group,
                "resumed_from": self.resumed_from,
                "events": self.events[-20:],
            }
        )
        if getattr(self, "warm_start", None) is not None:  # None too when setup failed early
            summary["warm_start"] = self.warm_start
        if error is not None:
            summary["error"] = error
        write_summary(self.run_dir, summary)
        return summary

    def _teardown(self) -> None:
        for name in ("rollout", "env", *self.recipe.extra_components, "actor"):
            group = self.groups.get(name)
            if group is not None:
                try:
                    group.shutdown(timeout=10.0)
                except Exception:
                    pass

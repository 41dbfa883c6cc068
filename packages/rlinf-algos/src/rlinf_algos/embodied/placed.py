"""An embodied flow on placed workers: the macro flow of DESIGN.md section 5 for any recipe.

How an iteration flows: the driver asks the recipe for the iteration's
:class:`~rlinf_algos.embodied.recipe.IterationPlan`, calls the env workers' method and every
``RolloutWorker.collect`` for iteration ``k`` and, at the same time, starts the learning side (the
actor waits for the batch, or learns from data as it streams in, or the recipe's extra components
score it first). Iteration ``k + 1`` starts once ``k`` is collected and the weights it may use
exist: with ``rollout.max_staleness: 1`` (the default) the rollout of ``k + 1`` overlaps the
update on ``k``, the policy is at most one version stale and the ratio accounts for it.

Worker deaths are the driver's (:mod:`rlinf_algos.runtime.recovery`): env and rollout workers are
restarted in place (the iteration they were in is aborted on every worker: their links break, an
``ABORT`` on each key of the plan; its partial batch is dropped: ``dropped_batches``,
``dropped_env_steps``), the actor (the learner) from the newest checkpoint: it publishes under a
new weight broadcast, the rollout workers rebuild their policy from it and take the checkpoint's
sampling RNG, the envs are reseeded as a ``--resume`` would, and the iterations after the
checkpoint run again under the next generation (a batch collected before the restart is never
trained on). The extra components of a recipe (GRPO's reward and reference) are restarted in
place too: a recipe's learning side reports a dead one (its plan's ``learn`` returns ``lost``,
after ending the iteration's keys so the others return); the batch it was learning on is dropped
and counted (``dropped_batches``, ``dropped_env_steps``; no metrics row) unless the actor had
already trained on the whole of it (then the update is kept). A restarted component that freezes
the policy (GRPO's reference) takes the frozen weights the driver keeps (read back from it once it
froze them or loaded them from the checkpoint: a small policy), not the weight broadcast, which has
moved on; the reward holds no state. A learning side still in flight on the dead process reports it
too: it is dropped as well, and the rank, already replaced, is not restarted twice.

Env and rollout workers exchange observations and actions over direct links
(:mod:`rlinf_algos.runtime.workers.env`); the driver hands every env worker the rollout workers'
link addresses with each iteration (a restarted rollout worker listens on a new one) and a per-run
secret, created here, that the links are authenticated with.
"""

from __future__ import annotations

import asyncio
import collections
import math
import secrets
import threading
import time
from typing import Any

from rlinf_algos.channels import ABORT, is_abort
from rlinf_algos.embodied.recipe import IterationPlan
from rlinf_algos.flow import FlowRun
from rlinf_algos.models import check_policy_spec
from rlinf_algos.run_files import POLICY, write_state
from rlinf_algos.rundir import env_record
from rlinf_algos.runtime.recorder import BASE_COLUMNS
from rlinf_algos.runtime.recovery import LearnerDied, failure_reason, user_error, worker_died
from rlinf_algos.runtime.workers import WORKERS
from rlinf_algos.stats import EpisodeStats
from rlinf_algos.warm_starts import initial_weights
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError

__all__ = ["EmbodiedPlacedRun"]


class EmbodiedPlacedRun(FlowRun):
    """An embodied flow on env, rollout and actor workers (and the recipe's extra components).

    What a test or a callback may read beside the driver's (``groups``, ``pids``): ``traj_ch``,
    ``batch_log`` (per update: the iteration, the generations and weight versions of the items it
    consumed, and the learner's version before it), ``resume_digest``. Hooks: ``on_iteration(run,
    k)`` before iteration ``k`` starts; ``on_collecting(run, k)`` once rollout rank 0 has reported
    that it is collecting iteration ``k`` (fault tests inject faults there, at a point the code
    reports, not after a sleep).
    """

    unit = "env step"
    failure_files = "policy.safetensors (the newest weights the rollout workers held)"

    def __init__(self, driver: Any, flow: Any) -> None:
        super().__init__(driver)
        self.flow = flow
        self.recipe = flow.recipe
        self.name = self.recipe.name
        sections = flow.sections
        self.env_cfg, self.model_cfg = sections.env, sections.model
        self.runner_cfg, self.rollout_cfg = sections.runner, sections.rollout
        self.actor_cfg = getattr(sections, "actor", None)
        self.rollout_only = driver.rollout_only
        self.timeout = driver.timeout
        self.log_interval = self.runner_cfg.log_interval
        self.episodes = EpisodeStats()
        self.roles = {
            "env": "in_place",
            "rollout": "in_place",
            "actor": "learner",
            **dict.fromkeys(self.recipe.extra_components, "in_place"),
        }
        self.frozen: dict[str, Any] = {}  # a policy component's frozen weights, for its restarts
        self.collected_steps: dict[int, int] = {}  # iteration -> env steps it collected
        # updates dropped on the learning side: the learner's version is this far behind the
        # iteration count, so iteration k waits for version k - staleness - this
        self.updates_dropped = 0
        self.learner_group: dict[str, Any] = {}
        self.collected_at: dict[int, int] = {}  # iteration -> env steps once it was collected
        self.plan_k: IterationPlan | None = None  # the iteration in flight
        self.resume_digest: str | None = None
        self.batch_log: list[dict[str, Any]] = []
        self.final_policy_record: dict[str, Any] | None = None
        self.inflight: collections.deque[tuple[int, asyncio.Future[Any]]] = collections.deque()
        self.inflight_keys: dict[int, list[str]] = {}
        self.last_metrics: dict[str, Any] = {}
        self.warm_start: dict[str, Any] | None = None

    # -- what the recipe's plan reads --------------------------------------------------------------
    @property
    def gen(self) -> int:
        return self.driver.gen

    @property
    def steps(self) -> int:
        return self.driver.steps

    @property
    def dropped_env_steps(self) -> int:
        return self.driver.dropped_steps

    @property
    def T(self) -> int:
        """Vector steps per env per iteration (at most, for whole episodes)."""
        return self.recipe.iteration_steps(self.rollout_cfg, self.max_episode_steps)

    @property
    def batch(self) -> int:
        """Env steps per iteration (an upper bound for whole episodes)."""
        return self.T * self.env_cfg.num_envs

    @property
    def lookahead(self) -> int:  # type: ignore[override]
        return self.batch

    def columns(self) -> tuple[str, ...]:
        return (
            BASE_COLUMNS
            + self.recipe.metric_columns(self.model_cfg)
            + self.recipe.worker_columns
            + ("success_rate",)
        )

    # -- set-up ----------------------------------------------------------------------------------
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

    def start(self, state: dict[str, Any] | None) -> None:
        d = self.driver
        M, N = d.world("env"), d.world("rollout")
        if M is not None and N is not None:
            self._check_sizes(M, N)
        uid = secrets.token_hex(4)
        self.weights_base = f"rlinf-{uid}-policy"
        self.weights = self._weight_sync(self.weights_base)
        self.links = d.links()  # carries the run's secret: travels only as a call argument
        S, seed = self.rollout_cfg.pipeline_stages, self.runner_cfg.seed
        self.traj_ch = d.channel(
            f"rlinf-{uid}-traj", "actor", maxsize=self.recipe.channel_maxsize(self.rollout_cfg)
        )
        env_args = (self.env_cfg.model_dump(), seed, S)
        if M is None or N is None:  # a scheduler without a plan: learn the sizes from the env group
            d.launch({"env": (WORKERS["env"], (*env_args, N or 1, self.links, self.timeout), {})})
            M, N = d.groups["env"].world_size, N or 1
            self._check_sizes(M, N)
        self.M, self.N, self.S = M, N, S
        self.per_stage = self.env_cfg.num_envs // (M * S)
        actor_cfg = self.actor_cfg.model_dump() if self.actor_cfg is not None else {}
        flow = self.flow
        launches: dict[str, tuple[type, tuple[Any, ...], dict[str, Any]]] = {
            "env": (WORKERS["env"], (*env_args, N, self.links, self.timeout), {}),
            "actor": (WORKERS["actor"], (flow,), {
                "timeout": self.timeout, "channels": {"traj": self.traj_ch}, "weights": self.weights,
                "seed": seed, "threads": self.runner_cfg.torch_threads, "device": self.runner_cfg.device,
                "strategy": actor_cfg.get("strategy"), "micro_batch_size": actor_cfg.get("micro_batch_size"),
                "model": self.model_cfg.model_dump(), "rollout_world": N,
            }),
            "rollout": (WORKERS["rollout"], (flow,), {
                "timeout": self.timeout, "channels": {"traj": self.traj_ch}, "weights": self.weights,
                "seed": seed, "threads": 1, "env_world": M, "per_stage": self.per_stage, "stages": S,
                "links": self.links, "device": self.runner_cfg.device,
            }),
            **{name: (WORKERS[name], (flow,), kw) for name, kw in self.recipe.launch_extra(self).items()},
        }  # fmt: skip
        d.launch(launches)
        groups = d.groups
        spaces = groups["env"].on(0).spaces().wait(self.timeout)[0]
        self.max_episode_steps = spaces.get("max_episode_steps")
        self.recipe.check_spaces(self.env_cfg, spaces)
        spec = self.recipe.policy_spec(self.model_cfg, spaces)
        check_policy_spec(spec)
        self.init_weights = None  # the warm start's weights: version 0, also after a learner restart
        warm = initial_weights(spec, self.env_cfg, self.model_cfg, seed, d.run_dir) if state is None else None
        if warm is not None:
            self.init_weights, self.warm_start = warm
        spec["num_slots"] = self.env_cfg.num_envs
        self.spec = spec
        # the actor publishes version 0 first; the others fetch it (reference workers freeze it)
        for name in ("actor", "rollout", *self.recipe.policy_components):
            init = {"init": self.init_weights} if name == "actor" and self.init_weights else {}
            groups[name].configure(spec, **init).wait(self.timeout)
        self.link_addrs = [tuple(a) for a in groups["rollout"].link_address().wait(self.timeout)]
        if state is None:
            self._keep_frozen()
        self.learner_group = groups["actor"].on(0).world().wait(self.timeout)[0]
        self.iterations = max(1, math.ceil(self.runner_cfg.total_steps / self.batch))
        self.staleness = self.recipe.staleness(self.rollout_cfg)

    def _weight_sync(self, name: str) -> Any:
        """A new weight sync of the learner's rank 0 and its consumers (``rollout.weight_sync``)."""
        consumers = ("rollout", *self.recipe.policy_components)
        return self.driver.weight_sync(name, self.rollout_cfg.weight_sync, consumers)

    def load(self, state: dict[str, Any]) -> None:
        path = self.driver.run_dir
        if not state.get("distributed"):
            raise RlinfError(
                f"the checkpoint of {path} was written by the in-process loop of an earlier rlinf (runner.scheduler: "
                "local ran its own loop then); this rlinf runs one flow on every scheduler and cannot continue it: "
                "start the run again (its policy.safetensors still evaluates and warm-starts)"
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
                f"the checkpoint of {path} was written by a run with other env or model settings ({what}); "
                "resume with the settings of that run (its config.yaml), only runner.total_steps may grow"
            )
        groups = self.groups
        groups["actor"].load(state["actor"]).wait(self.timeout)
        self.resume_digest = groups["actor"].digest().wait(self.timeout)[0]
        for name in self.recipe.stateful_components:
            if state.get(name) is not None:
                groups[name].load(state[name]).wait(self.timeout)
        self._keep_frozen()
        self.updates_dropped = int(state.get("updates_dropped", 0))
        rngs = state.get("rollout_rng") or []
        if len(rngs) == self.N:
            for r, rng in enumerate(rngs):
                groups["rollout"].on(r).set_rng_state(rng).wait(self.timeout)
        # the simulators' state is not saved: start fresh episodes with a seed derived from the step
        groups["env"].reseed(self.runner_cfg.seed + int(state["run"]["steps"])).wait(self.timeout)

    # -- the iterations ----------------------------------------------------------------------------
    def done(self) -> bool:
        return self.driver.steps >= self.runner_cfg.total_steps

    async def step(self) -> None:
        d = self.driver
        k = d.iteration
        while self.inflight and self.inflight[0][0] < k - self.staleness:
            await self._finish_train()
        d.callback("on_iteration", k)
        if await self._iteration(k):
            d.iteration += 1

    async def drain(self) -> None:
        while self.inflight:
            await self._finish_train()

    def last_row(self) -> None:
        self.driver.row(self.driver.steps, self.last_metrics, force=True)

    def _keep_frozen(self) -> None:
        """Read back the frozen weights of each component that freezes the policy (rank 0's: they
        are the same on every rank), for its restarts."""
        for name in self.recipe.policy_components:
            if name in self.recipe.stateful_components:
                self.frozen[name] = self.groups[name].on(0).state().wait(self.timeout)[0]

    def end_keys(self, keys: list[str]) -> None:
        """An ``ABORT`` on each of ``keys`` (best effort): a recipe's learning side ends its batch
        on its surviving components when one of them died."""
        self._put_abort(keys, 5.0)

    def _replace_lost(self, lost: dict[tuple[str, int], BaseException], k: int) -> None:
        """Restart the extra components a learning side found dead, unless a rank was replaced
        since (the learning side of an earlier iteration found the same process dead)."""
        d, fresh = self.driver, {}
        for (role, rank), err in lost.items():
            known = d.pids.get(role, [])
            now = known[rank] if rank < len(known) else None
            if getattr(err, "pid", None) not in (None, now):
                d.log(
                    f"{role} rank {rank}: the process iteration {k} lost (pid {err.pid}) is replaced already"
                )
                continue
            fresh[(role, rank)] = err
        if fresh:
            d.replace_dead(fresh, f"learning on iteration {k}")

    async def _finish_train(self) -> None:
        k, fut = self.inflight.popleft()
        keys = self.inflight_keys.pop(k, [])
        try:
            metrics = (await fut)[0]
        except Exception as err:
            if worker_died(err, "actor"):
                raise LearnerDied(f"{failure_reason(err)} (learning on iteration {k})") from err
            if worker_died(err):  # an extra component of the learning side
                self.driver.replace_dead({(getattr(err, "component", "?"), int(getattr(err, "rank", 0))): err},
                                         f"in iteration {k}")  # fmt: skip
            raise
        lost = metrics.pop("lost", None)
        steps = self.collected_steps.pop(k, 0)
        loop = asyncio.get_running_loop()
        if lost:
            await loop.run_in_executor(None, self._replace_lost, lost, k)
            if not metrics.get("aborted"):
                self.driver.log(f"iteration {k}: the actor had the whole batch; its update is kept")
        if metrics.get("aborted"):
            # collected, but the learning side could not take all of it: one of its components
            # died (restarted above), or a producer died after its put, its object-store payload
            # with it (the dead worker is found and restarted by the iteration in flight): no
            # update of k, so later iterations wait one version less
            why = (
                "; ".join(failure_reason(e) for e in lost.values())
                if lost
                else f"the actor lost the batch of iteration {k}: {metrics.get('error', 'aborted')}"
            )
            stop = threading.Event()
            stop.set()
            await loop.run_in_executor(None, self._drain, keys, stop)
            self.collected_at.pop(k, None)
            self.updates_dropped += 1
            self.driver.drop(k, steps, why)
            return
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
        self.driver.row(self.collected_at.pop(k, (k + 1) * self.batch), metrics)

    async def _iteration(self, k: int) -> bool:
        """Collect iteration ``k`` (and start learning on it). ``False`` if it was aborted."""
        d = self.driver
        env, rollout = self.groups["env"], self.groups["rollout"]
        gen, T = d.gen, self.T
        plan = self.plan_k = self.recipe.plan(self, k)
        kw = dict(plan.rollout_kwargs)
        if self.rollout_only:
            kw["send"] = False
        report = f"g{gen}/collecting/{k}" if "on_collecting" in d.callbacks else None
        if report is not None:
            kw["report"] = report
        on_policy = self.recipe.on_policy and not self.rollout_only
        min_version = max(0, k - self.staleness - self.updates_dropped) if on_policy else 0
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
        loop = asyncio.get_running_loop()
        if report is not None:  # beside the wait on the calls: a worker that dies first is seen at once
            signalled = loop.run_in_executor(None, self._signal_collecting, k, report)
            signalled.add_done_callback(lambda f: f.exception())
        keys = list(plan.abort_keys)
        ends = keys + ([report] if report is not None else [])  # an abort also ends the report's wait
        results, dead, fatal, learner_err = await d.gather(
            calls,
            abort=lambda: self._put_abort(ends),
            learn=train_fut,
            drain=lambda stop: self._drain(keys, stop),
        )
        aborted = dead or fatal or any(res.get("aborted") for res in results.values())
        env_res = [results[("env", r)] for r in range(self.M) if ("env", r) in results]
        for res in env_res:
            self.episodes.absorb(res["returns"], res["lengths"], res.get("successes", ()))
        if not aborted and learner_err is not None:  # collected, but the learner is gone
            raise LearnerDied(f"{failure_reason(learner_err)} (learning on iteration {k})")
        if not aborted:
            collected = sum(r["steps"] for r in env_res) if plan.count_env_steps else self.batch
            d.steps += collected
            self.collected_at[k], self.collected_steps[k] = d.steps, collected
            rollout_s = max(results[("rollout", r)].get("rollout_s", 0.0) for r in range(self.N))
            if train_fut is not None:
                self.inflight.append((k, train_fut))
                self.inflight_keys[k] = keys
                self.rollout_s = rollout_s
            else:  # rollout only: a row per log interval
                self.last_metrics = {"rollout_s": rollout_s}
                d.row(d.steps, self.last_metrics)
            return True
        # -- recovery: drop the partial batch, restart the dead, next generation ------------------
        lost = sum(r.get("steps", 0) for r in env_res)
        # the root cause first: a dead or failed worker, else the error of the worker that ended
        # the iteration (a simulator that died under an env worker), else its peers' word
        said = [
            f"{c} rank {r}: {res['error']}"
            for (c, r), res in sorted(results.items())
            if isinstance(res, dict) and res.get("root_cause")
        ]
        why = (
            "; ".join(
                failure_reason(e)
                if hasattr(e, "component") or str(e).startswith(f"{c} rank {r}")  # it names its worker
                else f"{c} rank {r}: {e}"
                for (c, r), e in (dead | fatal).items()
            )
            or "; ".join(said[:2])
            or "a peer ended the iteration"
        )
        d.drop(k, lost, why)
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
            first = next(iter(fatal.values()))
            raise user_error(first) or first
        reason = await loop.run_in_executor(
            None, lambda: d.replace_dead(dead, f"in iteration {k}", configure=learner_err is None)
        )
        if learner_err is not None:
            raise LearnerDied(f"{failure_reason(learner_err)} (learning on iteration {k})")
        if reason is not None:
            raise LearnerDied(reason)
        return False

    def _signal_collecting(self, k: int, key: str) -> None:
        """Wait until rollout rank 0 reports (on ``key``) that it is collecting iteration ``k``
        (its first env message arrived), then call ``on_collecting``: a fault injected there lands
        mid-iteration whatever the machine's speed."""
        try:
            item = self.traj_ch.get(key, timeout=self.timeout)
        except Exception as err:  # the iteration failed before it started collecting
            self.driver.log(f"iteration {k}: no collecting report ({err})")
            return
        if not is_abort(item):  # the driver ended the iteration before it was collecting
            self.driver.callback("on_collecting", k)

    # -- aborts ----------------------------------------------------------------------------------
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
        """An ``ABORT`` on each of ``keys`` (with ``timeout``: best effort, a full key is skipped).
        Env and rollout workers need none: a worker that fails or gives up closes its links, which
        ends the iteration on its peers in turn."""
        for key in keys:
            if timeout is None:
                self.traj_ch.put(ABORT, key, timeout=self.timeout)
                continue
            try:
                self.traj_ch.put(ABORT, key, timeout=timeout)
            except Exception as err:
                self.driver.log(f"could not end {key} ({err})")

    async def abort(self) -> None:
        keys = self.plan_k.abort_keys if self.plan_k is not None else []
        await asyncio.get_running_loop().run_in_executor(None, self._put_abort, list(keys))

    # -- restarts ----------------------------------------------------------------------------------
    def after_restart(self, role: str, ranks: list[int], configure: bool) -> str | None:
        if role in self.frozen:  # it froze the policy: the same weights again, not the broadcast
            self.groups[role].on(ranks).reload(self.spec, self.frozen[role]).wait(self.timeout)
            return "; it froze the kept weights again"
        if role != "rollout":
            return None
        group = self.groups["rollout"]
        if configure:
            self._configure_rollouts(group.on(ranks))
        for r, addr in zip(ranks, group.on(ranks).link_address().wait(self.timeout), strict=True):
            self.link_addrs[r] = tuple(addr)
        return "; they pulled the newest weights" if configure else None

    def _configure_rollouts(self, view: Any) -> None:
        """``configure`` rollout workers (``view``) on the current weight broadcast, which exists
        already: if they cannot reach it, its learner may have died since (then
        :class:`LearnerDied`)."""
        try:
            view.configure(self.spec, weights=self.weights, timeout=min(self.timeout, 30.0)).wait(
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

    async def settle_inflight(self) -> None:
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

    def restart_learner(self, state: dict[str, Any] | None) -> None:
        """Replace the actor's processes, load ``state`` (a checkpoint; ``None``: start afresh)
        into them, point the rollout workers at its new weight broadcast, restore the checkpoint's
        sampling streams and reseed the envs (the driver takes its run counters back)."""
        d = self.driver
        group = self.groups["actor"]
        old = self.weights
        self.weights = self._weight_sync(
            f"{self.weights_base}-r{len(d.learner_restarts) + 1}-{secrets.token_hex(2)}"
        )
        actor_state = state["actor"] if state is not None else None
        try:
            group.restart(timeout=self.timeout)  # every rank: the learner group meets anew
            init = {"init": self.init_weights} if actor_state is None and self.init_weights else {}
            group.configure(self.spec, weights=self.weights, state=actor_state, **init).wait(self.timeout)
        except Exception as err:
            if worker_died(err, "actor"):
                raise LearnerDied(f"{failure_reason(err)} (restarting)") from err
            raise
        d.note_pids("actor")
        state = state or {}
        self.updates_dropped = int(state.get("updates_dropped", 0))
        for name in self.recipe.stateful_components:
            if state.get(name) is not None:
                self.groups[name].load(state[name]).wait(self.timeout)
        rollout = self.groups["rollout"]
        # the rollout workers follow the new broadcast from the checkpoint's version on
        d.with_restarts("rollout", lambda: self._configure_rollouts(rollout))
        try:  # the rollout workers left it; nobody reads the old learner's weights any more
            old.destroy()
        except Exception as err:
            d.log(f"could not remove the old learner's weight sync {old.name!r}: {err}")
        rngs = state.get("rollout_rng") or []
        if len(rngs) == self.N:
            for r, rng in enumerate(rngs):
                d.with_restarts(
                    "rollout", lambda r=r, rng=rng: rollout.on(r).set_rng_state(rng).wait(self.timeout)
                )
        steps = int(state["run"]["steps"]) if "run" in state else 0
        env = self.groups["env"]
        d.with_restarts("env", lambda: env.reseed(self.runner_cfg.seed + steps).wait(self.timeout))
        self.collected_at.clear()
        self.collected_steps.clear()
        self.last_metrics = {}
        self.final_policy_record = None

    # -- checkpoints and the end ---------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The actor's state, the rollout workers' sampling streams and the stateful extras."""
        d = self.driver
        try:
            actor = self.groups["actor"].state().wait(self.timeout)[0]
        except Exception as err:
            if worker_died(err, "actor"):
                raise LearnerDied(
                    f"{failure_reason(err)} (writing the checkpoint of env step {d.steps})"
                ) from err
            raise
        rngs = d.with_restarts("rollout", lambda: self.groups["rollout"].rng_state().wait(self.timeout))
        state = {
            "distributed": True,
            "spec": self.spec,
            "batch": self.batch,
            "actor": actor,
            "rollout_rng": rngs,
            "updates_dropped": self.updates_dropped,
        }
        for name in self.recipe.stateful_components:
            group = self.groups[name]
            state[name] = d.with_restarts(name, lambda group=group: group.on(0).state().wait(self.timeout))[0]
        return state

    def final_policy(self) -> None:
        if not self.rollout_only and "actor" in self.groups:
            self.final_policy_record = self._policy()

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
            self.driver.log(
                f"no policy.safetensors: the learner is gone and the rollout workers' weights are not readable ({err})"
            )
            return None
        best = max(held, key=lambda h: h["version"])
        self.driver.log(
            f"policy.safetensors holds weight version {best['version']}, as the rollout workers had it"
        )
        spec = {k: v for k, v in self.spec.items() if k != "num_slots"}
        return {"algorithm": self.name, "spec": spec, "state_dict": best["state_dict"]}

    def finish(self, interrupted: bool, error: str | None) -> dict[str, Any]:
        d = self.driver
        if not self.rollout_only and "actor" in self.groups:
            policy = self.final_policy_record
            if policy is None and error is None:
                policy = self._policy()
            elif policy is None:
                policy = self._rollout_policy()
            if policy is not None:
                policy.update(env_record(self.env_cfg))
                write_state(policy, d.run_dir / POLICY)
        summary = d.rec.summary(self.name, self.env_cfg.id, d.steps, interrupted)
        summary.update(
            {
                "rollout_only": self.rollout_only,
                "iterations": d.iteration,
                "dropped_env_steps": d.dropped_steps,
                "workers": {
                    **{name: getattr(group, "world_size", 1) for name, group in self.groups.items()},
                    "pipeline_stages": getattr(self, "S", self.rollout_cfg.pipeline_stages),
                },
                "learner_world_size": self.learner_group.get("world_size", 1),
                "learner": self.learner_group,
            }
        )
        if self.learner_group.get("parameters") is not None:  # the policy's trainable and total
            summary["parameters"] = self.learner_group["parameters"]
        if self.warm_start is not None:
            summary["warm_start"] = self.warm_start
        return summary

"""Distributed LLM GRPO: the rollout, reward, reference, actor (and agent) components as worker
processes placed by the ``cluster`` section, batches over Channels, weights through the
broadcast. What ``rlinf train examples/grpo_*.yaml`` runs with ``runner.scheduler: ray``.

One iteration (the driver starts every call at once; the data moves between workers)::

    driver --problems--> agent ranks (or the driver itself when no `agent` is placed)
    agent  --gen "req"--> rollout ranks --gen "<agent key>"--> agent          (any idle rollout rank
                                                                              takes the next request)
    agent  --episodes "<it>/a<rank>"--> reward rank (agent rank mod #reward)
    reward --scored "<it>/r<rank>"--> actor
    actor  --refq "<it>"--> reference --refq "<it>/lp"--> actor              (kl_coef > 0)
    actor: GRPO update --WeightBroadcast (version it+1)--> rollout ranks, before their next request

Channels (``rlinf-<run id>-gen``, ``-episodes``, ``-scored``, ``-refq``) and the weight
broadcast (``rlinf-<run id>-policy``) are the scheduler's Ray-backed ones. The warm start runs on
the actor, which publishes version 0; the reference takes version 0 as its frozen copy. Agents
and the reward worker import no torch: they are light processes (the multi-agent example places
16 agent processes with ``agent: {node_group: node, placement: "0:0-15"}``).

Every wait has ``runner.worker_timeout`` and names what it waited for; the driver polls its calls,
so a worker whose process dies is named at once. A dead rollout, reward or agent worker is
restarted and its iteration's partial batch dropped (:mod:`rlinf_algos.lm.faults`); the death of
the actor or the reference ends the run naming it, and ``--resume`` continues it from the newest
checkpoint (:mod:`rlinf_algos.lm.checkpoint`). Fault tests hook ``on_generating`` (a rollout rank
took a request of iteration ``k``) and ``on_scoring`` (a reward rank took its episodes).

This module imports no torch at import time (agent and reward processes load it).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlinf_algos.lm.agents import make_agent
from rlinf_algos.lm.config import LMRunConfig
from rlinf_algos.lm.faults import (
    RESTARTABLE,
    FaultBook,
    RecoveryMixin,
    WorkerLost,
    settle,
)
from rlinf_algos.lm.flow import LMFlow
from rlinf_algos.lm.folder import context_length
from rlinf_algos.lm.remote_generate import ChannelGenerate, play
from rlinf_algos.lm.roles import STOP
from rlinf_algos.lm.tasks import make_task, task_tokenizer
from rlinf_algos.runtime.workers import WORKERS
from rlinf_core.errors import RlinfError

__all__ = ["RemoteComponents", "train_lm_distributed"]

# -- the driver ----------------------------------------------------------------------------------


class RemoteComponents(RecoveryMixin):
    """:class:`~rlinf_algos.lm.trainer.LocalComponents`' interface (``iterate``, ``evaluate``,
    ``policy``) over placed workers. Build with a started scheduler, then :meth:`start`.
    ``pids`` (``{component: [process id by rank]}``) is renewed after every restart."""

    def __init__(
        self,
        run: LMRunConfig,
        scheduler: Any,
        say: Callable[[str], None],
        callbacks: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self.run, self.scheduler, self.say = run, scheduler, say
        self.callbacks = dict(callbacks or {})
        self.run_dir: Path | None = None  # where the reward workers write their logs
        self.timeout = run.runner.worker_timeout
        self.groups: dict[str, Any] = {}
        self.serving: dict[int, Any] = {}
        self.pids: dict[str, list[int]] = {}
        self.faults = FaultBook(run.runner.max_restarts, say)
        self.attempt = 0  # the generation of channel keys: a new one for each try of an iteration
        self.version = 0
        self.tok = task_tokenizer(run)
        self.task = make_task(run, self.tok)
        self.evals = 0
        self.last_publish_bytes = 0
        self.placement: dict[str, Any] = {}

    def _plan(self, component: str) -> Any:
        plan = getattr(self.scheduler, "plan", None)
        try:
            return plan[component] if plan is not None else None
        except KeyError:
            return None

    def _channel(self, name: str, component: str) -> Any:
        plan = self._plan(component)
        opts: dict[str, Any] = {"default_timeout": self.timeout}
        if plan is not None and plan.processes:
            opts["node_rank"] = int(plan.processes[0].node_rank)
        return self.scheduler.channel(name, **opts)

    def start(self) -> None:
        """Create the channels, launch the workers, load the policy on the actor (publishing
        version 0) and start the rollout ranks' serve loops."""
        from concurrent.futures import ThreadPoolExecutor

        run = self.run
        uid = secrets.token_hex(4)
        self.weights_name = f"rlinf-{uid}-policy"
        with ThreadPoolExecutor(4) as pool:
            futs = [
                pool.submit(self._channel, f"rlinf-{uid}-{what}", comp)
                for what, comp in (
                    ("gen", "rollout"),
                    ("episodes", "reward"),
                    ("scored", "actor"),
                    ("refq", "actor"),
                )
            ]
            self.gen, self.episodes_ch, self.scored, self.refq = (f.result() for f in futs)
        flow = LMFlow(run)
        use_agents = self._plan("agent") is not None and self.task.mode == "multiagent"
        n_rollout = int(self._plan("rollout").world_size) if self._plan("rollout") is not None else 1
        common = {"timeout": self.timeout, "seed": run.runner.seed}
        torch_threads = run.runner.torch_threads
        launches: dict[str, dict[str, Any]] = {
            "actor": {
                **common, "weights": self.weights_name, "threads": torch_threads,
                "channels": {"scored": self.scored, "refq": self.refq}, "device": run.runner.device,
                "strategy": run.actor.strategy, "micro_batch_size": run.actor.micro_batch_size,
            },
            "rollout": {**common, "weights": self.weights_name, "threads": torch_threads, "channels": {"gen": self.gen}},
            "reward": {
                **common, "threads": 0, "channels": {"episodes": self.episodes_ch, "scored": self.scored},
                "log_dir": str(self.run_dir / "logs") if self.run_dir is not None else None,
            },
        }  # fmt: skip
        if run.algorithm.kl_coef > 0:
            launches["reference"] = {
                **common, "weights": self.weights_name, "threads": torch_threads, "channels": {"refq": self.refq},
            }  # fmt: skip
        if use_agents:
            launches["agent"] = {
                **common, "threads": 0, "channels": {"gen": self.gen, "episodes": self.episodes_ch},
                "n_rollout": n_rollout,
            }  # fmt: skip
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(launches)) as pool:
            futs2 = {
                name: pool.submit(self.scheduler.launch, name, WORKERS[name], flow, **kw)
                for name, kw in launches.items()
            }
            for name, fut in futs2.items():
                self.groups[name] = fut.result()
        for name, group in self.groups.items():
            nodes = sorted({p.node_rank for p in group.placements}) if hasattr(group, "placements") else []
            self.placement[name] = {"processes": group.world_size, "nodes": nodes}
        self.learner_world_size = int(self.groups["actor"].world_size)
        if not use_agents:
            self.placement["agent"] = {"processes": 0, "where": "the driver (single agent per episode)"}
            self.local_agent = make_agent(
                self.task, self.tok, self.task.max_new_tokens(), run.task.max_calls, context_length(run.model)
            )
        self.say(
            "workers: "
            + ", ".join(f"{k} x{v['processes']}" for k, v in self.placement.items() if v["processes"])
            + f" (started in {time.perf_counter() - t0:.1f} s)"
        )
        self.n_rollout = n_rollout
        self.n_reward = self.groups["reward"].world_size
        self.n_agent = self.groups["agent"].world_size if use_agents else 0
        for name in self.groups:
            if name in RESTARTABLE:  # a dead rank is restarted alone; the others keep running
                self.groups[name].stop_on_failure = False
            self._note_pids(name)
        self.groups["actor"].configure().wait(self.timeout)
        if "reference" in self.groups:
            self.groups["reference"].configure().wait(self.timeout)
        self.serving = {
            r: self.groups["rollout"].on(r).serve() for r in range(self.groups["rollout"].world_size)
        }
        self.policy_model: Any = None

    def _play_all(
        self,
        key: str,
        problems: Sequence[Any],
        group_size: int,
        temperature: float | None,
        report: str | None,
    ) -> tuple[list[str], dict[tuple[str, int], Any], list[dict[str, Any]]]:
        """Start the agents (or play in the driver); returns the episode keys (in problem
        order), the pending agent calls, and the driver's own play jobs."""
        if self.n_agent:
            n = min(self.n_agent, len(problems))
            size = -(-len(problems) // n)
            chunks = [list(problems[i : i + size]) for i in range(0, len(problems), size)]
            keys = [f"{key}/a{r}" for r in range(len(chunks))]
            calls = {
                ("agent", r): self.groups["agent"]
                .on(r)
                .play(k, c, group_size, temperature, self.version, report)
                for r, (k, c) in enumerate(zip(keys, chunks, strict=True))
            }
            return keys, calls, []
        gen = ChannelGenerate(
            self.gen, self.n_rollout, f"driver/{key}", temperature, self.version, self.timeout,
            check=self._check_rollouts, report=report,
        )  # fmt: skip
        return [f"{key}/a0"], {}, [{"problems": list(problems), "gen": gen}]

    def _drive(
        self,
        key: str,
        problems: Sequence[Any],
        group_size: int,
        temperature: float | None,
        train: bool,
        it: int,
    ) -> dict[str, Any]:
        generating = f"{key}/generating" if "on_generating" in self.callbacks else None
        scoring = f"{key}/scoring" if "on_scoring" in self.callbacks else None
        if generating is not None:
            self._watch(self.gen, generating, "on_generating", it)
        if scoring is not None:
            self._watch(self.episodes_ch, scoring, "on_scoring", it)
        keys, agent_calls, local = self._play_all(key, problems, group_size, temperature, generating)
        by_reward: dict[int, list[str]] = {}
        for i, k in enumerate(keys):
            by_reward.setdefault(i % self.n_reward, []).append(k)
        calls = {
            ("reward", r): self.groups["reward"].on(r).score(ks, f"{key}/r{r}" if train else None, scoring)
            for r, ks in by_reward.items()
        }
        ref_key = f"{key}/ref" if train and "reference" in self.groups else None
        if ref_key is not None:
            calls[("reference", 0)] = self.groups["reference"].log_probs(ref_key)
        if train:  # one scored item per episodes key, from the reward rank that scores it
            dests = [f"{key}/r{r}" for r in sorted(by_reward) for _ in by_reward[r]]
            calls[("actor", 0)] = self.groups["actor"].train(key, keys=dests, ref_key=ref_key)
        t0 = time.perf_counter()
        try:
            agent_stats: list[dict[str, Any]] = []
            for job in local:  # the driver plays the (single) agent itself
                eps, st = play(self.local_agent, job["problems"], group_size, job["gen"])
                self.episodes_ch.put(eps.to_dict(), keys[0], timeout=self.timeout)
                agent_stats.append(st)
            if agent_calls:
                done = settle(agent_calls, self.timeout, f"{key}: the agents", self._check_rollouts)
                agent_stats += list(done.values())
            generate_s = time.perf_counter() - t0
            done = settle(calls, self.timeout, f"{key}: the reward, reference and actor workers")
        except WorkerLost as lost:
            targets = [(self.gen, f"agent{r}/{key}") for r in range(self.n_agent)]
            targets += [(self.episodes_ch, k) for k in keys] + [
                (self.scored, f"{key}/r{r}") for r in by_reward
            ]
            if ref_key is not None:
                targets += [(self.refq, ref_key), (self.refq, ref_key + "/lp")]
            lost.settled = self._abort(targets, {**agent_calls, **calls}, lost)
            raise
        rewards = {r: done[("reward", r)] for r in by_reward}
        out: dict[str, Any] = {"rewards": [], "correct": [], "well_formed": []}
        for i, k in enumerate(keys):
            part = rewards[i % self.n_reward]["parts"][k]
            for f in ("rewards", "correct", "well_formed"):
                out[f] += part[f]
        out["agent_stats"] = agent_stats
        out["generate_s"] = generate_s
        out["reward_s"] = max((r["busy_s"] for r in rewards.values()), default=0.0)
        out["reward_failures"] = sum(int(r.get("failures", 0)) for r in rewards.values())
        if train:
            out["actor"] = done[("actor", 0)]
            out["reference_s"] = done[("reference", 0)]["busy_s"] if ref_key is not None else 0.0
        return out

    def _attempts(self, what: str, it: int, run: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        """``run(key)`` under a new generation of keys until no worker is lost in it: a dead
        rollout, reward or agent rank is restarted and the partial batch dropped. With ``what``
        ``"iteration"``, a lost call after which the actor still trained on the whole batch (the
        dead rank had delivered its part) keeps that update."""
        while True:
            self.attempt += 1
            try:
                return run(f"g{self.attempt}-{what[:4]}{it}")
            except WorkerLost as lost:
                self._recover(lost, f"in {what} {it}", self._resume_hint())
                actor = lost.settled.get(("actor", 0))
                if what == "iteration" and actor and not actor.get("aborted"):
                    self.faults.log(f"iteration {it}: the actor had the whole batch; its update is kept")
                    o = actor["outcomes"]
                    return {
                        **{f: o[f] for f in ("rewards", "correct", "well_formed")},
                        "agent_stats": [{"generated_tokens": o["generated_tokens"]}],
                        "generate_s": 0.0,
                        "reward_s": 0.0,
                        "reward_failures": 0,
                        "actor": actor,
                        "reference_s": 0.0,
                    }
                if what == "iteration":
                    self.faults.dropped_batches += 1
                    self.faults.log(f"iteration {it}: dropped its partial batch; running it again")

    def iterate(self, problems: Sequence[Any], group_size: int) -> dict[str, Any]:
        it = self.version + 1
        res = self._attempts(
            "iteration", it, lambda key: self._drive(key, problems, group_size, None, True, it)
        )
        actor = res["actor"]
        self.version = int(actor["version"])
        self.last_publish_bytes = int(actor.get("publish_bytes", 0))
        import numpy as np

        return {
            "rewards": np.asarray(res["rewards"], dtype=np.float32),
            "correct": np.asarray(res["correct"], dtype=bool),
            "well_formed": np.asarray(res["well_formed"], dtype=bool),
            "sequences": actor["sequences"],
            "generated_tokens": sum(int(s["generated_tokens"]) for s in res["agent_stats"]),
            "stats": actor["stats"],
            "reward_failures": res["reward_failures"],
            "phase": {
                "generate": res["generate_s"],
                "reward": res["reward_s"],
                "reference": res["reference_s"],
                "update": actor["update_s"],
                "sync": actor.get("publish_s", 0.0),
            },
        }

    def evaluate(self, problems: Sequence[Any], temperature: float = 0.0) -> dict[str, list[bool]]:
        self.evals += 1
        res = self._attempts(
            "evaluation",
            self.evals,
            lambda key: self._drive(key, problems, 1, temperature, False, -self.evals),
        )
        return {"correct": res["correct"], "well_formed": res["well_formed"], "rewards": res["rewards"]}

    def policy(self) -> Any:
        """The actor's current policy, as a model in this process."""
        from rlinf_algos.lm import hf

        state = self.groups["actor"].policy().wait(self.timeout)[0]
        if self.policy_model is None:
            self.policy_model = hf.load_causal_lm(self.run.model)  # requires_grad as trained: the counts
        hf.load_sync_state(self.policy_model, state["state_dict"])
        return self.policy_model

    def publish_bytes(self) -> int:
        return self.last_publish_bytes

    def state(self) -> dict[str, Any]:
        """The components' part of a checkpoint: the actor's state (rank 0's)."""
        return {
            "actor": self.groups["actor"].state().wait(self.timeout)[0],
            "faults": self.faults.state(),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state`: every actor rank loads it and the weights are published
        as the checkpoint's version (the reference has taken version 0 already)."""
        self.version = int(self.groups["actor"].load(dict(state["actor"])).wait(self.timeout)[0])
        self.faults.load(state.get("faults"))

    def close(self) -> None:
        """End the serve loops (a :data:`STOP` per rollout rank) and stop every worker group,
        all at once (a preempted job has about 30 s before SIGKILL)."""
        from concurrent.futures import ThreadPoolExecutor

        if self.serving:
            try:
                for _ in self.serving:
                    self.gen.put(STOP, "req", timeout=5.0)
                for call in self.serving.values():
                    call.wait(10.0)
            except Exception:  # a worker already failed: its error was reported
                pass

        def stop(group: Any) -> None:
            try:
                group.shutdown(timeout=10.0)
            except Exception:
                pass

        if self.groups:
            with ThreadPoolExecutor(len(self.groups)) as pool:
                list(pool.map(stop, self.groups.values()))


def train_lm_distributed(
    run: LMRunConfig,
    scheduler: Any,
    run_dir: Path,
    log: Callable[[str], None] | None = print,
    progress: Callable[[dict[str, Any]], None] | None = None,
    cluster: Mapping[str, Any] | None = None,
    resume: bool = False,
    callbacks: Mapping[str, Callable[..., Any]] | None = None,
) -> dict[str, Any]:
    """:func:`~rlinf_algos.lm.trainer.train_lm` with the components on placed workers
    (``scheduler``: a started :class:`rlinf_core.scheduler.Scheduler`). ``callbacks``:
    ``on_generating(comps, iteration, {"rank", "pid"})`` when a rollout rank takes a request,
    ``on_scoring(...)`` when a reward rank takes its episodes (evaluations: negative iterations)."""
    import torch

    from rlinf_algos.lm.checkpoint import load_lm_checkpoint
    from rlinf_algos.lm.trainer import grpo_loop, prepare_models
    from rlinf_core.scheduler import Scheduler

    if not isinstance(scheduler, Scheduler):
        raise RlinfError(
            f"grpo_lm's distributed runner needs a started rlinf_core.Scheduler, got {type(scheduler).__name__}"
        )
    say = log or (lambda _msg: None)
    torch.set_num_threads(run.runner.torch_threads)
    t_start = time.perf_counter()
    cpu0 = time.process_time()
    state = None
    if resume:
        folder, state = load_lm_checkpoint(run_dir, run.algorithm.name)
        for skipped in state.get("skipped_checkpoints", []):
            say(f"warning: skipped the damaged checkpoint {skipped}")
        say(f"resuming from {folder} (iteration {state['loop']['iteration']})")
    config_run = run
    run, policy_run, sft = prepare_models(run, Path(run_dir), say, state)
    comps = RemoteComponents(policy_run, scheduler, say, callbacks)
    comps.run_dir = Path(run_dir)
    try:
        comps.start()
        return grpo_loop(
            run,
            Path(run_dir),
            comps,
            comps.tok,
            sft,
            say,
            progress=progress,
            t_start=t_start,
            cpu_s=lambda: time.process_time() - cpu0,
            cluster=cluster,
            scheduler=str(getattr(scheduler, "PLUGIN_NAME", type(scheduler).__name__)),
            config_run=config_run,
            resume_state=state,
        )
    except RlinfError as err:
        raise _user_error(err) from None
    finally:
        comps.close()


def _user_error(err: RlinfError) -> RlinfError:
    """A worker's failure as the user sees it: when its cause is rlinf's own one-line error (a
    reward that failed, a damaged model folder a worker found), that error itself, as the
    in-process runner raises it, without the remote traceback of rlinf's internals (the
    scheduler's error keeps it, ``remote_traceback``); anything else as it is."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, RlinfError) and getattr(err, "remote_traceback", None) else err

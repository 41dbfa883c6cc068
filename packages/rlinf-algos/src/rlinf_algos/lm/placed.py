"""A language-model flow on placed workers: the rollout, reward, reference, actor (and agent)
roles as worker processes placed by the ``cluster`` section, batches over the scheduler's
channels (``rlinf-<run id>-gen``, ``-episodes``, ``-scored``, ``-refq``), weights through the
run's weight sync (``rollout.weight_sync``; a LoRA adapter through the object store), which the
driver creates through the scheduler and hands to the actor, the rollout ranks and the
reference. The data flow of an iteration is :mod:`rlinf_algos.lm.roles`'.

The warm start runs in the driver before the workers start; the actor loads the warm-started
folder and publishes version 0, which the reference freezes. Agents and the reward worker import
no torch: they are light processes (the multi-agent example places 16 agent processes with
``agent: {node_group: node, placement: "0:0-15"}``). Without an ``agent`` component the driver
plays the agent itself. A tools run (``mode: tools``) may place a ``tool`` component: its ranks
load the ``tools`` section once each (the search index) and serve the episodes' calls over the
``rlinf-<run id>-tools`` channel (:mod:`rlinf_algos.tools.placed`); without one, tools run where
the episodes are played (the agent processes, or the driver).

Worker deaths are the driver's (:mod:`rlinf_algos.runtime.recovery`): a dead rollout, reward,
reference, agent or tool worker is restarted and its iteration's partial batch dropped (unless the
actor had already trained on the whole batch: then the update is kept); a restarted reference
freezes the same weights again from the model folder the actor loaded version 0 from (the
warm-started policy or the run's base model, both in the run directory), not from the weight sync,
which has moved on. The death of the actor ends the run naming it, and ``--resume`` continues it
from the newest checkpoint. Fault tests hook
``on_generating(run, k, {"rank", "pid"})`` (a rollout rank took a request of iteration ``k``;
evaluations: negative ``k``), ``on_scoring`` (a reward rank took its episodes) and ``on_tool_call``
(a tool rank took a call).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlinf_algos.channels import ABORT, Aborted
from rlinf_algos.flow import await_call
from rlinf_algos.lm.agents import EpisodeBatch, episode_metrics, make_agent
from rlinf_algos.lm.folder import context_length
from rlinf_algos.lm.remote_generate import ChannelGenerate, play
from rlinf_algos.lm.roles import STOP, hand_on, with_behaviour
from rlinf_algos.lm.run import LMRun
from rlinf_algos.lm.tasks import make_task, task_tokenizer
from rlinf_algos.runtime.workers import WORKERS
from rlinf_core.errors import RlinfError

__all__ = ["LMPlacedRun"]


class LMPlacedRun(LMRun):
    """The language-model flow on placed workers; it is its own components
    (``iterate``, ``evaluate``, ``policy``...)."""

    roles = {
        "rollout": "in_place",
        "reward": "in_place",
        "agent": "in_place",
        "tool": "in_place",
        "reference": "in_place",
        "actor": "never",
    }
    holds = {"actor": "the policy and its optimiser state"}

    def __init__(self, driver: Any, flow: Any) -> None:
        super().__init__(driver, flow)
        self.timeout = driver.timeout
        self.serving: dict[tuple[str, int], Any] = {}
        self.tools_ch: Any = None
        self.n_tool = 0
        self.watched: dict[tuple[str, int], asyncio.Future[Any]] = {}
        self.version = 0
        self.evals_done = 0
        self.last_publish_bytes = 0
        self.placement: dict[str, Any] = {}

    @property
    def scheduler_name(self) -> str:
        return str(getattr(self.driver.scheduler, "PLUGIN_NAME", type(self.driver.scheduler).__name__))

    @property
    def learner_world_size(self) -> int:
        return int(self.groups["actor"].world_size)

    # -- start -------------------------------------------------------------------------------------
    def components(self) -> LMPlacedRun:
        """Create the channels, launch the workers, load the policy on the actor (publishing
        version 0), freeze it on the reference and start the rollout ranks' serve loops."""
        from concurrent.futures import ThreadPoolExecutor

        d, run = self.driver, self.policy_run
        self.tok = task_tokenizer(run)
        self.task = make_task(run, self.tok)
        uid = secrets.token_hex(4)
        consumers = ("rollout", "reference") if run.algorithm.kl_coef > 0 else ("rollout",)
        self.weights = d.weight_sync(
            f"rlinf-{uid}-policy", run.rollout.weight_sync, consumers, adapter_only=run.model.lora is not None
        )
        with ThreadPoolExecutor(4) as pool:
            futs = [
                pool.submit(d.channel, f"rlinf-{uid}-{what}", role, default_timeout=self.timeout)
                for what, role in (
                    ("gen", "rollout"),
                    ("episodes", "reward"),
                    ("scored", "actor"),
                    ("refq", "actor"),
                )
            ]
            self.gen, self.episodes_ch, self.scored, self.refq = (f.result() for f in futs)
        flow = self.flow.with_run(run)  # the workers load the run's policy folder
        use_agents = d.plan("agent") is not None and self.task.mode in ("multiagent", "tools")
        use_tools = d.plan("tool") is not None and self.task.mode == "tools"
        if use_tools:
            self.tools_ch = d.channel(f"rlinf-{uid}-tools", "tool", default_timeout=self.timeout)
        n_rollout = d.world("rollout") or 1
        common = {"timeout": self.timeout, "seed": run.runner.seed}
        threads = run.runner.torch_threads
        launches: dict[str, dict[str, Any]] = {
            "actor": {
                **common, "weights": self.weights, "threads": threads,
                "channels": {"scored": self.scored, "refq": self.refq}, "device": run.runner.device,
                "strategy": run.actor.strategy, "micro_batch_size": run.actor.micro_batch_size,
            },
            "rollout": {**common, "weights": self.weights, "threads": threads, "channels": {"gen": self.gen}},
            "reward": {
                **common, "threads": 0, "channels": {"episodes": self.episodes_ch, "scored": self.scored},
                "log_dir": str(Path(d.run_dir) / "logs"),
            },
        }  # fmt: skip
        if run.algorithm.kl_coef > 0:
            launches["reference"] = {
                **common, "weights": self.weights, "threads": threads, "channels": {"refq": self.refq},
            }  # fmt: skip
        tools_channel = {"tools": self.tools_ch} if use_tools else {}
        if use_agents:  # the agents hand the episodes on themselves (roles.hand_on)
            launches["agent"] = {
                **common, "threads": 0, "n_rollout": n_rollout,
                "channels": {
                    "gen": self.gen, "episodes": self.episodes_ch, "scored": self.scored, "refq": self.refq,
                    **tools_channel,
                },
            }  # fmt: skip
        if use_tools:
            launches["tool"] = {**common, "threads": 0, "channels": tools_channel}
        t0 = time.perf_counter()
        d.launch({name: (WORKERS[name], (flow,), kw) for name, kw in launches.items()})
        groups = self.groups
        for name, group in groups.items():
            plan = d.plan(name)  # the PlacementPlan protocol; a scheduler that places nothing has none
            nodes = sorted({p.node_rank for p in plan.processes}) if plan is not None else []
            self.placement[name] = {"processes": group.world_size, "nodes": nodes}
        if self.task.mode == "tools" and not use_tools:
            where = "the agent processes" if use_agents else "the driver"
            self.placement["tool"] = {"processes": 0, "where": where}
        if not use_agents:
            self.placement["agent"] = {"processes": 0, "where": "the driver"}
            self.local_agent = make_agent(
                self.task, self.tok, self.task.max_new_tokens(), run.task.max_calls, context_length(run.model)
            )
        self.say(
            "workers: "
            + ", ".join(f"{k} x{v['processes']}" for k, v in self.placement.items() if v["processes"])
            + f" (started in {time.perf_counter() - t0:.1f} s)"
        )
        self.n_rollout = groups["rollout"].world_size
        self.n_reward = groups["reward"].world_size
        self.n_agent = groups["agent"].world_size if use_agents else 0
        self.n_tool = groups["tool"].world_size if use_tools else 0
        groups["actor"].configure().wait(self.timeout)
        if "reference" in groups:
            groups["reference"].configure().wait(self.timeout)
        for role, n in (("rollout", self.n_rollout), ("tool", self.n_tool)):
            for r in range(n):
                self.serving[(role, r)] = groups[role].on(r).serve()
        return self

    def after_restart(self, role: str, ranks: list[int], configure: bool) -> str | None:
        if role in ("rollout", "tool"):
            for r in ranks:
                self.serving[(role, r)] = self.groups[role].on(r).serve()
                self.watched.pop((role, r), None)
        if role == "reference":  # the weight sync moved on: version 0 again from its folder
            self.groups["reference"].on(ranks).reload().wait(self.timeout)
            return f"; it froze {self.policy_run.model.path} again"
        return None

    # -- an iteration (or an evaluation) on the workers --------------------------------------------
    def _watch_key(self, channel: Any, key: str, hook: str, it: int) -> None:
        """Call the hook ``hook`` once a worker reports on ``key`` (a thread: the driver goes on
        meanwhile)."""

        def wait() -> None:
            try:
                report = channel.get(key, timeout=self.timeout)
            except Exception:  # the iteration ended before anyone reported
                return
            self.driver.callback(hook, it, report)

        threading.Thread(target=wait, name=f"rlinf-{hook}", daemon=True).start()

    def _serve_futures(self) -> dict[tuple[str, int], asyncio.Future[Any]]:
        """The rollout and tool ranks' serve loops as futures of the driver's loop (made once per
        loop)."""
        for rank, call in self.serving.items():
            if rank not in self.watched:
                self.watched[rank] = asyncio.ensure_future(await_call(call))
        return dict(self.watched)

    async def _drive(
        self,
        key: str,
        problems: Sequence[Any],
        group_size: int,
        temperature: float | None,
        train: bool,
        it: int,
        min_version: int | None = None,
        generated: asyncio.Future[None] | None = None,
    ) -> tuple[dict[str, Any] | None, dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        """One pass of ``problems`` over the workers under the channel keys ``key``: the agents
        (or the driver) play, the reward ranks score, the reference and the actor (``train``)
        update. Returns ``(outcome or None when a worker failed, results, dead, fatal)``.
        ``min_version``: the oldest weights the rollout ranks may generate with (``None``: the
        learner's newest, a synchronous run); ``generated``: set once every episode is played
        and handed on (an asynchronous run then starts the next iteration's)."""
        d = self.driver
        version = self.version if min_version is None else min_version
        behaviour = train and min_version is not None
        generating = f"{key}/generating" if "on_generating" in d.callbacks else None
        scoring = f"{key}/scoring" if "on_scoring" in d.callbacks else None
        tooling = f"{key}/tooling" if "on_tool_call" in d.callbacks and self.n_tool else None
        if tooling is not None:
            self._watch_key(self.tools_ch, tooling, "on_tool_call", it)
        if generating is not None:
            self._watch_key(self.gen, generating, "on_generating", it)
        if scoring is not None:
            self._watch_key(self.episodes_ch, scoring, "on_scoring", it)
        calls: dict[tuple[str, int], Any] = {}
        use_ref = train and "reference" in self.groups
        if self.n_agent:
            n = min(self.n_agent, len(problems))
            size = -(-len(problems) // n)
            chunks = [list(problems[i : i + size]) for i in range(0, len(problems), size)]
            keys = [f"{key}/a{r}" for r in range(len(chunks))]
            for r, (k, c) in enumerate(zip(keys, chunks, strict=True)):
                calls[("agent", r)] = (
                    self.groups["agent"]
                    .on(r)
                    .play(k, c, group_size, temperature, version, generating, tooling, train, use_ref,
                          **({"behaviour": True} if behaviour else {}))
                )  # fmt: skip
                if generated is not None:  # the agents hand the episodes on before they return
                    calls[("agent", r)] = asyncio.ensure_future(await_call(calls[("agent", r)]))
        else:
            keys = [f"{key}/a0"]
        by_reward: dict[int, list[str]] = {}
        for i, k in enumerate(keys):
            by_reward.setdefault(i % self.n_reward, []).append(k)
        for r, ks in by_reward.items():
            calls[("reward", r)] = self.groups["reward"].on(r).score(ks, train, scoring)
        # the batch's order: the parts of reward rank 0, then 1... (as they were scored before)
        order = [k for r in sorted(by_reward) for k in by_reward[r]]
        ref_key = f"{key}/ref" if use_ref else None
        if ref_key is not None:
            calls[("reference", 0)] = self.groups["reference"].log_probs(order, ref_key)
        if train:
            calls[("actor", 0)] = self.groups["actor"].train(key, keys=order, ref_key=ref_key)
        reply = f"driver/{key}"
        targets = [(self.gen, f"agent{r}/{key}") for r in range(self.n_agent)] + [(self.gen, reply)]
        targets += [(self.episodes_ch, k) for k in keys]
        if train:
            targets += [(self.scored, k) for k in keys] + [(self.scored, f"{k}/score") for k in keys]
        if self.n_tool:  # the agents' (or the driver's) tool replies
            targets += [(self.tools_ch, f"agent{r}/{k}/tools") for r, k in enumerate(keys[: self.n_agent])]
            targets += [(self.tools_ch, f"{reply}/tools")]
        if ref_key is not None:
            targets += [(self.refq, k) for k in keys] + [(self.refq, ref_key + "/lp")]

        def abort() -> None:
            for channel, k in targets:
                try:
                    channel.put(ABORT, k, timeout=5.0)
                except Exception:  # a full or closed channel: its reader is gone anyway
                    pass

        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        local: asyncio.Future[Any] | None = None
        if not self.n_agent:  # the driver plays the (single) agent itself, beside the calls
            generate = ChannelGenerate(
                self.gen, self.n_rollout, reply, temperature, version, self.timeout, report=generating,
                behaviour=behaviour,
            )  # fmt: skip
            tools = None
            if self.n_tool:
                from rlinf_algos.tools.placed import PlacedTools

                tools = PlacedTools(self.tools_ch, f"{reply}/tools", self.timeout, report=tooling)
            local = loop.run_in_executor(
                None, self._play_here, problems, group_size, generate, keys[0], tools, train, use_ref
            )
        if generated is not None:
            played = [c for (role, _), c in calls.items() if role == "agent"] + ([local] if local else [])
            asyncio.ensure_future(asyncio.wait(played)).add_done_callback(
                lambda _: generated.done() or generated.set_result(None)
            )
        gathering = asyncio.ensure_future(d.gather(calls, abort=abort, watch=self._serve_futures()))
        agent_stats: list[dict[str, Any]] = []
        generate_s = 0.0
        if local is not None:
            await asyncio.wait({local, gathering}, return_when=asyncio.FIRST_COMPLETED)
            if local.done() and local.exception() is None and local.result() is not None:
                agent_stats.append(local.result())
                generate_s = time.perf_counter() - t0
            elif not local.done():  # a worker failed first: the abort ends the play
                await asyncio.wait({local})
            if local.exception() is not None and not gathering.done():
                abort()
        results, dead, fatal, _ = await gathering
        if local is not None and local.exception() is not None and not (dead or fatal):
            raise local.exception()  # the driver's own play failed
        for role, r in [k for k in results if k[0] == "agent"]:
            agent_stats.append(results[(role, r)])
            generate_s = max(generate_s, float(results[(role, r)].get("generate_s", 0.0)))
        if dead or fatal or any(isinstance(v, dict) and v.get("aborted") for v in results.values()):
            return None, results, dead, fatal
        rewards = {r: results[("reward", r)] for r in by_reward}
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
            out["actor"] = results[("actor", 0)]
            out["reference_s"] = results[("reference", 0)]["busy_s"] if ref_key is not None else 0.0
        return out, results, dead, fatal

    def _play_here(
        self, problems: Sequence[Any], group_size: int, generate: Any, key: str, tools: Any = None,
        train: bool = False, reference: bool = False,
    ) -> dict[str, Any] | None:  # fmt: skip
        """The driver plays the agent (its tools from ``tools``, the tool ranks' client, when
        given) and hands the episodes on as an agent does (:func:`~rlinf_algos.lm.roles.hand_on`).
        ``None`` when the driver ended the iteration."""
        try:
            eps, stats = play(self.local_agent, problems, group_size, generate, tools)
        except Aborted:
            return None
        channels = {"episodes": self.episodes_ch, "scored": self.scored, "refq": self.refq}
        out = eps.to_dict()
        if generate.behaviour is not None:  # an asynchronous run's
            out = with_behaviour(out, generate.behaviour)
        hand_on(out, key, channels, self.timeout, train, reference)
        return stats

    async def _attempts(self, what: str, it: int, problems: Sequence[Any], group_size: int,
                        temperature: float | None, train: bool, min_version: int | None = None,
                        generated: asyncio.Future[None] | None = None) -> dict[str, Any]:  # fmt: skip
        """The pass under a new generation of keys until no worker is lost in it: dead ranks are
        restarted (or end the run, as their role says) and the partial batch dropped. In an
        iteration, a lost call after which the actor still trained on the whole batch (the dead
        rank had delivered its part) keeps that update."""
        d = self.driver
        loop = asyncio.get_running_loop()
        while True:
            out, results, dead, fatal = await self._drive(
                f"g{d.gen}-{what[:4]}{it}",
                problems,
                group_size,
                temperature,
                train,
                it,
                min_version,
                generated,
            )
            if out is not None:
                return out
            if fatal:
                raise next(iter(fatal.values()))
            actor = results.get(("actor", 0))
            kept = what == "iteration" and actor and not actor.get("aborted")
            await loop.run_in_executor(None, d.replace_dead, dead, f"in {what} {it}")
            if kept:
                d.log(f"iteration {it}: the actor had the whole batch; its update is kept")
                o = actor["outcomes"]
                return {
                    **{f: o[f] for f in ("rewards", "correct", "well_formed")},
                    "agent_stats": [{"generated_tokens": o["generated_tokens"]}],
                    "generate_s": 0.0, "reward_s": 0.0, "reward_failures": 0, "actor": actor, "reference_s": 0.0,
                }  # fmt: skip
            why = "; ".join(f"{c} rank {r}: {str(e).splitlines()[0][:200]}" for (c, r), e in dead.items())
            if what == "iteration":
                d.drop(it, 0, why or "a peer ended the iteration")
            else:
                d.gen += 1

    async def iterate(self, problems: Sequence[Any], group_size: int) -> dict[str, Any]:
        it = self.version + 1
        return self._result(await self._attempts("iteration", it, problems, group_size, None, True))

    def start_iteration(
        self, it: int, problems: Sequence[Any], group_size: int, min_version: int
    ) -> tuple[asyncio.Future[None], asyncio.Future[dict[str, Any]]]:
        """Start iteration ``it`` of an asynchronous run (``rollout.max_staleness > 0``): its
        episodes generated by weights of version ``min_version`` at least (the newest the
        rollout ranks have), each with its version and behaviour log-probs, then scored and
        trained on once the learner is done with the iterations before it. Returns ``(generated,
        result)``: ``generated`` is set once its episodes are handed on (the next iteration's
        generation may start: it overlaps this one's update), ``result`` is :meth:`iterate`'s."""
        loop = asyncio.get_running_loop()
        generated: asyncio.Future[None] = loop.create_future()

        async def run() -> dict[str, Any]:
            try:
                res = await self._attempts(
                    "iteration", it, problems, group_size, None, True, min_version, generated
                )
            except Exception:
                await self._older_failure(it)
                raise
            return self._result(res)

        return generated, asyncio.ensure_future(run())

    async def _older_failure(self, it: int) -> None:
        """Raise the error of an iteration in flight before ``it`` that fails: it saw the root
        cause first (a learner rank's death stops the actor group, which a later iteration then
        finds shut down), so its error, not the later one's, ends the run."""
        for k, older in list(self.inflight):
            if k < it:
                await asyncio.wait({older})
                if not older.cancelled() and older.exception() is not None:
                    raise older.exception()  # type: ignore[misc]

    def _result(self, res: dict[str, Any]) -> dict[str, Any]:
        """An iteration's outcome as :meth:`iterate` returns it (the learner's version noted)."""
        import numpy as np

        actor = res["actor"]
        self.version = int(actor["version"])
        self.last_publish_bytes = int(actor.get("publish_bytes", 0))
        return {
            "rewards": np.asarray(res["rewards"], dtype=np.float32),
            "correct": np.asarray(res["correct"], dtype=bool),
            "well_formed": np.asarray(res["well_formed"], dtype=bool),
            "sequences": actor["sequences"],
            "generated_tokens": sum(int(s["generated_tokens"]) for s in res["agent_stats"]),
            "stats": actor["stats"],
            "reward_failures": res["reward_failures"],
            "agent_metrics": episode_metrics(
                EpisodeBatch(metrics=[m for s in res["agent_stats"] for m in s.get("metrics", [])]),
                res["correct"],
            ),
            "phase": {
                "generate": res["generate_s"],
                "reward": res["reward_s"],
                "reference": res["reference_s"],
                "update": actor["update_s"],
                "sync": actor.get("publish_s", 0.0),
            },
        }

    async def evaluate(self, problems: Sequence[Any], temperature: float = 0.0) -> dict[str, list[Any]]:
        self.evals_done += 1
        res = await self._attempts("evaluation", self.evals_done, problems, 1, temperature, False)
        return {"correct": res["correct"], "well_formed": res["well_formed"], "rewards": res["rewards"]}

    # -- state ---------------------------------------------------------------------------------------
    def parameter_counts(self) -> tuple[int, int]:
        """``(trainable, total)`` parameters, as the actor counts them (no model here)."""
        counts = self.groups["actor"].on(0).world().wait(self.timeout)[0]["parameters"]
        return int(counts["trainable"]), int(counts["total"])

    def write_policy(self, policy_dir: Path, adapter_dir: Path) -> None:
        """Write the final policy from the learner's state: the files of the model folder the
        actor made of its own model (:meth:`~rlinf_algos.lm.roles.LMActor.policy`), each folder
        written beside its place and renamed into it. An FSDP learner group returns its gathered
        weights instead, and they are loaded into a model here to be written."""
        from rlinf_algos.lm import hf
        from rlinf_algos.lm.model_type import load_lm_model

        record = self.groups["actor"].policy().wait(self.timeout)[0]
        if "state_dict" in record:  # sharded: the weights as a publish carries them
            model = load_lm_model(self.policy_run.model)
            hf.load_sync_state(model, record["state_dict"])
            hf.save_model_folder(model, Path(self.run.model.path or ""), policy_dir, adapter_dir)
            return
        for name, dest in (("policy", policy_dir), ("adapter", adapter_dir)):
            if name in record:
                hf.write_folder_files(Path(dest), record[name])

    def publish_bytes(self) -> int:
        return self.last_publish_bytes

    def components_state(self) -> dict[str, Any]:
        """The components' part of a checkpoint: the actor's state (rank 0's) and every rollout
        rank's sampling streams (so a resumed run samples what an uninterrupted one samples)."""
        actor = self.groups["actor"].state().wait(self.timeout)[0]
        rngs = self._between_serves(lambda rollout: rollout.rng_state().wait(self.timeout))
        return {"actor": actor, "rollout_rng": rngs}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint: every actor rank loads it and the weights are published as
        the checkpoint's version (the reference has taken version 0 already); the rollout ranks
        take their sampling streams back (a checkpoint of as many ranks)."""
        self.version = int(self.groups["actor"].load(dict(state["actor"])).wait(self.timeout)[0])
        rngs = state.get("rollout_rng") or []
        if len(rngs) == self.n_rollout:

            def restore(rollout: Any) -> None:
                for r, rng in enumerate(rngs):
                    rollout.on(r).set_rng_state(rng).wait(self.timeout)

            self._between_serves(restore)

    def _between_serves(self, fn: Any) -> Any:
        """``fn(rollout group)`` while the rollout ranks' serve loops are ended (a rank takes one
        call at a time; between iterations nothing waits on them), then the loops again."""
        rollout = self.groups["rollout"]
        for _ in range(self.n_rollout):
            self.gen.put(STOP, "req", timeout=self.timeout)
        for r in range(self.n_rollout):
            self.serving[("rollout", r)].wait(self.timeout)
        try:
            return fn(rollout)
        finally:
            for r in range(self.n_rollout):
                self.serving[("rollout", r)] = rollout.on(r).serve()
                stale = self.watched.pop(("rollout", r), None)
                if stale is not None:
                    stale.cancel()

    def user_error(self, err: RlinfError) -> RlinfError:
        """A worker's failure as the user sees it: when its cause is rlinf's own one-line error (a
        reward that failed, a damaged model folder a worker found), that error itself, as the
        in-process run raises it, without the remote traceback of rlinf's internals (the
        scheduler's error keeps it, ``remote_traceback``); anything else as it is."""
        cause = getattr(err, "cause", None)
        return cause if isinstance(cause, RlinfError) and getattr(err, "remote_traceback", None) else err

    def close(self) -> None:
        """End the serve loops (a :data:`~rlinf_algos.lm.roles.STOP` per rollout rank, a
        :data:`~rlinf_algos.tools.placed.TOOL_STOP` per tool rank); the driver stops the worker
        groups."""
        if self.serving:
            from rlinf_algos.tools.placed import TOOL_STOP

            try:
                for role, _ in self.serving:
                    if role == "tool":
                        self.tools_ch.put(TOOL_STOP, "req", timeout=5.0)
                    else:
                        self.gen.put(STOP, "req", timeout=5.0)
                for call in self.serving.values():
                    call.wait(10.0)
            except Exception:  # a worker already failed: its error was reported
                pass
        for fut in self.watched.values():
            fut.cancel()

"""The iterations of a language-model run, as the one driver runs them (:class:`LMRun`; the run
and its directory: :mod:`rlinf_algos.lm.flow`).

**Asynchronous runs** (``rollout.max_staleness: k > 0``; the key embodied runs use too, so one
key bounds the staleness of both families; issue 51 named it ``algorithm.max_staleness``, the
public key of the embodied examples was kept). It is a property of the one loop, as in
:mod:`rlinf_algos.embodied.placed`: ``step`` starts iteration ``i`` (its generation with weights
of version ``i - 1 - k`` at least, the newest the rollout ranks have) and returns once its
episodes are handed on, its scoring and update left in flight (``inflight``); before starting
iteration ``i`` it finishes the updates of the iterations before ``i - k`` (their metrics rows,
in order). So the generation of iterations ``i + 1 .. i + k`` overlaps the update on ``i``, and
the learner (at version ``i - 1`` when it trains on ``i``) is at most ``k`` versions ahead of the
weights that generated its batch; a sequence more than ``k`` behind (a rollout rank that missed
versions) is dropped and counted (``stale_dropped``), the others trained with decoupled PPO
(:mod:`rlinf_algos.objectives.losses`). The columns ``stale_dropped``, ``staleness_mean``,
``staleness_max`` and ``behaviour_weight`` appear with ``k > 0`` only: ``k = 0`` runs the
synchronous iteration, its rows as before.

Stops, checkpoints and resumes: the driver drains what is in flight before any checkpoint and at
a stop (SIGINT, SIGTERM, the budget): every batch already generated is trained on and its row
written, so a checkpoint lands between learner steps with nothing in flight (the sampler's
position is the next batch to generate; no sample is dropped or replayed). A resumed run
restores the learner (weights, optimiser, version = its update count), the run's step, the
summed ``stale_dropped`` and the data position, and starts generating again from there.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlinf_algos.flow import FlowRun
from rlinf_algos.lm.config import LMRunConfig
from rlinf_core.errors import RlinfError
from rlinf_core.io import atomic_write_text

__all__ = ["PHASES", "LMRun", "learner_class", "merge_draws"]

PHASES = ("generate", "reward", "reference", "update", "sync")
"""The phases of an iteration whose seconds every metrics row holds (``<phase>_s``)."""


def learner_class(run: LMRunConfig) -> Any:
    """The learner class the ``algorithm`` section names (its ``actor`` class path)."""
    module, _, name = run.algorithm.actor.partition(":")
    return getattr(importlib.import_module(module), name)


async def maybe(value: Any) -> Any:
    """``value``, awaited when it is awaitable (a placed run's calls are coroutines)."""
    return await value if hasattr(value, "__await__") else value


class LMRun(FlowRun):
    """The iterations of a language-model run over its components ``comps`` (the placed run
    itself, :class:`~rlinf_algos.lm.placed.LMPlacedRun`): ``iterate``,
    ``evaluate``, ``policy``, ``publish_bytes``, ``state``, ``load_state``, ``task``, ``placement``
    (see the module docstring)."""

    unit = "iteration"
    jsonl = True
    log_interval = 1
    failure_files = "policy/"
    checkpoint_on_hard_stop = False  # a second Ctrl-C may land mid-update: stop at once

    def __init__(self, driver: Any, flow: Any) -> None:
        super().__init__(driver)
        self.flow = flow
        self.config_run = flow.run
        self.say = driver.say
        self.comps: Any = None
        self.stopped_early = False
        self.resumed_from: int | None = None
        self.totals: dict[str, float] = {}
        self.inflight: collections.deque[tuple[int, asyncio.Future[dict[str, Any]]]] = collections.deque()

    @property
    def staleness(self) -> int:
        """``rollout.max_staleness``: 0 is the synchronous loop."""
        return int(self.config_run.rollout.max_staleness)

    def columns(self) -> tuple[str, ...]:
        alg = self.config_run.algorithm
        stats = (
            *learner_class(self.config_run).stat_columns,
            *(("draws", "kept_groups") if alg.dynamic_sampling is not None else ()),
            *(("overlong_penalty",) if alg.overlong is not None else ()),
            *(
                ("stale_dropped", "staleness_mean", "staleness_max", "behaviour_weight")
                if self.staleness
                else ()
            ),
        )
        return (
            "step", "iteration", "wall_s", "reward_mean", "train_accuracy", "well_formed", "sequences",
            "generated_tokens", "response_length", "tokens_per_s", "publish_bytes", "reward_failures",
            *stats, *self.tool_columns(), *(f"{k}_s" for k in PHASES), "heldout_accuracy",
        )  # fmt: skip

    def tool_columns(self) -> tuple[str, ...]:
        """The columns of a tools run's episode figures (:func:`~rlinf_algos.lm.agents.episode_metrics`)."""
        tools = getattr(self.config_run, "tools", None)
        if tools is None:
            return ()
        sub = self.config_run.algorithm.subagents
        lead = (f"tool_calls/{sub.tool}",) if sub is not None else ()
        subagents = (
            "subagent_calls", "subagent_turns", "subagent_tool_calls",
            *(f"subagent_tool_calls/{n}" for n in (sub.tools or [e.name for e in tools.root])),
            "subagent_answer_rate", "subagent_tool_errors",
        ) if sub is not None else ()  # fmt: skip
        return (
            "turns", "answer_rate", "tool_calls", *(f"tool_calls/{e.name}" for e in tools.root), *lead,
            "tool_errors", "tool_timeouts", "tool_malformed", "tool_unknown", "tool_latency_mean_s", "success",
            *subagents,
        )  # fmt: skip

    # -- what the in-process and placed runs give ------------------------------------------------
    def components(self) -> Any:
        """The components (the run's policy folder is ``self.policy_run``)."""
        raise NotImplementedError

    @property
    def scheduler_name(self) -> str:
        return "local"

    def parameter_counts(self) -> tuple[int, int]:
        """``(trainable, total)`` parameters of the policy (in process: the components' model)."""
        from rlinf_algos.lm import hf

        return hf.parameter_counts(self.comps.policy())

    def write_policy(self, policy_dir: Path, adapter_dir: Path) -> None:
        """Write the final policy as a model folder at ``policy_dir`` (merged with LoRA, whose
        adapter goes to ``adapter_dir``), from the components' model in process."""
        from rlinf_algos.lm import hf

        hf.save_model_folder(self.comps.policy(), Path(self.run.model.path or ""), policy_dir, adapter_dir)

    # -- start and resume --------------------------------------------------------------------------
    def start(self, state: dict[str, Any] | None) -> None:
        import torch

        from rlinf_algos.lm.trainer import evaluate_components, prepare_models

        d = self.driver
        torch.set_num_threads(self.config_run.runner.torch_threads)
        self.t_start, self.cpu_start = time.perf_counter(), time.process_time()
        d.run_dir.mkdir(parents=True, exist_ok=True)
        self.run, self.policy_run, self.sft_stats = prepare_models(
            self.config_run, d.run_dir, self.say, state
        )
        if state is not None:
            self.say(f"resuming from {d.run_dir} (iteration {_iteration_of(state)})")
        self.comps = self.components()
        task = self.comps.task
        self.heldout = task.heldout()
        self.sampler = task.sampler(self.run.runner.seed + 1000)
        trainable, total = self.parameter_counts()
        self.params = (trainable, total)
        self.say(
            f"task {task.mode}: {total:,} parameters ({trainable:,} trainable), "
            f"max {task.max_new_tokens()} new tokens per turn, held-out set of {len(self.heldout)}"
        )
        self.data_report = task.data_report() if hasattr(task, "data_report") else None
        for split, r in (self.data_report or {}).items():
            if r["filtered"]:
                why = "; ".join(f"{n} {reason}" for reason, n in r["filter_reasons"].items())
                self.say(f"data {split}: left out {r['filtered']} of {r['rows']} prompts ({why})")
        self.eval_s = self.grpo0 = 0.0
        if state is None:
            t = time.perf_counter()
            before = d.run_async(
                evaluate_components(self.comps, self.heldout, self.run.runner.eval_temperature)
            )
            self.eval_s = time.perf_counter() - t
            _write_json(d.run_dir / "eval_before.json", before)
            self.before = {k: before[k] for k in ("accuracy", "score", "well_formed")}
            self.evals: list[dict[str, Any]] = [{"iteration": 0, "accuracy": self.before["accuracy"]}]
            self._said_before()
        self.t_grpo = time.perf_counter()

    def _said_before(self) -> None:
        b = self.before
        self.say(
            f"held-out accuracy after the warm start: {b['accuracy']:.3f} (well-formed {b['well_formed']:.3f})"
        )

    def load(self, state: dict[str, Any]) -> None:
        from rlinf_algos.runtime.stop import set_rng_state

        loop = state["loop"]
        self.comps.load_state(state)
        self.sampler.load_state(state["sampler"])
        self.before, self.evals = dict(loop["before"]), list(loop["evals"])
        self.eval_s, self.grpo0 = float(loop["eval_s"]), float(loop["grpo_s"])
        self.resumed_from = int(_iteration_of(state))
        rows = loop.get("rows")
        if rows is not None:  # a checkpoint of an earlier version: its rows, and its run counters
            self.totals = _totals(rows)
            self.driver.rec.restore_rows(rows)
        else:
            self.totals = dict(loop.get("totals", {}))
        self._said_before()
        set_rng_state(state["rng"])  # last: setting up consumed the global streams

    def legacy_run_counters(self, state: dict[str, Any]) -> dict[str, Any]:
        """The run counters of a checkpoint written before the driver kept them (its ``loop`` and
        ``faults`` records)."""
        loop, faults = state["loop"], state.get("faults") or {}
        it = int(loop["iteration"])
        return {"steps": it, "iteration": it, "wall_s": float(loop["wall_s"]), **faults}

    # -- the iterations ----------------------------------------------------------------------------
    def done(self) -> bool:
        d, rcfg = self.driver, self.run.runner
        if d.steps + len(self.inflight) >= self.run.algorithm.iterations:  # started, in flight or not
            return True
        if (
            rcfg.time_limit_s is not None
            and self.grpo0 + time.perf_counter() - self.t_grpo > rcfg.time_limit_s
        ):
            if not self.stopped_early:
                self.stopped_early = True
                self.say(
                    f"runner.time_limit_s={rcfg.time_limit_s} reached; stopping after {d.steps} iterations"
                )
            return True
        return False

    async def step(self) -> None:
        if self.staleness:
            await self._step_async()
            return
        d, alg = self.driver, self.run.algorithm
        it = d.steps + 1
        problems = self.sampler.sample(alg.prompts_per_iter)
        res = await maybe(self.comps.iterate(problems, alg.group_size))
        draws = 0
        while res["stats"].get("deferred"):  # DAPO's dynamic sampling: the learner wants more groups
            draws += 1
            limit = alg.dynamic_sampling.max_draws if alg.dynamic_sampling is not None else 0
            if draws > limit:
                raise RlinfError(
                    f"the learner deferred its update {draws} times (algorithm.dynamic_sampling.max_draws {limit})"
                )
            more = await maybe(self.comps.iterate(self.sampler.sample(alg.prompts_per_iter), alg.group_size))
            res = merge_draws(res, more)
        await self._record(it, res)

    async def _step_async(self) -> None:
        """Start the next iteration of an asynchronous run (see the module docstring)."""
        d, alg, k = self.driver, self.run.algorithm, self.staleness
        it = d.steps + len(self.inflight) + 1
        while self.inflight and self.inflight[0][0] < it - k:
            await self._finish_oldest()
        problems = self.sampler.sample(alg.prompts_per_iter)
        generated, result = self.comps.start_iteration(it, problems, alg.group_size, max(0, it - 1 - k))
        self.inflight.append((it, result))
        await asyncio.wait({generated, result}, return_when=asyncio.FIRST_COMPLETED)
        if result.done():
            result.result()  # a failure: raised here, the iteration still in ``inflight``

    async def _finish_oldest(self) -> None:
        it, result = self.inflight[0]
        res = await result
        self.inflight.popleft()
        await self._record(it, res)

    async def drain(self) -> None:
        """Finish every iteration in flight (an asynchronous run's), rows in order."""
        while self.inflight:
            await self._finish_oldest()

    async def _record(self, it: int, res: dict[str, Any]) -> None:
        """Iteration ``it``'s metrics row (and the held-out evaluation when due) of its outcome."""
        import numpy as np

        from rlinf_algos.lm.trainer import evaluate_components

        d, alg, rcfg = self.driver, self.run.algorithm, self.run.runner
        phase, st = res["phase"], res["stats"]
        gen_tokens = res["generated_tokens"]
        row: dict[str, Any] = {
            "iteration": it,
            "reward_mean": float(np.mean(res["rewards"])),
            "train_accuracy": float(np.mean(res["correct"])),
            "well_formed": float(np.mean(res["well_formed"])),
            "sequences": res["sequences"],
            "generated_tokens": gen_tokens,
            "response_length": gen_tokens / max(len(res["rewards"]), 1),
            "tokens_per_s": gen_tokens / max(phase["generate"], 1e-9),
            "publish_bytes": self.comps.publish_bytes(),
            **({"reward_failures": res["reward_failures"]} if "reward_failures" in res else {}),
            **{k: round(v, 6) for k, v in st.items()},
            **res.get("agent_metrics", {}),
            **{f"{k}_s": round(phase[k], 4) for k in PHASES},
        }
        if rcfg.eval_interval and it % rcfg.eval_interval == 0 and it != alg.iterations:
            acc = (await evaluate_components(self.comps, self.heldout, rcfg.eval_temperature))["accuracy"]
            row["heldout_accuracy"] = acc
            self.evals.append({"iteration": it, "accuracy": acc})
        d.steps = d.iteration = it
        t = self.totals
        t["generated_tokens"] = t.get("generated_tokens", 0.0) + gen_tokens
        t["generate_s"] = t.get("generate_s", 0.0) + row["generate_s"]
        for k in PHASES:
            t[f"{k}_s_sum"] = t.get(f"{k}_s_sum", 0.0) + row[f"{k}_s"]
        t["reward_failures_max"] = max(
            t.get("reward_failures_max", 0.0), float(row.get("reward_failures", 0))
        )
        if self.staleness:
            t["stale_dropped"] = t.get("stale_dropped", 0.0) + float(row.get("stale_dropped", 0.0))
        out = d.row(it, row, force=True)
        if it % rcfg.log_interval == 0:
            extra = f"  held-out {row['heldout_accuracy']:.3f}" if "heldout_accuracy" in row else ""
            wall = out["wall_s"] if out else 0.0
            self.say(
                f"iter {it:4d}  reward {row['reward_mean']:.3f}  train acc {row['train_accuracy']:.3f}  "
                f"kl {st['kl']:.4f}  gen {phase['generate']:.2f}s ({row['tokens_per_s']:.0f} tok/s)  "
                f"update {phase['update']:.2f}s  [{wall:.0f}s]{extra}"
            )

    def components_state(self) -> dict[str, Any]:
        """The components' part of a checkpoint."""
        return self.comps.state()

    def grpo_seconds(self) -> float:
        return self.grpo0 + time.perf_counter() - self.t_grpo

    def state(self) -> dict[str, Any]:
        from rlinf_algos.runtime.stop import rng_state

        return {
            **self.components_state(),
            "sampler": self.sampler.state(),
            "loop": {
                "iteration": self.driver.steps,
                "evals": self.evals,
                "before": self.before,
                "sft_stats": self.sft_stats,
                "eval_s": self.eval_s,
                "wall_s": self.driver.rec.wall_s,
                "grpo_s": self.grpo_seconds(),
                "totals": dict(self.totals),
            },
            "rng": rng_state(),
        }

    # -- the end ---------------------------------------------------------------------------------------
    def finish(self, interrupted: bool, error: str | None) -> dict[str, Any]:
        from rlinf_algos.lm.trainer import ascii_curve, evaluate_components, plot_accuracy

        d, alg, rcfg = self.driver, self.run.algorithm, self.run.runner
        if self.comps is None:
            raise RlinfError("the run ended before its components started")
        grpo_s = self.grpo_seconds()
        after = None
        if not interrupted and error is None:
            after = d.run_async(evaluate_components(self.comps, self.heldout, rcfg.eval_temperature))
            _write_json(d.run_dir / "eval_after.json", after)
            self.evals.append({"iteration": d.steps, "accuracy": after["accuracy"]})
        self.write_policy(d.run_dir / "policy", d.run_dir / "adapter")
        total_s = d.rec.wall_s
        trainable, total = self.params
        before, t, n = self.before, self.totals, max(d.steps, 1)
        summary = {
            "algorithm": alg.name,
            "mode": self.comps.task.mode,
            "scheduler": self.scheduler_name,
            "parameters": total,
            "trainable_parameters": trainable,
            "lora": self.run.model.lora is not None,
            "model_path": self.run.model.path,
            "publish_bytes": self.comps.publish_bytes(),
            "accuracy_before": before["accuracy"],
            "accuracy_after": after["accuracy"] if after else None,
            "accuracy_gain_pp": 100.0 * (after["accuracy"] - before["accuracy"]) if after else None,
            "val_score_before": before["score"],
            "val_score_after": after["score"] if after else None,
            "well_formed_before": before["well_formed"],
            "well_formed_after": after["well_formed"] if after else None,
            "eval_size": len(self.heldout),
            "eval_temperature": rcfg.eval_temperature,
            **({"data": self.data_report} if self.data_report is not None else {}),
            "train_temperature": alg.temperature,
            "iterations": d.steps,
            "stopped_early": self.stopped_early,
            "interrupted": interrupted,
            "resumed_from_iteration": self.resumed_from,
            "checkpoint": str(d.last_checkpoint) if d.last_checkpoint else None,
            "sft_steps": self.sft_stats["steps"],
            "sft_loss": self.sft_stats["loss"],
            "sft_val_exact_match": self.sft_stats["exact_match"],
            "sft_s": round(self.sft_stats["seconds"], 2),
            "eval_s": round(self.eval_s, 2),
            "grpo_s": round(grpo_s, 2),
            "total_s": round(total_s, 2),
            "wall_s": round(total_s, 2),
            "cpu_s": round(time.process_time() - self.cpu_start, 2),
            "load_average": _load_average(),
            "tokens_per_s": t.get("generated_tokens", 0.0) / max(t.get("generate_s", 0.0), 1e-9),
            "phase_s_mean": {k: t.get(f"{k}_s_sum", 0.0) / n for k in PHASES},
            "placement": self.comps.placement,
            "learner_world_size": int(getattr(self.comps, "learner_world_size", 1)),
            "evals": self.evals,
            "reward_failures": int(t.get("reward_failures_max", 0)),
            **(
                {"max_staleness": self.staleness, "stale_dropped": int(t.get("stale_dropped", 0))}
                if self.staleness
                else {}
            ),
        }
        if after is not None:
            plot = plot_accuracy(d.run_dir, summary, _rows(d.run_dir))
            self.say(
                "train accuracy per iteration:\n"
                + ascii_curve([r["train_accuracy"] for r in _rows(d.run_dir)])
            )
            self.say(
                f"held-out exact-match accuracy: before {before['accuracy']:.3f} -> after {after['accuracy']:.3f} "
                f"({summary['accuracy_gain_pp']:+.1f} pp) in {total_s:.0f}s ({d.steps} iterations)"
                + (f"; plot: {plot}" if plot else "")
            )
        return summary


def merge_draws(first: dict[str, Any], then: dict[str, Any]) -> dict[str, Any]:
    """One iteration's result of two draws (dynamic sampling): the episodes' outcomes side by
    side, counts and phase seconds added, the later draw's update statistics (the update ran
    on it) and episode figures."""
    import numpy as np

    out = dict(then)
    for k in ("rewards", "correct", "well_formed"):
        out[k] = np.concatenate([np.asarray(first[k]), np.asarray(then[k])])
    for k in ("sequences", "generated_tokens", "reward_failures"):
        if k in first or k in then:
            out[k] = first.get(k, 0) + then.get(k, 0)
    out["phase"] = {k: first["phase"].get(k, 0.0) + then["phase"].get(k, 0.0) for k in then["phase"]}
    return out


def _iteration_of(state: Mapping[str, Any]) -> int:
    run = state.get("run")
    return int(run["steps"]) if run else int(state["loop"]["iteration"])


def _totals(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The running sums the summary reads, of an earlier version's checkpointed rows."""
    return {
        "generated_tokens": float(sum(r["generated_tokens"] for r in rows)),
        "generate_s": float(sum(r["generate_s"] for r in rows)),
        **{f"{k}_s_sum": float(sum(r[f"{k}_s"] for r in rows)) for k in PHASES},
        "reward_failures_max": float(max((int(r.get("reward_failures", 0)) for r in rows), default=0)),
    }


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` (what the accuracy plot draws)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2))


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on this platform
        return None

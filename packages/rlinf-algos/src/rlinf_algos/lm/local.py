"""A language-model flow in one process (``runner.scheduler: local``): the rollout engine, the
verifier, the frozen reference and the learner (and the agent) as objects in the driver's
process, called one after the other. Not an imitation of the workers: no channels, no weight
broadcast, the reference shares the learner's base weights under LoRA; the placed run
(:mod:`rlinf_algos.lm.placed`) is the same flow with each of them in a worker.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.agents import EpisodeBatch, episode_metrics, make_agent
from rlinf_algos.lm.config import LMRunConfig
from rlinf_algos.lm.engines import make_rollout
from rlinf_algos.lm.folder import context_length
from rlinf_algos.lm.learner import ReferenceModel, make_learner, pack_batch
from rlinf_algos.lm.reward import Verifier
from rlinf_algos.lm.run import LMRun
from rlinf_algos.lm.tokens import LMTokenizer

__all__ = ["LMLocalRun", "LocalComponents"]


class LocalComponents:
    """The rollout, reward, reference and actor components (and the agent) in this process:
    what ``runner.scheduler: local`` runs. :class:`~rlinf_algos.lm.placed.LMPlacedRun` is the same
    interface over placed workers.

    Every component computes on ``runner.device`` as :func:`~rlinf_algos.devices.resolve_device`
    picks it here, the one device ``--dry-run`` and ``summary.json`` report for a local run
    (:func:`~rlinf_algos.devices.local_devices`); :meth:`devices` says where each one's
    parameters actually are.

    Args:
        run: the validated sections (``model.path`` set: see :func:`~rlinf_algos.lm.trainer.resolve_model`).
        tok: the tokenizer.
        model: the warm-started policy (the actor trains it in place, moved to the run's device).
    """

    def __init__(self, run: LMRunConfig, tok: LMTokenizer, model: Any, task: Any) -> None:
        from rlinf_algos.devices import resolve_device
        from rlinf_algos.parallel import DataParallel

        alg, rcfg = run.algorithm, run.runner
        self.device = resolve_device(str(rcfg.device))
        model = model.to(self.device)
        self.tok = tok
        self.task = task
        self.agent = make_agent(
            task, tok, task.max_new_tokens(), run.task.max_calls, context_length(run.model)
        )
        self.rollout = make_rollout(run, seed=rcfg.seed, pad_id=tok.pad_id, device=self.device)
        self.reward = Verifier(task)
        self.actor = make_learner(model, run, dp=DataParallel(device=self.device))
        weights, version = self.actor.get_weights()
        self.rollout.set_weights(weights, version)
        self.reference = None
        if alg.kl_coef > 0:
            # with LoRA the reference is the actor's own base weights (adapter disabled)
            self.reference = (
                ReferenceModel(model=model, temperature=alg.temperature)
                if hf.is_lora(model)
                else ReferenceModel(run.model, weights, temperature=alg.temperature, device=self.device)
            )
        self.placement = {"everything": "in the rlinf process (runner.scheduler: local)"}

    def episodes(
        self, problems: Sequence[Any], group_size: int, temperature: float | None = None
    ) -> EpisodeBatch:
        """``group_size`` episodes of every problem, sampled by the rollout worker."""

        def gen(prompts: list[list[int]], n: int, stop: Sequence[int]) -> list[list[int]]:
            return self.rollout.generate(prompts, n, stop, temperature=temperature)

        return self.agent.run(problems, group_size, gen)

    def iterate(self, problems: Sequence[Any], group_size: int) -> dict[str, Any]:
        """One GRPO iteration on ``problems``: generate, reward, reference, update, sync.
        Returns ``rewards``/``correct``/``well_formed`` (per episode), ``sequences``,
        ``generated_tokens``, the actor's ``stats`` and the seconds of each ``phase``."""
        phase: dict[str, float] = {}
        tokens0 = self.rollout.tokens
        t = time.perf_counter()
        eps = self.episodes(problems, group_size)
        phase["generate"] = time.perf_counter() - t
        t = time.perf_counter()
        r = self.reward.compute({"response_ids": eps.final_responses, "answers": eps.answers})
        phase["reward"] = time.perf_counter() - t
        batch = pack_batch(eps.sequences, eps.loss_masks, self.tok.pad_id)
        batch["episode_index"] = torch.tensor(eps.episode_index, dtype=torch.long, device="cpu")
        batch["rewards"] = torch.as_tensor(r["rewards"], dtype=torch.float32, device="cpu")
        t = time.perf_counter()
        if self.reference is not None:
            batch.update(self.reference.compute_log_probs(batch))
        phase["reference"] = time.perf_counter() - t
        t = time.perf_counter()
        stats = self.actor.update(batch)
        phase["update"] = time.perf_counter() - t
        t = time.perf_counter()
        weights, version = self.actor.get_weights()
        self.rollout.set_weights(weights, version)
        phase["sync"] = time.perf_counter() - t
        return {
            "rewards": r["rewards"],
            "correct": r["correct"],
            "well_formed": r["well_formed"],
            "sequences": len(eps.sequences),
            "generated_tokens": self.rollout.tokens - tokens0,
            "stats": stats,
            "phase": phase,
            **({"reward_failures": int(r["failures"])} if "failures" in r else {}),
            "agent_metrics": episode_metrics(eps, r["correct"]),  # tool-calling episodes' figures
        }

    def evaluate(self, problems: Sequence[Any], temperature: float = 0.0) -> dict[str, list[Any]]:
        """One episode per problem at ``temperature``: per problem ``correct``, ``well_formed``
        and ``rewards``."""
        out: dict[str, list[Any]] = {"correct": [], "well_formed": [], "rewards": []}
        for i in range(0, len(problems), 256):
            eps = self.episodes(problems[i : i + 256], 1, temperature)
            r = self.reward.compute({"response_ids": eps.final_responses, "answers": eps.answers})
            out["correct"] += [bool(c) for c in r["correct"]]
            out["well_formed"] += [bool(w) for w in r["well_formed"]]
            out["rewards"] += [float(x) for x in r["rewards"]]
        return out

    def policy(self) -> Any:
        return self.actor.model

    def devices(self) -> dict[str, list[str]]:
        """Where each component's parameters are (``{"actor": ["cuda:0"], "rollout": [...],
        "reference": [...]}``, and ``critic`` for ppo_lm; a component without parameters is left
        out): what a test checks against the reported device."""
        out: dict[str, list[str]] = {}
        found = {
            "actor": self.actor.model,
            "critic": getattr(self.actor, "critic", None),  # ppo_lm's value model
            "rollout": getattr(self.rollout, "model", None),
            "reference": getattr(self.reference, "model", None),
        }
        for role, model in found.items():
            params = list(model.parameters()) if hasattr(model, "parameters") else []
            if params:
                out[role] = sorted({str(p.device) for p in params})
        return out

    def publish_bytes(self) -> int:
        return self.actor.publish_bytes

    def state(self) -> dict[str, Any]:
        """The components' part of a checkpoint: the actor's state and the rollout engine's
        sampling generator (an engine without a torch ``generator`` keeps none)."""
        out: dict[str, Any] = {"actor": self.actor.state_dict()}
        gen = getattr(self.rollout, "generator", None)
        if isinstance(gen, torch.Generator):
            out["rollout"] = {"generator": gen.get_state()}
        return out

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state`: the actor's, then its weights to the rollout engine."""
        self.actor.load_state_dict(dict(state["actor"]))
        weights, version = self.actor.get_weights()
        self.rollout.set_weights(weights, version)
        gen = getattr(self.rollout, "generator", None)
        if isinstance(gen, torch.Generator) and "rollout" in state:
            gen.set_state(state["rollout"]["generator"])

    def close(self) -> None:
        pass


class LMLocalRun(LMRun):
    """The language-model flow with every component in the driver's process."""

    def components(self) -> LocalComponents:
        from rlinf_algos.lm.tasks import make_task
        from rlinf_algos.lm.trainer import policy_to_train

        run = self.policy_run
        model, tok = policy_to_train(run)
        task = make_task(run, tok, reward_log=self.driver.run_dir / "logs" / "reward-local.log")
        return LocalComponents(run, tok, model, task)

"""PPO's flow: collect ``rollout_steps`` steps of every env, learn on the batch, publish.

On workers the rollout of iteration ``k + 1`` overlaps the update on ``k`` (``max_staleness``);
in one process the same collection loop (:func:`~rlinf_algos.ppo.rollout.collect_ppo`) runs over
the local vector env and the same learner side learns on it, one after the other.
"""

from __future__ import annotations

import math
import time
from typing import Any, ClassVar

import torch

from rlinf_algos.channels import traj_key
from rlinf_algos.devices import resolve_device
from rlinf_algos.flow import IterationPlan, LearnerContext, LocalSession, Recipe, await_call
from rlinf_algos.models import build_policy
from rlinf_algos.policy_specs import gaussian_policy_spec
from rlinf_algos.ports import LocalPort
from rlinf_algos.ppo.learner import PPOLearnerSide
from rlinf_algos.ppo.rollout import collect_ppo

__all__ = ["PPORecipe"]


class _PPOLocal(LocalSession):
    def __init__(self, recipe: PPORecipe, stepper: Any, spec: dict[str, Any], sections: Any) -> None:
        cfg, runner = recipe.cfg, sections.runner
        self.cfg, self.stepper = cfg, stepper
        device = resolve_device(runner.device)  # runner.scheduler: local computes where it says too
        self.model = build_policy(spec).to(device)
        ctx = LearnerContext(
            None, 1, runner.worker_timeout, publish=lambda: None, seed=runner.seed, device=str(device)
        )
        self.side = PPOLearnerSide(self.model, cfg, ctx, stepper.num_envs)
        self.port = LocalPort(stepper)
        self.generator = torch.Generator().manual_seed(runner.seed)
        self.batch = cfg.rollout_steps * stepper.num_envs
        self.iterations = max(1, math.ceil(runner.total_steps / self.batch))
        self.last: dict[str, float] = {}

    def step(self) -> None:
        it = self.stepper.steps // self.batch
        t0 = time.perf_counter()
        traj = collect_ppo(self.port, self.model, self.cfg.rollout_steps, self.generator)
        traj["version"] = self.side.version
        t1 = time.perf_counter()
        self.last = self.side.learn([traj], 1.0 - it / self.iterations)
        self.last["rollout_s"] = t1 - t0
        self.last["update_s"] = time.perf_counter() - t1

    def metrics(self) -> dict[str, float]:
        return self.last

    def state(self) -> dict[str, Any]:
        return {**self.side.state(), "rollout_rng": self.generator.get_state()}

    def load(self, state: dict[str, Any]) -> None:
        self.side.load(state)
        if "rollout_rng" in state:
            self.generator.set_state(state["rollout_rng"])

    def policy_state_dict(self) -> dict[str, Any]:
        return self.side.final_state_dict()


class PPORecipe(Recipe):
    """Proximal policy optimisation's flow (see the module docstring)."""

    name: ClassVar[str] = "ppo"
    learner_columns: ClassVar[tuple[str, ...]] = (
        "policy_loss",
        "value_loss",
        "entropy",
        "clip_fraction",
        "grad_norm",
        "approx_kl",
        "epochs",
        "explained_variance",
        "lr",
        "rollout_s",
        "update_s",
    )
    whole_batch: ClassVar[bool] = True

    def metric_columns(self, model_cfg: Any) -> tuple[str, ...]:
        """``learner_columns``, and ``aux_loss`` for a model with an auxiliary loss."""
        return self.learner_columns + (("aux_loss",) if getattr(model_cfg, "predict_privileged", 0) else ())

    def policy_spec(self, model_cfg: Any, spaces: Any) -> dict[str, Any]:
        return gaussian_policy_spec(model_cfg, spaces, self.cfg.normalize_obs)

    def local_session(self, stepper: Any, spec: dict[str, Any], sections: Any) -> LocalSession:
        return _PPOLocal(self, stepper, spec, sections)

    def iteration_steps(self, rollout_cfg: Any, max_episode_steps: int | None) -> int:
        return self.cfg.rollout_steps

    def staleness(self, rollout_cfg: Any) -> int:
        return rollout_cfg.max_staleness

    def plan(self, run: Any, k: int) -> IterationPlan:
        actor, gen = run.groups["actor"], run.gen
        frac = 1.0 - k / run.iterations
        return IterationPlan(
            env_method="run",
            env_args=(run.T,),
            rollout_kwargs={},
            learn=lambda: await_call(actor.train(gen, lr_frac=frac)),
            abort_keys=[traj_key(gen, r) for r in range(run.N)],
        )

    def collect(self, worker: Any, gen: int, steps: int, send: bool = True, **kwargs: Any) -> dict[str, Any]:
        traj = collect_ppo(worker, worker.model, steps, worker.generator)
        traj["version"] = worker.version
        if send:
            worker.traj_ch.put(traj, traj_key(gen, worker.rank), timeout=worker.timeout)
        return {"aborted": False, "version": worker.version, "steps": steps * worker.stages * worker.slots}

    def learner(self, spec: dict[str, Any], model_cfg: Any, ctx: LearnerContext) -> PPOLearnerSide:
        model = ctx.dp.wrap(build_policy(spec), methods=("evaluate", "value"))
        return PPOLearnerSide(model, self.cfg, ctx, spec["num_slots"])

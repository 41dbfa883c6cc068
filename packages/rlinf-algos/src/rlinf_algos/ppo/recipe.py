"""PPO's flow: collect ``rollout_steps`` steps of every env, learn on the batch, publish.

On workers the rollout of iteration ``k + 1`` overlaps the update on ``k`` (``max_staleness``);
in one process the same collection loop (:func:`~rlinf_algos.ppo.rollout.collect_ppo`) runs over
the local vector env and the same learner side learns on it, one after the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from rlinf_algos.channels import traj_key
from rlinf_algos.demos import load_demos, steps_until_solved
from rlinf_algos.embodied.recipe import IterationPlan, LearnerContext, Recipe
from rlinf_algos.flow import await_call
from rlinf_algos.models import build_policy
from rlinf_algos.policy_specs import gaussian_policy_spec
from rlinf_algos.ppo.learner import PPOLearnerSide
from rlinf_algos.ppo.rollout import collect_ppo
from rlinf_algos.warm_starts import obs_stats_frozen
from rlinf_core.errors import ConfigError

__all__ = ["PPORecipe"]


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
        aux = ("aux_loss",) if getattr(model_cfg, "predict_privileged", 0) else ()
        bc = ("bc_loss", "bc_weight") if self.cfg.bc_coef > 0 else ()
        anchor = ("anchor_loss",) if self.cfg.anchor_coef > 0 else ()
        return self.learner_columns + aux + bc + anchor

    def policy_spec(self, model_cfg: Any, spaces: Any) -> dict[str, Any]:
        bc_demos(self.cfg, model_cfg, load=False)  # a bc_coef without demonstrations: one line, now
        return gaussian_policy_spec(model_cfg, spaces, self.cfg.normalize_obs)

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
        demos = bc_demos(self.cfg, model_cfg)
        mean = demos is not None or self.cfg.anchor_coef > 0
        methods = ("evaluate", "value", "action_mean") if mean else ("evaluate", "value")
        model = ctx.dp.wrap(build_policy(spec), methods=methods)
        return PPOLearnerSide(
            model, self.cfg, ctx, spec["num_slots"], obs_stats_frozen(model_cfg or {}), demos=demos
        )


def bc_demos(cfg: Any, model_cfg: Any, load: bool = True) -> tuple[Any, ...] | None:
    """``(states, actions, weights)`` of ``model.bc.demos`` when ``algorithm.bc_coef`` asks for a
    behaviour-cloning term (``None`` when it does not; ``load=False`` only checks that there are
    demonstrations to read). ``weights``: each step's chance to be drawn with
    ``algorithm.bc_sampling: per_task`` (one over its task's step count), else ``None``. A
    ``bc_coef`` without ``model.bc`` is a :class:`~rlinf_core.errors.ConfigError` at
    ``algorithm.bc_coef``."""
    if cfg.bc_coef <= 0:
        return None
    bc = model_cfg.get("bc") if isinstance(model_cfg, dict) else getattr(model_cfg, "bc", None)
    demos = (bc.get("demos") if isinstance(bc, dict) else getattr(bc, "demos", None)) if bc else None
    if not demos:
        raise ConfigError(
            f"algorithm.bc_coef {cfg.bc_coef} clones demonstrations during RL, but model.bc.demos names "
            "none (give model.bc.demos, a `rlinf demos record` data set, or set algorithm.bc_coef: 0)",
            path="algorithm.bc_coef",
        )
    if not load:
        return None
    data = load_demos(Path(demos))
    if cfg.bc_steps == "until_solved":
        data = steps_until_solved(data, demos, "algorithm.bc_steps")
    states, actions, tasks = data["state"], data["action"], np.asarray(data["task"], dtype=object).astype(str)
    weights = None
    if cfg.bc_sampling == "per_task":
        _, task_of_step, counts = np.unique(tasks, return_inverse=True, return_counts=True)
        weights = (1.0 / counts[task_of_step]).astype(np.float64)
    return states, actions, weights

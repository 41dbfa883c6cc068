"""GRPO's flow on embodied tasks: whole episodes in groups, scored by a reward worker, a frozen
reference, then a clipped update.

On workers, every iteration's groups start from seeds of their own (``seed + k * num_groups``):
the env workers reset each group's copies alike and step until every episode ended
(``EnvWorker.run_episodes``); the rollout workers record the episodes; the reward worker turns
the returns into group advantages; the reference worker adds the frozen policy's log-probabilities
(``kl_coef > 0``); the actor updates on both. With ``kl_coef > 0`` the batch goes rollout ->
reference -> actor; at ``kl_coef: 0`` (the default) no reference is started and the sequences go
straight from the rollout workers to the actor. The channel keys are the iteration's own
(``"<generation>.<iteration>"``): an abort of iteration ``k`` can never overtake iteration
``k - 1``'s data. In one process the collector resets and steps the vector env itself and the
learner holds the reference.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from rlinf_algos.channels import grpo_keys
from rlinf_algos.embodied.recipe import IterationPlan, LearnerContext, Recipe
from rlinf_algos.flow import await_call
from rlinf_algos.grpo.learner import GRPOLearnerSide
from rlinf_algos.grpo.rollout import collect_grpo
from rlinf_algos.models import build_policy
from rlinf_algos.policy_specs import gaussian_policy_spec
from rlinf_algos.runtime.recovery import worker_died
from rlinf_algos.warm_starts import obs_stats_frozen
from rlinf_core.errors import ConfigError

__all__ = ["GRPORecipe"]


class GRPORecipe(Recipe):
    """Group relative policy optimisation's flow (see the module docstring)."""

    name: ClassVar[str] = "grpo"
    learner_columns: ClassVar[tuple[str, ...]] = (
        "policy_loss",
        "kl_ref",
        "clip_fraction",
        "grad_norm",
        "group_return_mean",
    )
    worker_columns: ClassVar[tuple[str, ...]] = (
        "update_s",
        "wait_s",
        "policy_lag",
        "group_return_std",
        "reference_s",
    )
    max_steps: int = 0

    @property
    def uses_reference(self) -> bool:
        """Whether the KL term needs the frozen reference (``algorithm.kl_coef > 0``): without it
        no reference worker is started and no batch passes through one."""
        return float(self.cfg.kl_coef) > 0

    @property  # type: ignore[override]
    def extra_components(self) -> tuple[str, ...]:
        return ("reward", "reference") if self.uses_reference else ("reward",)

    @property  # type: ignore[override]
    def policy_components(self) -> tuple[str, ...]:
        return ("reference",) if self.uses_reference else ()  # it freezes version 0

    @property  # type: ignore[override]
    def stateful_components(self) -> tuple[str, ...]:
        return ("reference",) if self.uses_reference else ()

    def policy_spec(self, model_cfg: Any, spaces: Any) -> dict[str, Any]:
        return gaussian_policy_spec(model_cfg, spaces, True)

    def check_spaces(self, env_cfg: Any, spaces: Any) -> None:
        need = self.cfg.group_size * self.cfg.num_groups
        if env_cfg.num_envs != need:
            raise ConfigError(
                f"GRPO runs one group per {self.cfg.group_size} envs and {self.cfg.num_groups} groups per "
                f"iteration, so it needs num_envs = algorithm.group_size * algorithm.num_groups = {need}, "
                f"got {env_cfg.num_envs}",
                path="env.num_envs",
            )
        if (spaces.get("obs_space") or {}).get("kind") == "dict":
            raise ConfigError(
                f"{env_cfg.id!r} gives dict observations (images, state, instruction); embodied grpo "
                "takes vector observations: train this env with ppo or sac (model.type vla)",
                path="algorithm.name",
            )
        if not spaces.get("max_episode_steps"):
            raise ConfigError(
                f"{env_cfg.id!r} has no time limit; GRPO scores whole episodes: set env.max_episode_steps",
                path="env.max_episode_steps",
            )
        self.max_steps = int(spaces["max_episode_steps"])

    def iteration_steps(self, rollout_cfg: Any, max_episode_steps: int | None) -> int:
        return int(max_episode_steps or 0)

    def launch_extra(self, run: Any) -> dict[str, dict[str, Any]]:
        common = {
            "channels": {"traj": run.traj_ch},
            "algorithm": self.cfg.model_dump(),
            "rollout_world": run.N,
            "timeout": run.timeout,
        }
        launches = {"reward": {**common, "threads": 0}}
        if self.uses_reference:
            launches["reference"] = {
                **common, "weights": run.weights, "threads": 1, "device": run.runner_cfg.device,
            }  # fmt: skip
        return launches

    def body(self, role: str, host: Any) -> Any:
        from rlinf_algos.grpo.roles import EpisodeScorer, FrozenPolicy

        if role == "reward":
            return EpisodeScorer(host)
        if role == "reference":
            return FrozenPolicy(host)
        return super().body(role, host)

    def plan(self, run: Any, k: int) -> IterationPlan:
        batch = f"{run.gen}.{k}"
        base = run.runner_cfg.seed + k * self.cfg.num_groups  # the groups of k start from their own seeds
        groups = run.groups

        async def learn() -> list[dict[str, Any]]:
            """The reward worker scores the episodes, the reference worker (``kl_coef > 0``) adds
            its log-probabilities, the actor updates on both (concurrently; they hand the data on
            over the channel). Returns ``[actor metrics]`` (aborted if any of them was). When the
            reward's or the reference's process dies, the batch's keys are ended (the others
            return) and the metrics carry ``lost`` (``{(role, rank): error}``: the placed run
            restarts them); the actor's death, or any other error, is raised."""
            roles = ["reward", "actor"]
            calls = [groups["reward"].on(0).score(batch), groups["actor"].train(batch)]
            if self.uses_reference:
                roles.append("reference")
                calls.append(groups["reference"].on(0).log_probs(batch))
            futs = [asyncio.ensure_future(await_call(c)) for c in calls]
            _, pending = await asyncio.wait(futs, return_when=asyncio.FIRST_EXCEPTION)
            if pending:  # one failed: end the batch on the others, which then return
                await asyncio.get_running_loop().run_in_executor(None, run.end_keys, keys)
                await asyncio.wait(pending)
            errors = {role: f.exception() for role, f in zip(roles, futs, strict=True) if f.exception()}
            if "actor" in errors or any(not worker_died(e) for e in errors.values()):
                raise errors.get("actor") or next(e for e in errors.values() if not worker_died(e))
            if errors:
                res = futs[1].result()[0]
                lost = {(role, int(getattr(e, "rank", 0))): e for role, e in errors.items()}
                return [{**res, "lost": lost} if not res.get("aborted") else {"aborted": True, "lost": lost}]
            reward, metrics, *ref = [f.result()[0] for f in futs]
            if any(x.get("aborted") for x in (reward, metrics, *ref)):
                why = next((x["error"] for x in (reward, metrics, *ref) if x.get("error")), "aborted")
                return [{"aborted": True, "error": why}]
            metrics["group_return_std"] = reward["group_return_std"]
            metrics["reference_s"] = ref[0]["reference_s"] if ref else 0.0
            return [metrics]

        keys = grpo_keys(batch, run.N)
        return IterationPlan(
            env_method="run_episodes",
            env_args=(base, self.cfg.group_size, run.T),
            rollout_kwargs={"batch": batch, "to_actor": not self.uses_reference},
            learn=learn,
            abort_keys=keys,
            count_env_steps=True,
        )

    def collect(self, worker: Any, gen: int, steps: int, **kwargs: Any) -> dict[str, Any]:
        return collect_grpo(worker, gen, steps, **kwargs)

    def learner(self, spec: dict[str, Any], model_cfg: Any, ctx: LearnerContext) -> GRPOLearnerSide:
        model = ctx.dp.wrap(build_policy(spec), methods=("evaluate", "value"))
        return GRPOLearnerSide(model, self.cfg, ctx, obs_stats_frozen(model_cfg or {}))

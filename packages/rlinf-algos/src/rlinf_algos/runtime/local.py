"""The in-process runtime (``runner.scheduler: local``): any algorithm's recipe in one process.

The env is a :class:`~rlinf_algos.envs.VectorEnvStepper` in this process; the recipe's
:class:`~rlinf_algos.flow.LocalSession` collects and learns; this module keeps the books:
``metrics.csv`` rows every ``runner.log_interval`` env steps, ``checkpoints/step_<n>.safetensors`` every
``runner.checkpoint_interval`` (weights, optimiser, RNG, statistics, replay buffer: whatever the
session's ``state()`` holds), ``policy.safetensors`` and ``summary.json`` at the end. Ctrl-C writes a
checkpoint, the policy and the summary (``"interrupted": true``), then re-raises.

``resume`` continues from the newest checkpoint: the environments are re-created and reset with
a seed derived from the step count (simulator state is not checkpointed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlinf_algos.envs import VectorEnvStepper
from rlinf_algos.flow import Recipe
from rlinf_algos.models import check_policy_spec, parameter_counts
from rlinf_algos.perception import warm_start_policy
from rlinf_algos.run_files import POLICY, checkpoint_name, write_state
from rlinf_algos.rundir import (
    BASE_COLUMNS,
    RunRecorder,
    env_record,
    load_checkpoint,
    write_summary,
)

__all__ = ["make_stepper", "train_local"]


def make_stepper(env: Any, seed: int) -> VectorEnvStepper:
    """The vector env of the ``env`` section, seeded (slot ``i`` with ``seed + i``)."""
    return VectorEnvStepper(
        env.id,
        env.num_envs,
        seed,
        vectorization=env.vectorization,
        env_kwargs=env.kwargs,
        max_episode_steps=env.max_episode_steps,
        obs_mode=env.obs_mode,
        image_size=env.image_size,
        wrappers=env.wrappers,
    )


def train_local(
    recipe: Recipe,
    sections: Any,
    run_dir: Path,
    *,
    progress: Any = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train ``recipe`` in this process until ``runner.total_steps`` env steps; returns the
    summary (also in ``run_dir/summary.json``)."""
    runner, env_cfg = sections.runner, sections.env
    torch.set_num_threads(runner.torch_threads)
    run_dir = Path(run_dir)
    state = load_checkpoint(run_dir, recipe.name)[1] if resume else None
    seed = runner.seed + (state["run"]["steps"] if state else 0)
    torch.manual_seed(runner.seed)
    stepper = make_stepper(env_cfg, seed)
    session = None
    try:
        spaces = stepper.spaces()
        recipe.check_spaces(env_cfg, spaces)
        spec = recipe.policy_spec(sections.model, spaces)
        check_policy_spec(spec)
        session = recipe.local_session(stepper, spec, sections)
        warm = None
        if sections.model.warm_start is not None and state is None:
            init, warm = warm_start_policy(spec, env_cfg, sections.model.warm_start, runner.seed, run_dir)
            session.policy_module().load_state_dict(init)
        columns = BASE_COLUMNS + recipe.metric_columns(sections.model) + ("success_rate",)
        rec = RunRecorder(
            run_dir,
            runner.log_interval,
            columns if "csv" in runner.loggers else None,
            stepper,
            progress,
            resume=state is not None,
        )
        if state is not None:
            session.load(state)
            stepper.steps = int(state["run"]["steps"])
            rec.load(state["run"], int(state["run"]["steps"]))
            torch.set_rng_state(state["run"]["torch_rng"])
        rec.start_clock(stepper.steps)
        last_ckpt = stepper.steps

        def checkpoint() -> None:
            nonlocal last_ckpt
            run_state = {"steps": stepper.steps, **rec.state(), "torch_rng": torch.get_rng_state()}
            path = run_dir / "checkpoints" / checkpoint_name(stepper.steps)
            write_state({"algorithm": recipe.name, "run": run_state, **session.state()}, path)
            last_ckpt = stepper.steps

        def finish(interrupted: bool) -> dict[str, Any]:
            rec.close()
            policy = {
                **env_record(env_cfg),
                "algorithm": recipe.name,
                "spec": spec,
                "state_dict": session.policy_state_dict(),
            }
            write_state(policy, run_dir / POLICY)
            summary = rec.summary(recipe.name, env_cfg.id, stepper.steps, interrupted)
            if warm is not None:
                summary["warm_start"] = warm
            module = session.policy_module()
            if module is not None:
                summary["parameters"] = parameter_counts(module)
            write_summary(run_dir, summary)
            return summary

        interval = runner.checkpoint_interval
        try:
            while stepper.steps < runner.total_steps:
                session.step()
                if stepper.steps - rec.last_log_step >= runner.log_interval:
                    rec.row(stepper.steps, session.metrics())
                if interval and stepper.steps - last_ckpt >= interval:
                    checkpoint()
        except KeyboardInterrupt:
            checkpoint()
            finish(interrupted=True)
            raise
        if stepper.steps > rec.last_log_step:
            rec.row(stepper.steps, session.metrics(), force=True)
        if interval and stepper.steps != last_ckpt:
            checkpoint()
        return finish(interrupted=False)
    finally:
        if session is not None:
            session.close()
        stepper.close()

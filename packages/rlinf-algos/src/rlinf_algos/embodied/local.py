"""An embodied flow in one process (``runner.scheduler: local``).

The env is a :class:`~rlinf_algos.envs.VectorEnvStepper` in this process; the recipe's
:class:`~rlinf_algos.flow.LocalSession` collects and learns; the driver keeps the books
(``metrics.csv`` rows every ``runner.log_interval`` env steps, checkpoints every
``runner.checkpoint_interval``: weights, optimiser, RNG, statistics, replay buffer, whatever the
session's ``state()`` holds; ``policy.safetensors`` and ``summary.json`` at the end).

This is not an in-process imitation of the workers: links, channels and a driver round trip per
step cost more than the simulator on MuJoCo-sized work, and ``local`` is what a laptop user and
the throughput benchmark's in-process figure rely on. The collection loops are written against a
port (:mod:`rlinf_algos.ports`), so PPO's and SAC's collection and learner code is the same here
and on workers.

``resume`` continues from the newest checkpoint: the environments are re-created and reset with a
seed derived from the step count (simulator state is not checkpointed).
"""

from __future__ import annotations

from typing import Any

import torch

from rlinf_algos.envs import VectorEnvStepper
from rlinf_algos.families import SimulatorError
from rlinf_algos.flow import FlowRun
from rlinf_algos.models import check_policy_spec, parameter_counts
from rlinf_algos.run_files import POLICY, write_state
from rlinf_algos.rundir import env_record
from rlinf_algos.runtime.books import BASE_COLUMNS
from rlinf_algos.runtime.stop import cuda_rng_state, set_cuda_rng_state
from rlinf_algos.warm_starts import initial_weights
from rlinf_core.errors import RlinfError

__all__ = ["EmbodiedLocalRun", "make_stepper"]


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
        family=env.family,
        options=env.options,
        python=env.python,
        timeout_s=env.timeout_s,
        on_nonfinite=env.on_nonfinite,
    )


class EmbodiedLocalRun(FlowRun):
    """An embodied flow's :class:`~rlinf_algos.flow.LocalSession` over a vector env in the
    driver's process (see the module docstring)."""

    unit = "env step"
    failure_files = "policy.safetensors"

    def __init__(self, driver: Any, flow: Any) -> None:
        super().__init__(driver)
        self.recipe, self.sections = flow.recipe, flow.sections
        self.runner = self.sections.runner
        self.log_interval = self.runner.log_interval
        self.session: Any = None
        self.stepper: VectorEnvStepper | None = None
        self.warm: dict[str, Any] | None = None
        self.sim_restarts = 0  # simulator processes started again (runner.max_restarts bounds them)
        self.iteration_index = 0

    def columns(self) -> tuple[str, ...]:
        return BASE_COLUMNS + self.recipe.metric_columns(self.sections.model) + ("success_rate",)

    def start(self, state: dict[str, Any] | None) -> None:
        runner, env_cfg, recipe = self.runner, self.sections.env, self.recipe
        torch.set_num_threads(runner.torch_threads)
        seed = runner.seed + (int(state["run"]["steps"]) if state else 0)
        torch.manual_seed(runner.seed)
        self.stepper = self.episodes = make_stepper(env_cfg, seed)
        spaces = self.stepper.spaces()
        recipe.check_spaces(env_cfg, spaces)
        self.spec = recipe.policy_spec(self.sections.model, spaces)
        check_policy_spec(self.spec)
        self.session = recipe.local_session(self.stepper, self.spec, self.sections)
        warm = (
            initial_weights(self.spec, env_cfg, self.sections.model, runner.seed, self.driver.run_dir)
            if state is None
            else None
        )
        if warm is not None:
            init, self.warm = warm
            self.session.policy_module().load_state_dict(init)

    def load(self, state: dict[str, Any]) -> None:
        self.session.load(state)
        self.stepper.steps = int(state["run"]["steps"])
        torch.set_rng_state(state["run"]["torch_rng"])
        set_cuda_rng_state(state["run"].get("cuda_rng"))

    def done(self) -> bool:
        return self.stepper.steps >= self.runner.total_steps

    def step(self) -> None:
        d, stepper = self.driver, self.stepper
        before = stepper.steps
        try:
            self.session.step()
        except SimulatorError as err:  # the stepper started the simulator again: drop the batch
            self.sim_restarts += 1
            if self.sim_restarts > self.runner.max_restarts:
                raise RlinfError(
                    f"{err}; more than runner.max_restarts ({self.runner.max_restarts}) restarts"
                ) from None
            d.drop(self.iteration_index, stepper.steps - before, str(err))
            d.steps = stepper.steps
            return
        self.iteration_index += 1
        d.steps = stepper.steps
        if stepper.steps - d.rec.last_log_step >= self.log_interval:  # metrics() may reset running sums
            d.row(stepper.steps, self.session.metrics())

    def last_row(self) -> None:
        d = self.driver
        if d.steps > d.rec.last_log_step:
            d.row(d.steps, self.session.metrics(), force=True)

    def state(self) -> dict[str, Any]:
        cuda = cuda_rng_state()  # a session on a GPU: its streams too
        run = {"torch_rng": torch.get_rng_state(), **({"cuda_rng": cuda} if cuda is not None else {})}
        return {"run": run, **self.session.state()}

    def finish(self, interrupted: bool, error: str | None) -> dict[str, Any]:
        d, env_cfg = self.driver, self.sections.env
        if self.session is not None:
            policy = {
                **env_record(env_cfg),
                "algorithm": self.recipe.name,
                "spec": self.spec,
                "state_dict": self.session.policy_state_dict(),
            }
            write_state(policy, d.run_dir / POLICY)
        summary = d.rec.summary(self.recipe.name, env_cfg.id, d.steps, interrupted)
        if self.warm is not None:
            summary["warm_start"] = self.warm
        module = self.session.policy_module() if self.session is not None else None
        if module is not None:
            summary["parameters"] = parameter_counts(module)
        return summary

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        if self.stepper is not None:
            self.stepper.close()

"""SAC's flow: collection streams transitions to the learner, which learns while it goes on.

On workers each rollout worker sends a chunk of transitions every ``rollout.chunk_steps`` steps
(at most ``rollout.max_chunks_ahead`` chunks ahead of the learner), the learner adds each to its
replay buffer, takes ``updates_per_step`` gradient steps per env step past ``learning_starts``
and publishes; a driver iteration is ``rollout.steps_per_iteration`` steps (metrics and
checkpoints). In one process the same collection loop hands every vector step to the same
learner side at once.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np

from rlinf_algos.channels import ABORT, traj_key
from rlinf_algos.embodied.recipe import IterationPlan, LearnerContext, LearnerSide, Recipe
from rlinf_algos.flow import await_call
from rlinf_algos.models import build_policy, encoder_options
from rlinf_algos.replay import ReplayBuffer
from rlinf_algos.sac.config import SACConfig
from rlinf_algos.sac.learner import SACLearner
from rlinf_algos.sac.rollout import collect_sac
from rlinf_core.errors import ConfigError

__all__ = ["SACLearnerSide", "SACRecipe", "replay_obs_shape", "sac_critic", "sac_policy_spec"]


def sac_policy_spec(model_cfg: Any, spaces: Any) -> dict[str, Any]:
    """The spec of SAC's actor (256x256 relu unless the ``model`` section says);
    :func:`sac_critic` builds the matching critics from it."""
    if getattr(model_cfg, "predict_privileged", 0.0):
        raise ConfigError(
            "predict_privileged is an auxiliary loss of PPO's vla actor-critic; SAC has none (set it to 0)",
            "model.predict_privileged",
        )
    return {
        "type": model_cfg.type,
        "cls": "SquashedGaussianActor",
        "obs_dim": spaces["obs_dim"],
        "act_dim": spaces["act_dim"],
        "action_low": [float(x) for x in spaces["action_low"]],
        "action_high": [float(x) for x in spaces["action_high"]],
        "hidden": model_cfg.hidden_sizes or [256, 256],
        "activation": model_cfg.activation or "relu",
        "log_std_bound": model_cfg.log_std_bound,
        "ortho_init": model_cfg.ortho_init,
        "squash_eps": model_cfg.squash_eps,
        "obs_space": spaces.get("obs_space"),
        **encoder_options(model_cfg),
    }


def sac_critic(spec: dict[str, Any]) -> Any:
    """SAC's twin critics for the actor ``spec`` of :func:`sac_policy_spec` (the model type's
    ``TwinQ``)."""
    return build_policy({**spec, "cls": "TwinQ"})


def replay_obs_shape(spec: dict[str, Any]) -> Any:
    """What the replay buffer stores of an observation: the vector's shape, or for dict
    observations ``{key: (shape, dtype)}`` (images uint8, an instruction a fixed-width string)."""
    space = spec.get("obs_space")
    if not space or space.get("kind") != "dict":
        return (spec["obs_dim"],)
    out = {}
    for key, sub in space["keys"].items():
        if sub["kind"] == "text":
            out[key] = ((), f"<U{sub['max_length']}")
        else:
            out[key] = (tuple(sub["shape"]), sub["dtype"])
    return out


class SACLearnerSide(LearnerSide):
    """SAC's learner with its replay buffer: :meth:`absorb` takes a chunk of transitions and
    pays the gradient steps they are owed; :meth:`train` does so for an iteration's chunks from
    the channel, publishing after each chunk that changed the weights."""

    def __init__(self, spec: dict[str, Any], cfg: SACConfig, ctx: LearnerContext) -> None:
        self.cfg, self.ctx = cfg, ctx
        self.learner = SACLearner(build_policy(spec), sac_critic(spec), cfg, ctx.device)
        # np.zeros pages are only committed when written, so a large buffer_size costs what is used
        self.buffer = ReplayBuffer(cfg.buffer_size, replay_obs_shape(spec), (spec["act_dim"],), seed=ctx.seed)
        self.debt = 0.0
        self._sums: dict[str, Any] = {}
        self._count = 0

    @property
    def version(self) -> int:
        return int(self.learner.version)

    def publish_module(self) -> Any:
        return self.learner.policy()

    def absorb(self, item: dict[str, np.ndarray], start: int) -> bool:
        """Add a chunk whose first transition is env step ``start`` of the run; take
        ``updates_per_step`` gradient steps per transition past ``learning_starts``. Returns
        whether the weights changed."""
        cfg, buffer = self.cfg, self.buffer
        n = item["actions"].shape[0]
        buffer.add(
            item["obs"],
            item["actions"],
            item["rewards"],
            item["next_obs"],
            item["terminated"],
            item["truncated"],
        )
        eligible = start + n - max(start, cfg.learning_starts)  # those past learning_starts
        if eligible <= 0 or len(buffer) < cfg.batch_size:
            return False
        self.debt += eligible * cfg.updates_per_step
        while self.debt >= 1.0:
            out = self.learner.update(buffer.sample(cfg.batch_size))
            for k, v in out.items():
                self._sums[k] = self._sums[k] + v if k in self._sums else v
            self._count += 1
            self.debt -= 1.0
        return True

    def metrics(self) -> dict[str, float]:
        """The learner's losses averaged since the last call, and its update count."""
        out = {k: float(v) / self._count for k, v in self._sums.items()} if self._count else {}
        self._sums, self._count = {}, 0
        out["updates"] = float(self.learner.updates)
        return out

    def train(self, gen: int | str, chunks: int = 1, global_step: int = 0, **kwargs: Any) -> dict[str, Any]:
        """Consume ``chunks`` messages per rollout rank as they arrive. ``policy_lag``: the most
        gradient steps (weight versions) any message's actions were behind the learner when it
        arrived."""
        ctx = self.ctx
        t0 = time.perf_counter()
        waited = 0.0
        lag = 0
        got = 0  # env steps received in this iteration (global_step: those before it)
        for _ in range(chunks):
            for r in range(ctx.rollout_world):
                tw = time.perf_counter()
                item = ctx.traj_ch.get(traj_key(gen, r), timeout=ctx.timeout)
                waited += time.perf_counter() - tw
                if isinstance(item, str) and item == ABORT:
                    return {"aborted": True}
                lag = max(lag, self.version - int(item["version"]))
                n = item["actions"].shape[0]
                if self.absorb(item, global_step + got):
                    ctx.publish()
                got += n
        metrics: dict[str, Any] = {
            "aborted": False,
            "update_s": time.perf_counter() - t0 - waited,
            "wait_s": waited,
            "policy_lag": float(lag),
        }
        metrics.update(self.metrics())
        return metrics

    def state(self) -> dict[str, Any]:
        return {
            "learner": self.learner.state_dict(),
            "buffer": self.buffer.state_dict(),
            "update_debt": self.debt,
        }

    def load(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])
        self.buffer.load_state_dict(state["buffer"])
        self.debt = float(state["update_debt"])

    def final_state_dict(self) -> dict[str, Any]:
        self.learner.sync()
        return self.learner.actor.state_dict()

    def close(self) -> None:
        self.learner.close()  # the second thread of simultaneous / pipelined


class SACRecipe(Recipe):
    """Soft actor-critic's flow (see the module docstring)."""

    name: ClassVar[str] = "sac"
    learner_columns: ClassVar[tuple[str, ...]] = (
        "critic_loss",
        "q_mean",
        "actor_loss",
        "entropy",
        "alpha_loss",
        "alpha",
        "updates",
    )
    worker_columns: ClassVar[tuple[str, ...]] = ("update_s", "wait_s", "policy_lag")

    def policy_spec(self, model_cfg: Any, spaces: Any) -> dict[str, Any]:
        return sac_policy_spec(model_cfg, spaces)

    def check_spaces(self, env_cfg: Any, spaces: Any) -> None:
        """Refuse an action space other than a flat ``Box`` (the env worker's check, for the envs
        ``--dry-run`` does not build)."""
        from rlinf_algos.sac import SAC

        space = spaces.get("action_space") or {"kind": "box"}
        problem = SAC.action_space_problem(space, space["kind"], env_cfg.id)
        if problem is not None:
            raise ConfigError([problem])

    def channel_maxsize(self, rollout_cfg: Any) -> int:
        # the rollout workers stream transitions while the learner learns: a bound on each one's
        # queue keeps collection (and so the policy it acts with) close behind the learner
        return rollout_cfg.max_chunks_ahead

    def iteration_steps(self, rollout_cfg: Any, max_episode_steps: int | None) -> int:
        return rollout_cfg.steps_per_iteration

    @property
    def on_policy(self) -> bool:
        return False

    def plan(self, run: Any, k: int) -> IterationPlan:
        actor, gen, T, chunk = run.groups["actor"], run.gen, run.T, run.rollout_cfg.chunk_steps
        # a chunk is flushed every chunk_steps steps (t > 0) and once at the end
        chunks = len([t for t in range(1, T) if t % chunk == 0]) + 1
        step = run.steps
        return IterationPlan(
            env_method="run",
            env_args=(T,),
            rollout_kwargs={"random_actions": step < self.cfg.learning_starts, "chunk_steps": chunk},
            learn=lambda: await_call(actor.train(gen, chunks=chunks, global_step=step)),
            abort_keys=[traj_key(gen, r) for r in range(run.N)],
        )

    def collect(
        self,
        worker: Any,
        gen: int,
        steps: int,
        random_actions: bool = False,
        chunk_steps: int = 8,
        send: bool = True,
        **kwargs: Any,
    ) -> dict[str, Any]:
        def emit(item: dict[str, Any]) -> None:
            item["version"] = worker.version  # the weights these actions came from
            if send:
                worker.traj_ch.put(item, traj_key(gen, worker.rank), timeout=worker.timeout)
            worker.sync(0)  # newer weights, if the learner published some since

        collect_sac(
            worker,
            lambda: worker.model,
            steps,
            worker.np_rng,
            np.asarray(worker.spec["action_low"], np.float32),
            np.asarray(worker.spec["action_high"], np.float32),
            emit,
            random_actions=random_actions,
            chunk_steps=chunk_steps,
        )
        return {"aborted": False, "version": worker.version, "steps": steps * worker.stages * worker.slots}

    def learner(self, spec: dict[str, Any], model_cfg: Any, ctx: LearnerContext) -> SACLearnerSide:
        return SACLearnerSide(spec, self.cfg, ctx)

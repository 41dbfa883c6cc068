"""The ``ppo``, ``sac`` and ``grpo`` algorithms: their configuration models and entry points.

Light on purpose: this module imports pydantic and rlinf_core only, so the plugin can register
the classes (and a driver can validate a YAML) without torch, gymnasium or mujoco. The training
code is imported inside :meth:`run`.

The ``algorithm`` section of a run YAML is validated by the selected algorithm's
``config_model`` (errors name paths starting at ``algorithm``). The ``env``, ``model`` and
``runner`` sections the in-process runner reads are validated by :class:`EnvConfig`,
:class:`ModelConfig` and :class:`RunnerConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlinf_core.algorithm import Algorithm
from rlinf_core.config import validate_model
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError

__all__ = [
    "GRPO",
    "PPO",
    "SAC",
    "EnvConfig",
    "GRPOConfig",
    "ModelConfig",
    "PPOConfig",
    "RolloutConfig",
    "RunSections",
    "RunnerConfig",
    "SACConfig",
    "load_run_sections",
    "load_sections",
]

_STRICT = ConfigDict(extra="forbid", validate_default=True)

Unit = Field(ge=0.0, le=1.0)


class PPOConfig(BaseModel):
    """``algorithm`` section for ``name: ppo``. Defaults follow CleanRL's ``ppo_continuous_action``
    (the issue's HalfCheetah benchmark settings, with 8 environments)."""

    model_config = _STRICT

    name: Literal["ppo"] = "ppo"
    gamma: float = Field(0.99, ge=0.0, le=1.0, description="discount")
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda")
    lr: float = Field(3e-4, gt=0.0, description="Adam learning rate")
    anneal_lr: bool = Field(True, description="decay the learning rate linearly to 0 over the run")
    adam_eps: float = Field(1e-5, gt=0.0)
    rollout_steps: int = Field(
        256, ge=1, description="steps per env per iteration (batch = rollout_steps * env.num_envs)"
    )
    minibatch_size: int = Field(64, ge=1)
    update_epochs: int = Field(10, ge=1)
    clip_low: float = Field(0.2, ge=0.0, lt=1.0, description="ratio may fall to 1 - clip_low")
    clip_high: float = Field(0.2, ge=0.0, description="ratio may rise to 1 + clip_high")
    dual_clip: float | None = Field(None, gt=1.0, description="dual-clip constant c > 1, or null")
    value_clip: float | None = Field(0.2, gt=0.0, description="PPO2 value clipping range, or null")
    ent_coef: float = Field(0.0, ge=0.0)
    vf_coef: float = Field(0.5, ge=0.0)
    max_grad_norm: float | None = Field(0.5, gt=0.0, description="global gradient-norm clip, or null")
    target_kl: float | None = Field(
        None, gt=0.0, description="stop an update's epochs once approx KL exceeds it"
    )
    normalize_advantages: bool = True
    normalize_obs: bool = True
    normalize_reward: bool = Field(True, description="scale rewards by the std of the discounted return")


class SACConfig(BaseModel):
    """``algorithm`` section for ``name: sac``. Defaults follow CleanRL's ``sac_continuous_action``
    and SB3 (one gradient step per env step)."""

    model_config = _STRICT

    name: Literal["sac"] = "sac"
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    tau: float = Field(0.005, gt=0.0, le=1.0, description="Polyak rate of the target critics")
    batch_size: int = Field(256, ge=1)
    buffer_size: int = Field(1_000_000, ge=1)
    learning_starts: int = Field(
        5_000, ge=0, description="env steps of uniform random actions before learning"
    )
    actor_lr: float = Field(3e-4, gt=0.0)
    critic_lr: float = Field(1e-3, gt=0.0)
    alpha_lr: float = Field(1e-3, gt=0.0)
    autotune: bool = Field(True, description="learn the temperature towards target_entropy")
    init_alpha: float = Field(
        1.0, gt=0.0, description="the temperature at the start (fixed if autotune is off)"
    )
    target_entropy: float | None = Field(None, description="null means -action_dim")
    updates_per_step: float = Field(
        1.0, gt=0.0, description="update-to-data ratio: gradient steps per env step"
    )
    actor_update_interval: int = Field(1, ge=1, description="update the actor every n critic updates")
    target_update_interval: int = Field(
        1, ge=1, description="Polyak-update the targets every n critic updates"
    )
    update_order: Literal["sequential", "simultaneous", "pipelined"] = Field(
        "sequential",
        description=(
            "sequential: the actor step sees the critic after this update's critic step "
            "(CleanRL, SB3); simultaneous: both steps start from the same networks (the SAC "
            "authors' softlearning, rlkit) and run at the same time on two threads; pipelined: "
            "as simultaneous, but each step reads the other's networks one update older, so the "
            "two threads may run an update apart instead of meeting at every update"
        ),
    )

    @model_validator(mode="after")
    def _pipelined_every_update(self) -> SACConfig:
        if self.update_order == "pipelined" and self.actor_update_interval != 1:
            raise ValueError(
                "update_order 'pipelined' runs an actor step in every update, so it needs "
                f"actor_update_interval: 1 (got {self.actor_update_interval}); use 'simultaneous' "
                "or 'sequential' for a delayed actor"
            )
        return self


class GRPOConfig(BaseModel):
    """``algorithm`` section for ``name: grpo``: group-relative advantages, no critic."""

    model_config = _STRICT

    name: Literal["grpo"] = "grpo"
    group_size: int = Field(8, ge=2, description="samples (episodes) per group")
    num_groups: int = Field(4, ge=1, description="groups per iteration")
    lr: float = Field(3e-4, gt=0.0)
    adam_eps: float = Field(1e-5, gt=0.0)
    update_epochs: int = Field(4, ge=1)
    minibatch_size: int = Field(256, ge=1, description="steps per gradient step")
    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    clip_high: float = Field(0.2, ge=0.0)
    kl_coef: float = Field(0.0, ge=0.0, description="weight of the k3 KL to the reference policy")
    scale_advantages: bool = Field(True, description="divide by the group std (false: Dr. GRPO)")
    max_grad_norm: float | None = Field(0.5, gt=0.0)
    aggregation: Literal["token-mean", "seq-mean-token-mean"] = "token-mean"


class EnvConfig(BaseModel):
    """``env`` section: which gymnasium id, how many copies, how they run."""

    model_config = _STRICT

    id: str = Field(min_length=1, description="gymnasium id, e.g. HalfCheetah-v5")
    num_envs: int = Field(8, ge=1)
    vectorization: Literal["sync", "async"] = "sync"
    max_episode_steps: int | None = Field(None, ge=1)
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for gymnasium.make")


class ModelConfig(BaseModel):
    """``model`` section: MLP sizes. ``null`` picks the algorithm's default (64x64 tanh for PPO
    and GRPO, 256x256 relu for SAC)."""

    model_config = _STRICT

    hidden_sizes: list[int] | None = Field(None, min_length=1)
    activation: Literal["tanh", "relu", "elu", "silu"] | None = None
    log_std_init: float = Field(0.0, description="PPO/GRPO: initial log standard deviation of the policy")
    ortho_init: bool = Field(
        True,
        description="orthogonal initialisation (gain sqrt(2), 0.01 on the policy head, 1 on the value "
        "or Q head); false keeps PyTorch's default Linear initialisation (SB3's ortho_init=False for "
        "PPO; CleanRL's and SB3's SAC networks)",
    )
    log_std_bound: Literal["tanh", "clip"] = Field(
        "tanh",
        description="SAC: how the actor bounds its state-dependent log_std. tanh squashes it into "
        "[-5, 2] (CleanRL; initial std about 0.22); clip clamps it into [-20, 2] (SB3; initial std about 1)",
    )
    squash_eps: float = Field(
        0.0,
        ge=0.0,
        description="SAC: eps in the log-probability's tanh correction log(1 - tanh(u)^2 + eps); 0 is the "
        "exact form (Spinning Up, softlearning), 1e-6 is SB3's and CleanRL's (bounds the entropy cost of "
        "saturated actions)",
    )

    @model_validator(mode="after")
    def _positive(self) -> ModelConfig:
        if self.hidden_sizes is not None and any(h < 1 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive layer widths, got {self.hidden_sizes}")
        return self


class RunnerConfig(BaseModel):
    """``runner`` section as the in-process runner reads it."""

    model_config = _STRICT

    total_steps: int = Field(ge=1, description="env steps to train for (summed over envs)")
    seed: int = Field(0, ge=0)
    log_interval: int = Field(10_000, ge=1, description="env steps between metrics rows")
    checkpoint_interval: int = Field(0, ge=0, description="env steps between checkpoints; 0 turns them off")
    torch_threads: int = Field(1, ge=1, description="intra-op threads; 1 is fastest for small MLPs")
    device: str = Field("cpu", description="torch device of the learner")
    scheduler: str = Field(
        "ray",
        min_length=1,
        description="a registered scheduler (`ray`: embedded Ray, or the cluster at RAY_ADDRESS), "
        "or `local` to train in the rlinf process without workers",
    )
    max_restarts: int = Field(
        10, ge=0, description="env/rollout worker restarts allowed in one run before giving up"
    )
    worker_timeout: float = Field(
        300.0, gt=0.0, description="seconds a worker waits on a channel before reporting what it waited for"
    )


class RolloutConfig(BaseModel):
    """``rollout`` section: how the distributed runner (``runner.scheduler: ray``) pipelines
    env stepping, inference and learning. The in-process runner ignores it."""

    model_config = _STRICT

    pipeline_stages: int = Field(
        1,
        ge=1,
        description="split each env worker's envs into this many stages, so one stage steps while "
        "the rollout worker runs inference for another",
    )
    max_staleness: int = Field(
        1,
        ge=0,
        description="how many weight versions the rollout policy may lag the learner (1 overlaps "
        "collecting the next batch with the update of this one; 0 is strictly on-policy)",
    )
    steps_per_iteration: int = Field(
        64, ge=1, description="SAC: vector steps per env per driver iteration (logging, checkpoints)"
    )
    chunk_steps: int = Field(
        8, ge=1, description="SAC: vector steps per message of transitions to the learner"
    )
    max_chunks_ahead: int = Field(
        1,
        ge=0,
        description="SAC: messages of transitions a rollout worker may have sent that the learner "
        "has not taken yet. The rollout worker waits for room, so the actions of a message come "
        "from weights at most (max_chunks_ahead + 1) messages' worth of gradient steps older than "
        "the learner that takes it (policy_lag in metrics.csv). 0: no bound (collection runs "
        "ahead of learning by up to max_staleness + 1 iterations)",
    )


class RunSections(BaseModel):
    """The validated ``env``, ``model``, ``runner`` and ``rollout`` sections of a run."""

    model_config = ConfigDict(frozen=True)

    env: EnvConfig
    model: ModelConfig
    runner: RunnerConfig
    rollout: RolloutConfig


def _as_mapping(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, BaseModel):
        return obj.model_dump()
    return obj


def load_sections(run_config: Any) -> tuple[EnvConfig, ModelConfig, RunnerConfig]:
    """Validate the ``env``, ``model`` and ``runner`` sections of ``run_config`` (a mapping, or an
    object with those attributes); every problem of all three is reported in one
    :class:`ConfigError` with its YAML path."""
    sections: dict[str, Any] = {}
    for name in ("env", "model", "runner"):
        if isinstance(run_config, Mapping):
            sections[name] = run_config.get(name)
        else:
            sections[name] = getattr(run_config, name, None)
        sections[name] = _as_mapping(sections[name], name)
    problems: list[ConfigProblem] = []
    out: dict[str, Any] = {}
    for name, model in (("env", EnvConfig), ("model", ModelConfig), ("runner", RunnerConfig)):
        data = sections[name]
        if data is None:
            if name == "model":
                data = {}
            else:
                problems.append(ConfigProblem(name, "missing section"))
                continue
        try:
            out[name] = validate_model(model, data, prefix=name)
        except ConfigError as err:
            problems.extend(err.problems)
    if problems:
        raise ConfigError(problems)
    return out["env"], out["model"], out["runner"]


def load_run_sections(run_config: Any) -> RunSections:
    """:func:`load_sections` plus the ``rollout`` section (optional), every problem at once."""
    problems: list[ConfigProblem] = []
    try:
        env, model, runner = load_sections(run_config)
    except ConfigError as err:
        problems.extend(err.problems)
    raw = (
        run_config.get("rollout") if isinstance(run_config, Mapping) else getattr(run_config, "rollout", None)
    )
    try:
        rollout = validate_model(RolloutConfig, _as_mapping(raw, "rollout") or {}, prefix="rollout")
    except ConfigError as err:
        problems.extend(err.problems)
    if problems:
        raise ConfigError(problems)
    return RunSections(env=env, model=model, runner=runner, rollout=rollout)


def _env_id_problems(run_config: Any) -> list[ConfigProblem]:
    """Whether ``env.id`` is a registered gymnasium id (plugin ids included); imports gymnasium."""
    env = run_config.get("env") if isinstance(run_config, Mapping) else None
    env_id = env.get("id") if isinstance(env, Mapping) else None
    if not isinstance(env_id, str) or not env_id:
        return []
    from rlinf_algos.envs import ensure_registered

    try:
        ensure_registered(env_id)
    except ConfigError as err:
        return list(err.problems)
    return []


class _LocalAlgorithm(Algorithm):
    components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor")
    required_components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor")
    distributed: ClassVar[bool] = True
    """Runs on workers placed by a scheduler (``rlinf train`` defaults to ``runner.scheduler: ray``);
    ``False``: in the rlinf process (default ``local``)."""

    @classmethod
    def run_config_problems(cls, run_config: Mapping[str, Any]) -> list[ConfigProblem]:
        """Every problem of the ``env``, ``model``, ``runner`` and ``rollout`` sections and of how
        they fit the algorithm (``rlinf train`` calls this before starting anything)."""
        known = ("cluster", "algorithm", "env", "model", "runner", "rollout")
        unknown = [
            ConfigProblem(str(key), f"unknown section; a {cls.PLUGIN_NAME} run has {', '.join(known)}")
            for key in run_config
            if key not in known
        ]
        try:
            sections = load_run_sections(run_config)
        except ConfigError as err:
            return unknown + list(err.problems) + _env_id_problems(run_config)
        return unknown + cls._fit_problems(sections) + _env_id_problems(run_config)

    @classmethod
    def _fit_problems(cls, sections: RunSections) -> list[ConfigProblem]:
        problems = []
        stages = sections.rollout.pipeline_stages
        if sections.env.num_envs % stages:
            problems.append(
                ConfigProblem(
                    "rollout.pipeline_stages",
                    f"{stages} stages do not divide env.num_envs={sections.env.num_envs}; "
                    "each env worker's envs are split evenly into stages",
                )
            )
        if cls.PLUGIN_NAME == "ppo" and sections.runner.device != "cpu":
            problems.append(
                ConfigProblem(
                    "runner.device",
                    f"the PPO learner runs on the CPU (got {sections.runner.device!r}): its MLPs are small "
                    "enough that an update is per-call overhead; use device: cpu",
                )
            )
        return problems

    def run(
        self,
        scheduler: Any,
        run_config: Any,
        run_dir: Any,
        *,
        resume: bool = False,
        progress: Any = None,
        callbacks: Any = None,
        rollout_only: bool = False,
    ) -> dict[str, Any]:
        """Train over the ``env``, ``model``, ``runner`` (and ``rollout``) sections of
        ``run_config``; write metrics, checkpoints, the final policy and ``summary.json`` under
        ``run_dir``; return the summary.

        With ``scheduler=None`` the loop runs in this process (:mod:`rlinf_algos.local_runner`);
        with a started scheduler the env, rollout and actor workers run where the ``cluster``
        section places them and talk over channels (:mod:`rlinf_algos.runner`). ``resume``
        continues from the newest checkpoint of ``run_dir``; ``progress`` is called with every
        metrics row.
        """
        if scheduler is None:
            if rollout_only:
                raise RlinfError("rollout_only needs a scheduler (the distributed runner)")
            env, model, runner = load_sections(run_config)
            from rlinf_algos import local_runner

            return local_runner.train(
                self.config, env, model, runner, Path(run_dir), progress=progress, resume=resume
            )
        sections = load_run_sections(run_config)
        problems = self._fit_problems(sections)
        if problems:
            raise ConfigError(problems)
        from rlinf_algos.runner import run_distributed

        return run_distributed(
            self.config,
            sections,
            scheduler,
            Path(run_dir),
            resume=resume,
            progress=progress,
            callbacks=callbacks,
            rollout_only=rollout_only,
        )


class PPO(_LocalAlgorithm):
    """Proximal policy optimisation with a Gaussian MLP policy and a value critic."""

    PLUGIN_NAME: ClassVar[str] = "ppo"
    config_model: ClassVar[type[BaseModel]] = PPOConfig


class SAC(_LocalAlgorithm):
    """Soft actor-critic with twin critics, Polyak targets and a learned temperature."""

    PLUGIN_NAME: ClassVar[str] = "sac"
    config_model: ClassVar[type[BaseModel]] = SACConfig


class GRPO(_LocalAlgorithm):
    """Group relative policy optimisation: groups of episodes from one initial state, their returns
    normalised within the group as advantages, a clipped ratio and a k3 KL to a frozen reference.

    On workers (``runner.scheduler: ray``, the default) the env workers reset each group's
    copies from one seed and run every episode to its end, the rollout workers act and record the
    episodes, the ``reward`` worker turns the returns into group advantages, the ``reference``
    worker adds the frozen policy's log-probabilities, and the actor updates; with
    ``runner.scheduler: local`` all of it runs in the rlinf process. The language-model GRPO is
    ``grpo_lm`` (:mod:`rlinf_algos.lm`)."""

    PLUGIN_NAME: ClassVar[str] = "grpo"
    config_model: ClassVar[type[BaseModel]] = GRPOConfig
    components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor", "reward", "reference")
    required_components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor", "reward", "reference")

    @classmethod
    def run_config_problems(cls, run_config: Mapping[str, Any]) -> list[ConfigProblem]:
        """The sections' problems, and whether ``env.num_envs`` holds exactly the groups of an
        iteration (``group_size * num_groups``)."""
        problems = super().run_config_problems(run_config)
        algo, env = run_config.get("algorithm"), run_config.get("env")
        try:
            cfg = GRPOConfig.model_validate(algo)
            num_envs = EnvConfig.model_validate(env).num_envs
        except Exception:  # their own problems are reported with their paths
            return problems
        need = cfg.group_size * cfg.num_groups
        if num_envs != need:
            problems.append(
                ConfigProblem(
                    "env.num_envs",
                    f"GRPO runs one env per episode of an iteration: algorithm.group_size x algorithm.num_groups "
                    f"= {cfg.group_size} x {cfg.num_groups} = {need}, got {num_envs}",
                )
            )
        return problems

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
    "RunnerConfig",
    "SACConfig",
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
    log_std_init: float = 0.0

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


class _LocalAlgorithm(Algorithm):
    components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor")

    def _check_scheduler(self, scheduler: Any) -> None:
        if scheduler is not None:
            raise RlinfError(
                f"algorithm {self.PLUGIN_NAME!r}: the distributed runner (env, rollout and actor workers over "
                "channels) lands with the runtime; call run(scheduler=None, ...) to train in this process"
            )

    def run(self, scheduler: Any, run_config: Any, run_dir: Any) -> dict[str, Any]:
        """Train in this process (``scheduler`` must be ``None`` for now) over the ``env``,
        ``model`` and ``runner`` sections of ``run_config``; write metrics, checkpoints, the final
        policy and ``summary.json`` under ``run_dir``; return the summary."""
        self._check_scheduler(scheduler)
        env, model, runner = load_sections(run_config)
        from rlinf_algos import local_runner

        return local_runner.train(self.config, env, model, runner, Path(run_dir))


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
    normalised within the group as advantages, a clipped ratio and a k3 KL to a frozen reference."""

    PLUGIN_NAME: ClassVar[str] = "grpo"
    config_model: ClassVar[type[BaseModel]] = GRPOConfig
    components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor", "reward", "reference")

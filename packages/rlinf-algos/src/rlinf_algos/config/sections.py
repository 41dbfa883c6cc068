"""The sections every embodied run shares: ``env``, ``model``, ``runner``, ``rollout`` and ``actor``.

Light on purpose (pydantic and rlinf_core only): the plugin registers the algorithms and a
driver validates a YAML without torch, gymnasium or mujoco. Each algorithm's own ``algorithm``
section lives in its folder (:mod:`rlinf_algos.ppo.config`...); the ``model`` section's model is
the one of the type it names (:func:`rlinf_algos.models.validate_model_section`: the base
:class:`~rlinf_algos.models.config.ModelConfig`, ``vla``'s options in
:mod:`rlinf_algos.models.vla_config`). The field descriptions here are the configuration
reference of the package README (generated from them).

:func:`validate_run_sections` validates the sections; :func:`load_run_sections` returns those a
validated run configuration carries (:class:`~rlinf_algos.config.validated.ValidatedConfig`,
what :func:`rlinf_algos.config.prepare.prepare_run` hands to ``Algorithm.run``) and validates
only a plain mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, field_validator, model_validator

from rlinf_algos.config.validated import carried_sections
from rlinf_algos.models.config import LoraConfig, ModelConfig
from rlinf_algos.models.vla_config import LanguageConfig, VisionConfig, VLAModelConfig, WarmStartConfig
from rlinf_algos.weight_sync import WeightSyncMode, weight_sync_field
from rlinf_core.config import ConfigSection, validate_model
from rlinf_core.errors import ConfigError, ConfigProblem

if TYPE_CHECKING:
    from rlinf_core.plugins import PluginHost

__all__ = [
    "LOGGERS",
    "STRICT",
    "ActorConfig",
    "EnvConfig",
    "EnvWrapperConfig",
    "LanguageConfig",
    "LoraConfig",
    "ModelConfig",
    "RolloutConfig",
    "RunSections",
    "RunnerConfig",
    "VLAModelConfig",
    "VisionConfig",
    "WarmStartConfig",
    "env_id_problems",
    "load_run_sections",
    "load_sections",
    "validate_run_sections",
]

STRICT = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)
"""Unknown keys are errors; defaults are validated too; no inf or nan. The section models derive
from :class:`~rlinf_core.config.ConfigSection`, which adds the same strictness for numbers
(``true`` is not a number)."""

LOGGERS = ("csv", "tensorboard", "wandb")
"""The metrics backends ``runner.loggers`` may list."""


class EnvWrapperConfig(ConfigSection):
    """One entry of ``env.wrappers``: a gymnasium wrapper by import path, with keyword arguments
    (a bare string is the path alone)."""

    model_config = STRICT

    path: str = Field(
        min_length=1, description="import path of a per-env wrapper, e.g. gymnasium.wrappers:ClipReward"
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the wrapper")

    @model_validator(mode="before")
    @classmethod
    def _path_alone(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"path": data}
        if not isinstance(data, (Mapping, EnvWrapperConfig)):
            raise ValueError(
                "give an import path (gymnasium.wrappers:ClipReward) or {path: ..., kwargs: {...}}"
            )
        return data


class EnvConfig(ConfigSection):
    """``env`` section: which env family and task (or gymnasium id), how many copies, how they run."""

    model_config = STRICT

    family: str = Field(
        "gymnasium",
        min_length=1,
        description="the env family (`rlinf env list`): gymnasium (any gymnasium id), metaworld, maniskill, "
        "libero, or one a plugin registers",
    )
    id: str = Field(
        min_length=1,
        description="gymnasium id, e.g. HalfCheetah-v5, or module:EnvName-v0 (the module is imported and "
        "registers the env); for the other families a task or suite (reach-v3, MT10, PushCube-v1, libero_spatial)",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="the env family's own options (metaworld: camera, reward; maniskill: sim_backend...; `rlinf env list`)",
    )
    python: str | None = Field(
        None,
        description="the interpreter of a family whose simulator runs in its own (metaworld, libero); default: "
        "the venv `rlinf env setup FAMILY` made",
    )
    timeout_s: float = Field(
        60.0,
        gt=0.0,
        description="seconds one reset or step may take: a simulator process is killed after it, an env in rlinf's process (module:Env ids, plugin ids, env.wrappers) is left on its thread; either ends the run naming the env, the call and the worker",
    )
    on_nonfinite: Literal["stop", "zero", "ignore"] = Field(
        "stop",
        description="a NaN or infinite observation or reward: stop (the run ends, naming the first), zero "
        "(replaced by 0 and counted) or ignore",
    )
    num_envs: int = Field(8, ge=1, description="environments over all env workers (each its own seed)")
    vectorization: Literal["sync", "async"] = Field(
        "sync", description="gymnasium vector env: sync (one process) or async (a subprocess per env)"
    )
    max_episode_steps: int | None = Field(
        None, ge=1, description="time limit of an episode (null: the id's own, if it has one)"
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for gymnasium.make")
    wrappers: list[EnvWrapperConfig] = Field(
        default_factory=list,
        description="gymnasium wrappers applied to every env copy in order: import paths "
        "(gymnasium.wrappers:ClipReward) or {path, kwargs}",
    )
    obs_mode: Literal["state", "pixels", "pixels+state"] = Field(
        "state",
        description="state: the env's own observations (a vector, or the image/state/instruction dict "
        "an env emits itself); pixels: the env's rendered camera image alone; pixels+state: the image "
        "and the env's vector (MuJoCo renders with MUJOCO_GL=egl)",
    )
    image_size: tuple[int, int] = Field(
        (64, 64), description="(height, width) of the camera images of the pixel obs_modes"
    )

    @field_validator("image_size")
    @classmethod
    def _image_size(cls, v: tuple[int, int]) -> tuple[int, int]:
        if min(v) < 8 or max(v) > 1024:
            raise ValueError(f"image_size must be [height, width] between 8 and 1024 pixels, got {list(v)}")
        return v


class RunnerConfig(ConfigSection):
    """``runner`` section: how a run goes (its scheduler, seed, budget, records, devices)."""

    model_config = STRICT

    total_steps: int = Field(ge=1, description="env steps to train for (summed over envs)")
    seed: int = Field(
        0, ge=0, description="seeds env slot i with seed + i, the networks and the sampling noise"
    )
    log_interval: int = Field(10_000, ge=1, description="env steps between metrics rows")
    checkpoint_interval: int = Field(0, ge=0, description="env steps between checkpoints; 0 turns them off")
    torch_threads: int = Field(1, ge=1, description="intra-op threads; 1 is fastest for small MLPs")
    device: str = Field(
        "cpu",
        description="torch device of the learner: cpu, cuda, cuda:N, or auto (the GPU of the actor "
        "process's local rank among those its placement gives it, else the CPU); a CUDA device the "
        "placement does not give is an error. Rollout and reference processes compute on their "
        "placement's GPU under any value but cpu (the CPU when placed without one)",
    )
    scheduler: str = Field(
        "ray",
        min_length=1,
        description="a registered scheduler (`ray`: embedded Ray, or the cluster at RAY_ADDRESS), "
        "or `local` to train in the rlinf process without workers",
    )
    max_restarts: int = Field(
        10,
        ge=0,
        description="worker restarts allowed in one run before giving up: a dead env or rollout worker "
        "is restarted and its iteration run again; a dead learner (actor) is restarted from the newest "
        "checkpoint, losing at most checkpoint_interval env steps",
    )
    worker_timeout: float = Field(
        300.0,
        gt=0.0,
        description="seconds any wait of a worker may take before it reports what it waited for (a channel "
        "put or get, a link to an env or rollout worker, a weight publish or fetch, a call on a worker, a "
        "restart); the learner group's rendezvous, arrivals and collectives wait 2 x this + 30 s. A peer "
        "process that dies is found sooner, and named first",
    )
    loggers: list[Literal["csv", "tensorboard", "wandb"]] = Field(
        default_factory=lambda: ["csv", "tensorboard"],
        description="metrics backends: csv (metrics.csv), tensorboard (RUN_DIR/tensorboard), wandb "
        "(needs the wandb package; WANDB_MODE=offline works without a network); the same scalars go "
        "to each",
    )

    @field_validator("loggers")
    @classmethod
    def _unique_loggers(cls, loggers: list[str]) -> list[str]:
        if len(set(loggers)) != len(loggers):
            raise ValueError(f"lists a backend twice: {loggers}")
        return loggers


class RolloutConfig(ConfigSection):
    """``rollout`` section: how the workers pipeline env stepping, inference and learning (on
    every scheduler: ``runner.scheduler: local`` runs the same workers in one process)."""

    model_config = STRICT

    pipeline_stages: int = Field(
        1,
        ge=1,
        description="split each env worker's envs into this many stages, so one stage steps while "
        "the rollout worker runs inference for another",
    )
    weight_sync: WeightSyncMode = weight_sync_field()
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


class ActorConfig(ConfigSection):
    """``actor`` section: how the learner trains when the ``actor`` component is placed on several
    processes (one ``torch.distributed`` group; see :mod:`rlinf_algos.parallel`). A learner of
    one process ignores it."""

    model_config = STRICT

    strategy: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="ddp: every rank holds the model and the gradients are all-reduced; fsdp: FSDP2's "
        "fully_shard shards parameters, gradients and optimiser state over the ranks",
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="samples per forward/backward on one rank (gradient accumulation); the global "
        "minibatch, and so the update, is the same whatever the number of ranks; default: a rank's "
        "whole shard of the minibatch at once",
    )


class RunSections(BaseModel):
    """The validated ``env``, ``model``, ``runner``, ``rollout`` and ``actor`` sections of a run."""

    model_config = ConfigDict(frozen=True)

    env: EnvConfig
    model: SerializeAsAny[ModelConfig]
    """The model type's own section model (:class:`ModelConfig` or a subclass)."""
    runner: RunnerConfig
    rollout: RolloutConfig
    actor: ActorConfig = ActorConfig()


def _as_mapping(obj: Any) -> Any:
    if obj is None:
        return None
    if isinstance(obj, BaseModel):
        return obj.model_dump()
    return obj


def load_sections(
    run_config: Any, host: PluginHost | None = None
) -> tuple[EnvConfig, ModelConfig, RunnerConfig]:
    """Validate the ``env``, ``model`` and ``runner`` sections of ``run_config`` (a mapping, or an
    object with those attributes); every problem of all three is reported in one
    :class:`ConfigError` with its YAML path. ``host``: the plugin host whose model types count
    (default: the installed plugins)."""
    from rlinf_algos.models import validate_model_section

    sections: dict[str, Any] = {}
    for name in ("env", "model", "runner"):
        if isinstance(run_config, Mapping):
            sections[name] = run_config.get(name)
        else:
            sections[name] = getattr(run_config, name, None)
        sections[name] = _as_mapping(sections[name])
    problems: list[ConfigProblem] = []
    out: dict[str, Any] = {}
    for name, model in (("env", EnvConfig), ("model", None), ("runner", RunnerConfig)):
        data = sections[name]
        if data is None and name != "model":
            problems.append(ConfigProblem(name, "missing section"))
            continue
        try:
            if model is None:
                out[name] = validate_model_section(data, ModelConfig, prefix=name, host=host)
            else:
                out[name] = validate_model(model, data, prefix=name)
        except ConfigError as err:
            problems.extend(err.problems)
    if problems:
        raise ConfigError(problems)
    return out["env"], out["model"], out["runner"]


def load_run_sections(run_config: Any) -> RunSections:
    """The validated ``env``, ``model``, ``runner``, ``rollout`` and ``actor`` sections: those a
    validated configuration carries, else :func:`validate_run_sections` of ``run_config``."""
    carried = carried_sections(run_config, RunSections)
    return carried if carried is not None else validate_run_sections(run_config)


def validate_run_sections(run_config: Any, host: PluginHost | None = None) -> RunSections:
    """:func:`load_sections` plus the ``rollout`` and ``actor`` sections (optional), every
    problem at once."""
    problems: list[ConfigProblem] = []
    try:
        env, model, runner = load_sections(run_config, host)
    except ConfigError as err:
        problems.extend(err.problems)
    optional: dict[str, Any] = {}
    for name, section in (("rollout", RolloutConfig), ("actor", ActorConfig)):
        raw = run_config.get(name) if isinstance(run_config, Mapping) else getattr(run_config, name, None)
        try:
            optional[name] = validate_model(section, _as_mapping(raw) or {}, prefix=name)
        except ConfigError as err:
            problems.extend(err.problems)
    if problems:
        raise ConfigError(problems)
    return RunSections(env=env, model=model, runner=runner, **optional)


def env_id_problems(run_config: Any) -> list[ConfigProblem]:
    """The problems of the ``env`` section its family finds (:meth:`rlinf_core.envs.EnvFamily.
    problems`): for the ``gymnasium`` family, whether ``env.id`` is a registered gymnasium id
    (plugin ids included) whose constructor takes the keys of ``env.kwargs`` (imports
    gymnasium); an unknown family is one problem at ``env.family`` naming the installed ones."""
    env = run_config.get("env") if isinstance(run_config, Mapping) else None
    env_id = env.get("id") if isinstance(env, Mapping) else None
    if not isinstance(env_id, str) or not env_id:
        return []
    from rlinf_algos.families import get_family

    name = env.get("family", "gymnasium")
    if not isinstance(name, str) or not name:
        return []
    try:
        family = get_family(name)
    except ConfigError as err:
        return list(err.problems)
    return family.problems(env)

"""The sections every embodied run shares: ``env``, ``model``, ``runner``, ``rollout`` and ``actor``.

Light on purpose (pydantic and rlinf_core only): the plugin registers the algorithms and a
driver validates a YAML without torch, gymnasium or mujoco. Each algorithm's own ``algorithm``
section lives in its folder (:mod:`rlinf_algos.ppo.config`...). The field descriptions here are
the configuration reference of the package README (generated from them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlinf_core.config import ConfigSection, validate_model
from rlinf_core.errors import ConfigError, ConfigProblem

__all__ = [
    "LOGGERS",
    "STRICT",
    "ActorConfig",
    "EnvConfig",
    "EnvWrapperConfig",
    "ModelConfig",
    "RolloutConfig",
    "RunSections",
    "RunnerConfig",
    "WarmStartConfig",
    "env_id_problems",
    "load_run_sections",
    "load_sections",
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
    """``env`` section: which gymnasium id, how many copies, how they run."""

    model_config = STRICT

    id: str = Field(
        min_length=1,
        description="gymnasium id, e.g. HalfCheetah-v5, or module:EnvName-v0 (the module is imported and "
        "registers the env)",
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


class LoraConfig(ConfigSection):
    """``model.lora``: peft LoRA adapters (on a language model's policy; on a VLA policy's
    encoders). Only the adapters train there, and only they travel at each weight sync."""

    model_config = STRICT

    rank: int = Field(8, ge=1, le=1024, description="LoRA rank r")
    alpha: float = Field(16.0, gt=0.0, description="LoRA alpha (the update is scaled by alpha / rank)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="module names (e.g. [q_proj, v_proj]) or all-linear (every linear layer but the output head)",
    )
    merged_forward: bool = Field(
        False,
        description="train through merged weights x @ (W0 + scale B A)^T instead of the adapter matmuls "
        "(faster on small models on the CPU, same gradients; needs dropout 0)",
    )

    @model_validator(mode="after")
    def _merged_needs_no_dropout(self) -> LoraConfig:
        if self.merged_forward and self.dropout > 0:
            raise ValueError(
                "merged_forward needs dropout 0: adapter dropout acts on the adapter's input, which a "
                f"merged weight never sees (got dropout {self.dropout})"
            )
        return self


class VisionConfig(ConfigSection):
    """``model.vision`` (``type: vla``): the image encoder. A small CNN whose last feature maps
    the instruction modulates (FiLM) and a spatial softmax turns into image coordinates, or a
    ``transformers`` vision model from a folder."""

    model_config = STRICT

    path: str | None = Field(
        None, description="a transformers vision-model folder (AutoModel; ViT, ResNet, ...); null: the CNN"
    )
    channels: list[int] = Field(
        [32, 32, 32], min_length=1, description="CNN: output channels of each conv layer"
    )
    trainable: bool = Field(
        True, description="a vision model folder: train its weights (false: frozen, or LoRA only)"
    )


class LanguageConfig(ConfigSection):
    """``model.language`` (``type: vla``): the instruction encoder. A token embedding (words
    hashed into ``buckets``, averaged) or a ``transformers`` text model from a folder (mean of
    its last hidden states), with the folder's tokenizer."""

    model_config = STRICT

    path: str | None = Field(None, description="a transformers text-model folder (AutoModel + AutoTokenizer)")
    dim: int = Field(32, ge=1, description="size of the instruction embedding")
    buckets: int = Field(1024, ge=16, description="token embedding: rows the words are hashed into")
    max_tokens: int = Field(16, ge=1, le=512, description="instruction tokens kept")
    trainable: bool = Field(
        True, description="a text model folder: train its weights (false: frozen, or LoRA only)"
    )


class WarmStartConfig(ConfigSection):
    """``model.warm_start`` (vla, with ``predict_privileged``): before RL, fit the encoder and the
    auxiliary head to the env's ``privileged`` entry on frames collected with random actions
    (:mod:`rlinf_algos.perception`). Only training reads that entry; the policy acts from images,
    state and words."""

    model_config = STRICT

    frames: int = Field(12_000, ge=1, description="observations to collect (random actions)")
    episode_steps: int = Field(
        6, ge=1, description="steps per collection episode: each episode is a fresh scene"
    )
    actions: Literal["random", "expert", "shuffled", "decoy"] = Field(
        "random",
        description="what moves the arm while frames are collected. random: uniform random actions; "
        "expert: the env's scripted demonstrator (its expert_action() method, e.g. a straight reach "
        "towards the named target) plus expert_noise, so the frames show the arm where a good "
        "policy takes it (but its motion gives the target away: the fit learns to follow the hand, "
        "not to find the cube); shuffled: sub-env i takes sub-env i - 1's expert action (plus "
        "expert_noise), replayed open loop on an arm that is elsewhere: expert-sized motions over the "
        "workspace that say nothing of its own scene's target (needs env.num_envs of 2 or more); "
        "decoy: each episode the demonstrator heads for one of the scene's candidate targets chosen "
        "at random (the env's candidate_actions(): every cube of the reach task), plus expert_noise, "
        "so the hand hovers over cubes and the one under it is the named one only by chance",
    )
    expert_noise: float = Field(
        0.5,
        ge=0.0,
        description="actions expert, shuffled and decoy: standard deviation of the Gaussian noise added "
        "to them",
    )
    action_hold: int = Field(
        1,
        ge=1,
        description="steps each random action is held: a longer straight motion takes the arm further "
        "from its start, so more frames show it near (and in front of) what it must find",
    )
    epochs: int = Field(12, ge=1, description="passes over the frames (a tenth of the scenes held out)")
    batch_size: int = Field(128, ge=1, description="frames per gradient step")
    lr: float = Field(1e-3, gt=0.0, description="Adam learning rate of the warm start (decayed to 0, cosine)")
    image_shift: int = Field(
        0,
        ge=0,
        description="shift every training image by up to this many pixels (DrQ's random shift, edge "
        "replicated, a fresh offset per frame, camera and epoch); 0 turns it off",
    )


class ModelConfig(ConfigSection):
    """``model`` section: which model type and its sizes. ``null`` sizes pick the algorithm's
    default (64x64 tanh for PPO and GRPO, 256x256 relu for SAC)."""

    model_config = STRICT

    type: str = Field(
        "mlp",
        min_length=1,
        description="a registered model type (rlinf_register_models; `rlinf plugins` lists them); "
        "rlinf-algos ships mlp",
    )
    hidden_sizes: list[int] | None = Field(
        None, min_length=1, description="hidden layer widths of every network (null: the algorithm's default)"
    )
    activation: Literal["tanh", "relu", "elu", "silu"] | None = Field(
        None, description="hidden activation (null: the algorithm's default)"
    )
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

    critic_input: Literal["features", "privileged"] = Field(
        "features",
        description="vla: what the value head (SAC: the twin critics) reads. features: the encoder's output (shared with "
        "the policy). privileged: the state and the env's 'privileged' observation entry, an "
        "asymmetric actor-critic; the policy still acts from images, state and words",
    )
    predict_privileged: float = Field(
        0.0,
        ge=0.0,
        description="vla, PPO: weight of an auxiliary loss in which an MLP head on the encoder's "
        "features predicts the env's 'privileged' observation entry (squared error; the policy and "
        "value heads read the prediction too); 0: none",
    )
    encoder_loss: Literal["all", "auxiliary"] = Field(
        "all",
        description="vla, PPO: which losses train the encoder. all: the policy, value and auxiliary "
        "losses; auxiliary: the auxiliary loss of predict_privileged alone (the heads read the features "
        "detached: perception by supervision, control by RL)",
    )
    warm_start: WarmStartConfig | None = Field(
        None,
        description="vla, with predict_privileged: a supervised perception warm start before RL (null: none)",
    )
    vision: VisionConfig | None = Field(None, description="vla: the image encoder (null: the CNN)")
    language: LanguageConfig | None = Field(
        None, description="vla: the instruction encoder (null: token embedding)"
    )
    lora: LoraConfig | None = Field(
        None, description="vla: peft LoRA adapters on the encoder folders (the heads train in full)"
    )

    @model_validator(mode="after")
    def _positive(self) -> ModelConfig:
        if self.hidden_sizes is not None and any(h < 1 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive layer widths, got {self.hidden_sizes}")
        extra = [k for k in ("vision", "language", "lora") if getattr(self, k) is not None]
        if extra and self.type == "mlp":
            raise ValueError(f"{', '.join(extra)} configure the encoders of model.type vla; an mlp has none")
        if (self.critic_input != "features" or self.predict_privileged) and self.type == "mlp":
            raise ValueError(
                "critic_input privileged and predict_privileged are for model.type vla (dict "
                "observations with a 'privileged' entry); an mlp reads one observation vector"
            )
        if self.encoder_loss != "all" and not (self.type == "vla" and self.predict_privileged > 0):
            raise ValueError(
                "encoder_loss auxiliary trains the encoder with the auxiliary loss of predict_privileged "
                f"alone: it needs model.type vla and predict_privileged above 0 (got type {self.type!r}, "
                f"predict_privileged {self.predict_privileged})"
            )
        if self.warm_start is not None and not (self.type == "vla" and self.predict_privileged > 0):
            raise ValueError(
                "warm_start fits the auxiliary head of predict_privileged: it needs model.type vla "
                f"and predict_privileged above 0 (got type {self.type!r}, predict_privileged "
                f"{self.predict_privileged})"
            )
        return self


class RunnerConfig(ConfigSection):
    """``runner`` section as the in-process runner reads it."""

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
        description="torch device of the learner: cpu, cuda, cuda:N, or auto (the first GPU the placement "
        "gives the actor process, else the CPU); a CUDA device the placement does not give is an error",
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
        300.0, gt=0.0, description="seconds a worker waits on a channel before reporting what it waited for"
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
    """``rollout`` section: how the workers (``runner.scheduler: ray``) pipeline env stepping,
    inference and learning. The in-process runtime ignores it."""

    model_config = STRICT

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
    model: ModelConfig
    runner: RunnerConfig
    rollout: RolloutConfig
    actor: ActorConfig = ActorConfig()


def _as_mapping(obj: Any) -> Any:
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
        sections[name] = _as_mapping(sections[name])
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
    """:func:`load_sections` plus the ``rollout`` and ``actor`` sections (optional), every
    problem at once."""
    problems: list[ConfigProblem] = []
    try:
        env, model, runner = load_sections(run_config)
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
    """Whether ``env.id`` is a registered gymnasium id (plugin ids included) whose constructor
    takes the keys of ``env.kwargs``; imports gymnasium."""
    env = run_config.get("env") if isinstance(run_config, Mapping) else None
    env_id = env.get("id") if isinstance(env, Mapping) else None
    if not isinstance(env_id, str) or not env_id:
        return []
    from rlinf_algos.envs import ensure_registered, env_kwargs_problems, wrapper_problems

    wrappers = env.get("wrappers")
    problems = wrapper_problems(wrappers) if isinstance(wrappers, list) else []
    try:
        ensure_registered(env_id)
    except ConfigError as err:
        return list(err.problems) + problems
    return env_kwargs_problems(env_id, env.get("kwargs")) + problems

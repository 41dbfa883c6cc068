"""The options of ``model.type: vla`` (:class:`VLAModelConfig`): the encoders of camera images
and instructions, LoRA on encoder folders, the privileged critic and auxiliary head, and the
perception warm start. Light (pydantic and rlinf_core only); the networks are
:mod:`rlinf_algos.models.vla`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlinf_algos.models.config import LoraConfig, ModelConfig
from rlinf_core.config import ConfigSection

__all__ = ["LanguageConfig", "VLAModelConfig", "VisionConfig", "WarmStartConfig"]


class VisionConfig(ConfigSection):
    """``model.vision`` (``type: vla``): the image encoder. A small CNN whose last feature maps
    the instruction modulates (FiLM) and a spatial softmax turns into image coordinates, or a
    ``transformers`` vision model from a folder."""

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


class VLAModelConfig(ModelConfig):
    """``model`` section of ``type: vla``: policies over dict observations (camera images, state,
    instruction) with vision and language encoders, on top of every embodied model's keys."""

    type: str = Field(
        "vla",
        min_length=1,
        description="a registered model type (rlinf_register_models; `rlinf plugins` lists them); "
        "rlinf-algos ships mlp and vla",
    )
    critic_input: Literal["features", "privileged"] = Field(
        "features",
        description="what the value head (SAC: the twin critics) reads. features: the encoder's output (shared with "
        "the policy). privileged: the state and the env's 'privileged' observation entry, an "
        "asymmetric actor-critic; the policy still acts from images, state and words",
    )
    predict_privileged: float = Field(
        0.0,
        ge=0.0,
        description="PPO: weight of an auxiliary loss in which an MLP head on the encoder's "
        "features predicts the env's 'privileged' observation entry (squared error; the policy and "
        "value heads read the prediction too); 0: none",
    )
    encoder_loss: Literal["all", "auxiliary"] = Field(
        "all",
        description="PPO: which losses train the encoder. all: the policy, value and auxiliary "
        "losses; auxiliary: the auxiliary loss of predict_privileged alone (the heads read the features "
        "detached: perception by supervision, control by RL)",
    )
    warm_start: WarmStartConfig | None = Field(
        None,
        description="with predict_privileged: a supervised perception warm start before RL (null: none)",
    )
    vision: VisionConfig | None = Field(None, description="the image encoder (null: the CNN)")
    language: LanguageConfig | None = Field(
        None, description="the instruction encoder (null: token embedding)"
    )
    lora: LoraConfig | None = Field(
        None, description="peft LoRA adapters on the encoder folders (the heads train in full)"
    )

    @model_validator(mode="after")
    def _auxiliary(self) -> VLAModelConfig:
        if self.encoder_loss != "all" and not self.predict_privileged > 0:
            raise ValueError(
                "encoder_loss auxiliary trains the encoder with the auxiliary loss of predict_privileged "
                f"alone: it needs predict_privileged above 0 (got {self.predict_privileged})"
            )
        if self.warm_start is not None and not self.predict_privileged > 0:
            raise ValueError(
                "warm_start fits the auxiliary head of predict_privileged: it needs predict_privileged "
                f"above 0 (got {self.predict_privileged})"
            )
        return self

    def spec_options(self) -> dict[str, Any]:
        """The encoder sections that are set, and ``critic_input`` / ``predict_privileged`` /
        ``encoder_loss`` when they differ from their defaults (so specs written before these
        options existed stay as they were)."""
        out: dict[str, Any] = {
            k: v.model_dump() for k in ("vision", "language", "lora") if (v := getattr(self, k)) is not None
        }
        if self.critic_input != "features":
            out["critic_input"] = self.critic_input
        if self.predict_privileged:
            out["predict_privileged"] = float(self.predict_privileged)
        if self.encoder_loss != "all":
            out["encoder_loss"] = self.encoder_loss
        return out

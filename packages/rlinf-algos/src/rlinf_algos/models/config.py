"""The ``model`` section's base models: what every model type of a family of algorithms takes.

Light (pydantic and rlinf_core only). A model type (:class:`rlinf_core.model.ModelType`)
declares the model of its ``model`` section in ``config_model``: a subclass of its family's base
that adds the type's own options. The embodied algorithms' base is :class:`ModelConfig` (``mlp``
uses it as it is; ``vla`` extends it in :mod:`rlinf_algos.models.vla_config`); the language-model
algorithms' base is :class:`rlinf_algos.lm.config.LMModelConfig` (``hf``).
:func:`rlinf_algos.models.validate_model_section` picks the model by ``model.type``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlinf_core.config import ConfigSection

__all__ = ["BCConfig", "LoraConfig", "ModelConfig"]


class BCConfig(ConfigSection):
    """``model.bc``: before RL, fit the policy to demonstrations by behaviour cloning (RLinf's
    SFT-then-RL recipe; :mod:`rlinf_algos.bc`): the action mean to the demonstrated actions
    (mean squared error), the observation statistics to the demonstrations' states. The result is
    written as ``warm_start.safetensors`` and RL starts from it."""

    demos: str = Field(
        min_length=1,
        description="the data set folder `rlinf demos record` wrote (LeRobot layout: meta/, data/)",
    )
    epochs: int = Field(
        30, ge=1, description="passes over the demonstrations (a tenth of the episodes held out)"
    )
    batch_size: int = Field(256, ge=1, description="steps per gradient step")
    lr: float = Field(1e-3, gt=0.0, description="Adam learning rate (decayed to 0, cosine)")
    steps: Literal["all", "until_solved"] = Field(
        "all",
        description="which demonstrated steps the clone is fitted on: `all`; `until_solved`, each episode's "
        "steps up to the one that first solves its task (the data set's next.success): the clone does not "
        "learn an expert's overshoot past the goal (MetaWorld's door-open-v3), as algorithm.bc_steps does "
        "for the term during RL",
    )
    log_std: float | None = Field(
        -1.0, description="the policy's log standard deviation after the fit (null: leave log_std_init)"
    )
    obs_norm: Literal["frozen", "running"] = Field(
        "frozen",
        description="the observation statistics the clone was fitted under, during RL: frozen keeps them "
        "(the clone's inputs stay what it learned on); running folds in every batch as a fresh policy "
        "does (RL's states then move the inputs of the cloned weights)",
    )


class LoraConfig(ConfigSection):
    """``model.lora``: peft LoRA adapters (on a language model's policy; on a VLA policy's
    encoders). Only the adapters train there, and only they travel at each weight sync."""

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


class ModelConfig(ConfigSection):
    """``model`` section of the embodied algorithms (``ppo``, ``sac``, ``grpo``): which model type,
    and the sizes and heads every type's networks take. ``null`` sizes pick the algorithm's
    default (64x64 tanh for PPO and GRPO, 256x256 relu for SAC). A model type with options of its
    own validates the section with a subclass (``ModelType.config_model``); the options reach its
    ``build(spec)`` through :meth:`spec_options`."""

    type: str = Field(
        "mlp",
        min_length=1,
        description="a registered model type (rlinf_register_models; `rlinf plugins` lists them); "
        "rlinf-algos ships mlp and vla",
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

    bc: BCConfig | None = Field(
        None,
        description="behaviour cloning on demonstrations before RL (demos, epochs, batch_size, lr, log_std, obs_norm)",
    )

    @model_validator(mode="after")
    def _positive(self) -> ModelConfig:
        if self.hidden_sizes is not None and any(h < 1 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive layer widths, got {self.hidden_sizes}")
        return self

    def spec_options(self) -> dict[str, Any]:
        """The model type's own options, as the policy spec carries them to ``build(spec)``: every
        field a subclass adds to this base, as JSON-ready data (none for ``mlp``). A type may
        override it (``vla`` leaves options at their defaults out, so older specs stay as they
        were)."""
        own = [k for k in type(self).model_fields if k not in ModelConfig.model_fields]
        return self.model_dump(mode="json", include=set(own)) if own else {}

"""The ``algorithm`` section of a ``grpo`` run (pydantic only: the plugin imports it without torch)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from rlinf_algos.config import STRICT
from rlinf_algos.objectives import AGGREGATION_HELP, Aggregation, registered_name
from rlinf_core.config import ConfigSection

__all__ = ["GRPOConfig", "SuccessBandConfig"]


class SuccessBandConfig(ConfigSection):
    """``algorithm.success_band`` (embodied GRPO): keep only the groups whose success rate lies in
    ``[low, high]`` (SimpleVLA-RL's filter); an episode succeeds when its return reaches
    ``success_return``."""

    model_config = STRICT

    low: float = Field(0.1, ge=0.0, le=1.0, description="lowest group success rate kept")
    high: float = Field(0.9, ge=0.0, le=1.0, description="highest group success rate kept")
    success_return: float = Field(..., description="an episode whose return is at least this succeeded")

    @model_validator(mode="after")
    def _ordered(self) -> Any:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self


class GRPOConfig(ConfigSection):
    """``algorithm`` section for ``name: grpo``: group-relative advantages, no critic."""

    model_config = STRICT

    name: Literal["grpo"] = Field("grpo", description="selects this algorithm")
    group_size: int = Field(8, ge=2, description="samples (episodes) per group")
    num_groups: int = Field(4, ge=1, description="groups per iteration")
    lr: float = Field(3e-4, gt=0.0, description="Adam learning rate")
    adam_eps: float = Field(1e-5, gt=0.0, description="Adam epsilon")
    update_epochs: int = Field(4, ge=1, description="passes over each iteration's episodes")
    minibatch_size: int = Field(256, ge=1, description="steps per gradient step")
    clip_low: float = Field(0.2, ge=0.0, lt=1.0, description="ratio may fall to 1 - clip_low")
    clip_high: float = Field(0.2, ge=0.0, description="ratio may rise to 1 + clip_high")
    kl_coef: float = Field(0.0, ge=0.0, description="weight of the k3 KL to the reference policy")
    scale_advantages: bool = Field(True, description="divide by the group std (false: Dr. GRPO)")
    max_grad_norm: float | None = Field(0.5, gt=0.0, description="global gradient-norm clip, or null")
    adv_estimator: str = Field(
        "grpo", description="registered advantage estimator: grpo, dr_grpo, rloo, reinforce_plus_plus"
    )
    policy_loss: str = Field("ppo_clip", description="registered policy loss: ppo_clip, dapo, gspo")
    aggregation: Aggregation | None = Field(None, description=AGGREGATION_HELP)
    loss_norm_length: int | None = Field(
        None,
        ge=1,
        description="the constant C of seq-mean-token-sum-norm (Dr. GRPO); null: the longest episode",
    )
    success_band: SuccessBandConfig | None = Field(
        None, description="train only on groups whose success rate lies in [low, high]; null: every group"
    )

    critic_estimators: ClassVar[bool] = False
    _registered = field_validator("adv_estimator", "policy_loss")(registered_name)

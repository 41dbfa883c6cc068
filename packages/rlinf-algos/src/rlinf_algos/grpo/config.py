"""The ``algorithm`` section of a ``grpo`` run (pydantic only: the plugin imports it without torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlinf_algos.config import STRICT
from rlinf_core.config import ConfigSection

__all__ = ["GRPOConfig"]


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
    aggregation: Literal["token-mean", "seq-mean-token-mean"] = Field(
        "token-mean", description="average the loss over all valid steps, or per episode then over episodes"
    )

"""The ``algorithm`` section of a ``sac`` run (pydantic only: the plugin imports it without torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlinf_algos.config import STRICT
from rlinf_core.config import ConfigSection

__all__ = ["SACConfig"]


class SACConfig(ConfigSection):
    """``algorithm`` section for ``name: sac``. Defaults follow CleanRL's ``sac_continuous_action``
    and SB3 (one gradient step per env step)."""

    model_config = STRICT

    name: Literal["sac"] = Field("sac", description="selects this algorithm")
    gamma: float = Field(0.99, ge=0.0, le=1.0, description="discount")
    tau: float = Field(0.005, gt=0.0, le=1.0, description="Polyak rate of the target critics")
    batch_size: int = Field(256, ge=1, description="transitions per gradient step")
    buffer_size: int = Field(1_000_000, ge=1, description="replay buffer capacity (transitions)")
    learning_starts: int = Field(
        5_000, ge=0, description="env steps of uniform random actions before learning"
    )
    actor_lr: float = Field(3e-4, gt=0.0, description="Adam learning rate of the actor")
    critic_lr: float = Field(1e-3, gt=0.0, description="Adam learning rate of the twin critics")
    alpha_lr: float = Field(1e-3, gt=0.0, description="Adam learning rate of the temperature")
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
    image_shift: int = Field(
        4,
        ge=0,
        le=32,
        description="dict observations: shift every sampled image by up to this many pixels (DrQ's "
        "random-shift augmentation, on the critic's and the actor's batches); 0 turns it off",
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

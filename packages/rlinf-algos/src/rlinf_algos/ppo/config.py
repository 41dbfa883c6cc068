"""The ``algorithm`` section of a ``ppo`` run (pydantic only: the plugin imports it without torch)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from rlinf_algos.config import STRICT
from rlinf_algos.objectives import registered_name
from rlinf_core.config import ConfigSection

__all__ = ["PPOConfig"]


class PPOConfig(ConfigSection):
    """``algorithm`` section for ``name: ppo``. Defaults follow CleanRL's ``ppo_continuous_action``
    (the issue's HalfCheetah benchmark settings, with 8 environments)."""

    model_config = STRICT

    name: Literal["ppo"] = Field("ppo", description="selects this algorithm")
    gamma: float = Field(0.99, ge=0.0, le=1.0, description="discount")
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda")
    adv_estimator: str = Field("gae", description="registered advantage estimator of a critic: gae")
    policy_loss: str = Field(
        "ppo_clip",
        description="registered policy loss of single steps: ppo_clip, dapo (gspo reads whole sequences: "
        "grpo, grpo_lm, ppo_lm)",
    )
    lr: float = Field(3e-4, gt=0.0, description="Adam learning rate")
    anneal_lr: bool = Field(True, description="decay the learning rate linearly to 0 over the run")
    adam_eps: float = Field(1e-5, gt=0.0, description="Adam epsilon")
    rollout_steps: int = Field(
        256, ge=1, description="steps per env per iteration (batch = rollout_steps * env.num_envs)"
    )
    minibatch_size: int = Field(
        64, ge=1, description="samples per gradient step (the last partial one dropped)"
    )
    update_epochs: int = Field(10, ge=1, description="passes over each batch")
    clip_low: float = Field(0.2, ge=0.0, lt=1.0, description="ratio may fall to 1 - clip_low")
    clip_high: float = Field(0.2, ge=0.0, description="ratio may rise to 1 + clip_high")
    dual_clip: float | None = Field(None, gt=1.0, description="dual-clip constant c > 1, or null")
    value_clip: float | None = Field(0.2, gt=0.0, description="PPO2 value clipping range, or null")
    ent_coef: float = Field(0.0, ge=0.0, description="weight of the entropy bonus")
    vf_coef: float = Field(0.5, ge=0.0, description="weight of the value loss")
    max_grad_norm: float | None = Field(0.5, gt=0.0, description="global gradient-norm clip, or null")
    critic_warmup: int = Field(
        0,
        ge=0,
        description="updates that train the critic alone before the policy moves (a warm-started policy "
        "keeps what it learned while the value function catches up; RLinf's critic warm-up)",
    )
    bc_coef: float = Field(
        0.0,
        ge=0.0,
        description="weight of a behaviour-cloning term on the demonstrations of model.bc.demos in every "
        "policy minibatch's loss (mean ||mu(s) - a||^2 over minibatch_size demonstrated steps; DAPG's "
        "demo-augmented policy gradient): keeps a cloned policy's solved tasks while RL moves it",
    )
    bc_decay_updates: int | None = Field(
        None,
        ge=1,
        description="policy updates (after the critic warm-up) over which bc_coef decays linearly to 0 "
        "(null: it stays)",
    )
    bc_sampling: Literal["uniform", "per_task"] = Field(
        "uniform",
        description="how the behaviour-cloning term draws demonstrated steps: `uniform`, every step alike; "
        "`per_task`, each task's steps as often as another task's (a task with few demonstrations, "
        "MetaWorld MT10's push-v3 with 4 of 80, gets as much of the term as one with many)",
    )
    bc_steps: Literal["all", "until_solved"] = Field(
        "all",
        description="which demonstrated steps the behaviour-cloning term draws from: `all`; "
        "`until_solved`, each episode's steps up to the one that first solves its task (the data set's "
        "next.success): an expert that solves and then overshoots (MetaWorld's door-open-v3) no longer "
        "teaches RL to overshoot, and what the policy does once the task is solved is left to the reward",
    )
    anchor_coef: float = Field(
        0.0,
        ge=0.0,
        description="weight of a term holding the policy's action mean near that of the policy RL started "
        "from (a warm start), on the batch's own states: mean ||mu(s) - mu_0(s)||^2 (a KL to the starting "
        "policy at equal std). Where the behaviour-cloning term holds the policy on the demonstrations' "
        "states, this holds it on the states it visits, so tasks it already solves stay solved while "
        "the advantages move the others",
    )
    target_kl: float | None = Field(
        None, gt=0.0, description="stop an update's epochs once approx KL exceeds it"
    )
    normalize_advantages: bool = Field(True, description="normalise advantages within each minibatch")
    normalize_obs: bool = Field(
        True, description="running mean/std observation normalisation (statistics travel with the weights)"
    )
    obs_norm_steps: int | None = Field(
        None,
        ge=1,
        description="fold RL's observations into the running statistics only until they hold this many "
        "steps, then keep them (null: throughout the run); a policy is tuned to the statistics it trained "
        "under, and each later change of them moves its actions",
    )
    normalize_reward: bool = Field(True, description="scale rewards by the std of the discounted return")
    norm_scope: Literal["batch", "slot"] = Field(
        "batch",
        description="what the reward scale and the advantage normalisation pool: `batch`, every env slot "
        "together (the reward scale over all slots, advantages within each minibatch); `slot`, each env "
        "slot on its own (its own reward scale; its advantages normalised over the rollout before "
        "minibatching). A suite (MetaWorld MT10, LIBERO) runs one task per slot, so `slot` is per-task "
        "normalisation: tasks whose returns vary more no longer drown the others' signal (PopArt's "
        "argument, Hessel et al. 2019)",
    )

    critic_estimators: ClassVar[bool] = True
    sequence_losses: ClassVar[bool] = False  # each sample is one step of a random minibatch
    _registered = field_validator("adv_estimator", "policy_loss")(registered_name)

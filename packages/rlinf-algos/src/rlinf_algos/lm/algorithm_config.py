"""The ``algorithm`` section of a language-model run (``grpo_lm``, ``ppo_lm``): pydantic and
rlinf_core only (re-exported by :mod:`rlinf_algos.lm.config`, which holds the other sections)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from rlinf_algos.objectives import AGGREGATION_HELP, Aggregation, registered_name
from rlinf_core.config import ConfigSection

__all__ = [
    "ASK_DESCRIPTION",
    "DynamicSamplingConfig",
    "LMGRPOConfig",
    "LMPPOConfig",
    "OverlongConfig",
    "SubagentsConfig",
]

_STRICT = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


ASK_DESCRIPTION = (
    "Ask a subagent one self-contained question. The subagent searches in a context of its own "
    "and answers; its answer comes back as this call's result."
)
"""The default description of the lead's subagent tool (what its schema says)."""


class SubagentsConfig(ConfigSection):
    """``algorithm.subagents``: a lead agent whose tool is a subagent (WideSeek-R1's shape, seed
    003). The lead's episodes (the ``data`` prompts) may call ``tool`` (``ask(question)``) in
    their chat template's tool-call format; each call plays a subagent episode with the same
    policy in a fresh context (its own user message, the question; its own tools and limits)
    whose final answer comes back to the lead as the call's ``tool`` message. Calls of one turn
    run concurrently, their turns batched with every other episode's. The lead's and every
    subagent's sequences are trained on, sharing the lead's reward and group advantage
    (:mod:`rlinf_algos.lm.agentic.subagents`)::

        algorithm:
          subagents: {tool: ask, tools: [search], max_turns: 3, max_response_tokens: 256}
    """

    model_config = _STRICT

    tool: str = Field(
        "ask",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the name of the lead's tool that starts a subagent (its one argument: question)",
    )
    description: str = Field(
        ASK_DESCRIPTION,
        min_length=1,
        description="the tool's description in the schema the lead's chat template renders (keep it equal "
        "to the warm start's traces)",
    )
    tools: list[str] | None = Field(
        None,
        description="the tools (names of the tools section's tools) a subagent may call; null: all of them",
    )
    lead_tools: list[str] = Field(
        default_factory=list,
        description="tools of the tools section the lead may also call itself; default none (the lead only "
        "delegates)",
    )
    max_calls: int = Field(
        4, ge=1, description="subagent calls per lead episode; later calls are answered with an error"
    )
    max_turns: int = Field(3, ge=1, description="assistant turns a subagent episode may take")
    max_new_tokens: int | None = Field(
        None, ge=1, description="sampled ids per subagent turn; null: algorithm.max_new_tokens"
    )
    max_response_tokens: int | None = Field(
        None,
        ge=1,
        description="token budget of a subagent episode (sampled and inserted ids after its prompt); null: "
        "up to the model's context",
    )


class DynamicSamplingConfig(ConfigSection):
    """``algorithm.dynamic_sampling`` (DAPO, Yu et al. 2025, section 3.2): when fewer than
    ``prompts_per_iter`` groups of an iteration have unequal rewards (the others carry no
    gradient), draw ``prompts_per_iter`` more prompts and sample them, up to ``max_draws`` extra
    times, before the update; the update then takes ``prompts_per_iter`` groups with unequal
    rewards (or all it found)."""

    model_config = _STRICT

    max_draws: int = Field(
        3, ge=1, le=64, description="extra draws of prompts_per_iter prompts an iteration may take"
    )


class OverlongConfig(ConfigSection):
    """``algorithm.overlong`` (DAPO's soft overlong punishment, Yu et al. 2025, eq. 13): a
    response of ``n`` generated tokens gets, added to its reward, 0 while
    ``n <= max_length - cache``, ``(max_length - cache - n) / cache * penalty`` in the last
    ``cache`` tokens, and ``-penalty`` beyond ``max_length``."""

    model_config = _STRICT

    max_length: int = Field(
        ..., ge=1, description="L_max: generated tokens of an episode at which the full penalty applies"
    )
    cache: int = Field(..., ge=1, description="L_cache: the soft-penalty interval before max_length")
    penalty: float = Field(1.0, ge=0.0, description="the penalty at max_length")

    @model_validator(mode="after")
    def _fits(self) -> OverlongConfig:
        if self.cache > self.max_length:
            raise ValueError(f"cache ({self.cache}) must not exceed max_length ({self.max_length})")
        return self


class LMGRPOConfig(ConfigSection):
    """``algorithm`` section for ``name: grpo_lm``: GRPO on a language policy with a verifier.

    One iteration samples ``group_size`` responses (or, in multi-agent mode, hierarchical
    episodes) for each of ``prompts_per_iter`` prompts, scores them, normalises the rewards
    within each group and takes ``update_epochs`` passes of minibatch updates.
    """

    model_config = _STRICT
    actor: ClassVar[str] = "rlinf_algos.lm.learner:LMLearner"
    """The actor component's class (``module:Class``): what runs this algorithm's update."""

    name: Literal["grpo_lm"] = "grpo_lm"
    group_size: int = Field(8, ge=2, description="responses (episodes) sampled per prompt")
    prompts_per_iter: int = Field(32, ge=1, description="prompts (groups) per iteration")
    iterations: int = Field(100, ge=1, description="GRPO iterations (the training budget)")
    lr: float = Field(2e-4, gt=0.0, description="AdamW learning rate")
    lr_warmup_iters: int = Field(
        5,
        ge=0,
        description="iterations of linear learning-rate warm-up (a fresh Adam's first steps are sign steps)",
    )
    weight_decay: float = Field(0.0, ge=0.0)
    update_epochs: int = Field(1, ge=1, description="passes over each iteration's batch")
    minibatch_size: int = Field(256, ge=1, description="sequences per gradient step")
    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    clip_high: float = Field(0.28, ge=0.0, description="clip-higher (DAPO) when above clip_low")
    kl_coef: float = Field(0.01, ge=0.0, description="weight of the k3 KL to the frozen reference")
    scale_advantages: bool = Field(True, description="divide by the group std (false: Dr. GRPO)")
    adv_estimator: str = Field(
        "grpo",
        description="registered advantage estimator: grpo, dr_grpo, rloo, reinforce_plus_plus (ppo_lm: gae)",
    )
    policy_loss: str = Field("ppo_clip", description="registered policy loss: ppo_clip, dapo, gspo")
    aggregation: Aggregation | None = Field(None, description=AGGREGATION_HELP)
    loss_norm_length: int | None = Field(
        None,
        ge=1,
        description="the constant C of seq-mean-token-sum-norm (Dr. GRPO's generation budget); null: the "
        "iteration batch's padded length",
    )
    dynamic_sampling: DynamicSamplingConfig | None = Field(
        None,
        description="DAPO's dynamic sampling: draw more prompts until the groups with unequal rewards fill the batch",
    )
    overlong: OverlongConfig | None = Field(None, description="DAPO's soft overlong punishment; null: none")
    max_grad_norm: float | None = Field(1.0, gt=0.0)
    skip_uniform_groups: bool = Field(
        True,
        description="leave groups whose rewards are all equal (zero advantage) out of the update (DAPO's filter)",
    )
    temperature: float = Field(1.0, gt=0.0, description="rollout sampling temperature")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="rollout nucleus sampling")
    max_new_tokens: int | None = Field(
        None,
        ge=1,
        description="cap on generated tokens per agent turn; null: the task's longest solution + 8",
    )
    max_turns: int = Field(
        4,
        ge=1,
        description="assistant turns an episode of a tools run may take (the last turn's tool calls are not "
        "run); only with a tools section",
    )
    max_response_tokens: int | None = Field(
        None,
        ge=1,
        description="token budget of an episode of a tools run: sampled plus inserted (tool results, turn "
        "markers) ids after the prompt, all turns together; null: up to the model's context",
    )
    subagents: SubagentsConfig | None = Field(
        None,
        description="a lead agent whose tool plays subagent episodes with the same policy in contexts of "
        "their own (WideSeek-R1; only with a tools section); null: single-agent episodes",
    )
    share_prefix: bool = Field(
        True,
        description="run each distinct prompt once per forward and only the completions on top of its "
        "key/value cache (the same log-probs and gradients as the packed forward; off: the packed rows "
        "whole, as TRL and verl do). Not with learner.strategy fsdp",
    )

    behaviour_weight_cap: float = Field(
        5.0,
        gt=0.0,
        description="C of decoupled PPO's truncated importance weight min(pi_prox / pi_behav, C) on a sample "
        "a stale policy generated (only with rollout.max_staleness > 0)",
    )

    critic_estimators: ClassVar[bool] = False
    off_policy: ClassVar[bool] = True
    """Whether its learner trains on stale samples (``rollout.max_staleness > 0``: the behaviour
    log-probs, decoupled PPO)."""
    _registered = field_validator("adv_estimator", "policy_loss")(registered_name)


class LMPPOConfig(LMGRPOConfig):
    """``algorithm`` section for ``name: ppo_lm``: PPO on a language policy with a learned critic.

    The critic is a value head on a model of the same architecture (``critic`` section). Each
    response's reward is given at its last token; advantages are token-level GAE over the
    generated tokens (``gamma``, ``lam``), whitened over the batch; the policy takes the clipped
    ratio loss (with the k3 KL to the reference when ``kl_coef > 0``), the critic a clipped value
    loss. ``group_size`` responses per prompt (1 is plain PPO).
    """

    actor: ClassVar[str] = "rlinf_algos.lm.ppo:PPOLMLearner"

    name: Literal["ppo_lm"] = "ppo_lm"  # type: ignore[assignment]
    group_size: int = Field(1, ge=1, description="responses sampled per prompt")
    gamma: float = Field(1.0, gt=0.0, le=1.0, description="discount over generated tokens")
    lam: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda")
    value_clip: float | None = Field(0.2, gt=0.0, description="PPO2 value clipping (null: none)")
    whiten_advantages: bool = Field(True, description="normalise advantages over the batch's tokens")
    skip_uniform_groups: bool = Field(
        False, description="leave groups whose rewards are all equal out (a GRPO filter; off for PPO)"
    )
    adv_estimator: str = Field("gae", description="registered advantage estimator of a critic: gae")

    critic_estimators: ClassVar[bool] = True

    @field_validator("dynamic_sampling")
    @classmethod
    def _no_dynamic_sampling(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("a grpo_lm option (ppo_lm learns from every group): leave it out")
        return value

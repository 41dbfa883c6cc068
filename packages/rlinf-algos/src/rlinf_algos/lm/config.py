"""Configuration models of the LLM GRPO examples (``examples/grpo_arith.yaml``,
``examples/grpo_multiagent.yaml``).

Light on purpose: pydantic and rlinf_core only, so a driver (or the ``rlinf train`` runner) can
validate a YAML without torch. The sections:

===============  =========================  ==================================================
YAML section     model                      what it holds
===============  =========================  ==================================================
``algorithm``    :class:`LMGRPOConfig`      GRPO options (``name: grpo_lm``): group size,
                                            prompts per iteration, clip, KL, learning rate...
``model``        :class:`LMModelConfig`     the causal transformer's sizes
``task``         :class:`ArithTaskConfig`   the arithmetic task family, its verifier and the
                                            multi-agent mode
``sft``          :class:`SFTConfig`         the supervised warm start the example runs first
``runner``       :class:`LMRunnerConfig`    budget, evaluation, seed, threads, checkpoints
===============  =========================  ==================================================

:func:`load_lm_sections` validates them all and reports every problem at once, each with its
YAML path (``task.num_terms``, ``algorithm.group_size``...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlinf_core.config import validate_model
from rlinf_core.errors import ConfigError, ConfigProblem

__all__ = [
    "ArithTaskConfig",
    "LMGRPOConfig",
    "LMModelConfig",
    "LMRunConfig",
    "LMRunnerConfig",
    "SFTConfig",
    "load_lm_sections",
]

_STRICT = ConfigDict(extra="forbid", validate_default=True)


class LMGRPOConfig(BaseModel):
    """``algorithm`` section for ``name: grpo_lm``: GRPO on a language policy with a verifier.

    One iteration samples ``group_size`` responses (or, in multi-agent mode, hierarchical
    episodes) for each of ``prompts_per_iter`` prompts, scores them, normalises the rewards
    within each group and takes ``update_epochs`` passes of minibatch updates.
    """

    model_config = _STRICT

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
    aggregation: Literal["token-mean", "seq-mean-token-mean"] = "token-mean"
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


class LMModelConfig(BaseModel):
    """``model`` section: a pre-norm causal transformer with RoPE and tied embeddings."""

    model_config = _STRICT

    d_model: int = Field(128, ge=8)
    n_layers: int = Field(4, ge=1)
    n_heads: int = Field(4, ge=1)
    d_ff: int | None = Field(None, ge=8, description="MLP width; null means 4 * d_model")
    max_seq_len: int = Field(256, ge=16, description="positions the RoPE table covers")
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    rope_base: float = Field(10000.0, gt=1.0)

    @model_validator(mode="after")
    def _heads_divide(self) -> LMModelConfig:
        if self.d_model % self.n_heads != 0 or (self.d_model // self.n_heads) % 2 != 0:
            raise ValueError(
                f"d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads}) with an even "
                "head size (RoPE rotates pairs)"
            )
        return self


class ArithTaskConfig(BaseModel):
    """``task`` section: sums of ``num_terms`` numbers of ``min_digits``..``max_digits`` digits,
    solved as a chain of two-operand steps, checked exactly.

    ``mode: single`` asks one agent for the sum. ``mode: multiagent`` (WideSeek-R1 style) asks for a
    sum of ``num_groups`` parenthesised groups: a lead agent splits it into sub-tasks, one
    subagent per group solves its own sum in an isolated context, and the lead sums their
    answers. ``mode: flat`` is the single-agent baseline on the same grouped problems: one agent
    holding the full context chains through every term.
    """

    model_config = _STRICT

    name: Literal["arith"] = "arith"
    mode: Literal["single", "multiagent", "flat"] = "single"
    num_terms: list[int] = Field(
        default_factory=lambda: [3, 4], min_length=1, description="terms per sum (per group), drawn uniformly"
    )
    min_digits: int = Field(2, ge=1, le=6)
    max_digits: int = Field(3, ge=1, le=6)
    num_groups: int = Field(3, ge=2, le=8, description="groups per problem in multiagent/flat mode")
    max_calls: int = Field(8, ge=1, description="subagent calls a lead may make before its episode fails")
    format_reward: float = Field(
        0.0, ge=0.0, lt=1.0, description="reward of well-formed output with a wrong answer (0 turns it off)"
    )
    eval_size: int = Field(256, ge=1, description="held-out problems")
    eval_seed: int = Field(12345, ge=0, description="seed of the held-out set (fixed across runs)")

    @model_validator(mode="after")
    def _ranges(self) -> ArithTaskConfig:
        if self.min_digits > self.max_digits:
            raise ValueError(f"min_digits ({self.min_digits}) must not exceed max_digits ({self.max_digits})")
        bad = [n for n in self.num_terms if n < 2 or n > 12]
        if bad:
            raise ValueError(f"num_terms must be between 2 and 12, got {bad}")
        return self


class SFTConfig(BaseModel):
    """``sft`` section: the supervised warm start on generated solutions. Deliberately short, so
    the policy GRPO starts from is sometimes right."""

    model_config = _STRICT

    steps: int = Field(300, ge=0, description="gradient steps (0 skips the warm start)")
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    warmup_steps: int = Field(20, ge=0)
    target_accuracy: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="stop early once greedy accuracy on a small validation draw (not the held-out set) reaches it",
    )
    carry_drop: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="the demonstrating teacher forgets each carry with this probability (0: a perfect "
        "teacher); the warm start then imitates a careless teacher, and the verifier's reward is what "
        "teaches the policy to carry every time",
    )
    answer_slip: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="the demonstrating teacher copies the last running sum into the answer as the "
        "scratchpad writes it (digits reversed) with this probability (0: never)",
    )
    slip_scope: Literal["final", "every"] = Field(
        "final",
        description="which chains answer_slip applies to: 'final', the chain whose answer the verifier "
        "reads (the lead's last turn in multiagent mode, the one chain otherwise), or 'every' chain "
        "(the subagents' too, so in multiagent mode the slips compound over the chains of a problem)",
    )
    check_interval: int = Field(50, ge=1, description="steps between target_accuracy checks")
    check_size: int = Field(64, ge=1, description="validation problems per target_accuracy check")
    init_checkpoint: str | None = Field(
        None, description="start from this saved policy instead of a fresh one (then SFT continues from it)"
    )


class LMRunnerConfig(BaseModel):
    """``runner`` section of the in-process GRPO loop."""

    model_config = _STRICT

    seed: int = Field(0, ge=0)
    torch_threads: int = Field(2, ge=1)
    eval_interval: int = Field(
        0, ge=0, description="iterations between held-out evaluations; 0: start and end only"
    )
    log_interval: int = Field(1, ge=1, description="iterations between log lines")
    checkpoint_interval: int = Field(0, ge=0, description="iterations between checkpoints; 0 turns them off")
    time_limit_s: float | None = Field(
        None, gt=0.0, description="stop GRPO early once this many seconds have passed since the start"
    )
    eval_temperature: float = Field(0.0, ge=0.0, description="0 is greedy decoding (the reported accuracy)")
    scheduler: str | None = Field(
        None,
        min_length=1,
        description="`local`: every component in the rlinf process; `ray` (or another registered "
        "scheduler): rollout, reward, reference, actor (and agent) workers placed by the `cluster` "
        "section, batches over Channels, weights through the broadcast; null: the algorithm's default",
    )
    worker_timeout: float = Field(
        600.0,
        gt=0.0,
        description="seconds the distributed runner waits on a worker or channel before saying which",
    )


class LMRunConfig(BaseModel):
    """The validated sections together."""

    algorithm: LMGRPOConfig
    model: LMModelConfig
    task: ArithTaskConfig
    sft: SFTConfig
    runner: LMRunnerConfig


_SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("algorithm", LMGRPOConfig),
    ("model", LMModelConfig),
    ("task", ArithTaskConfig),
    ("sft", SFTConfig),
    ("runner", LMRunnerConfig),
)


def load_lm_sections(run_config: Mapping[str, Any] | Any) -> LMRunConfig:
    """Validate the ``algorithm``, ``model``, ``task``, ``sft`` and ``runner`` sections of a run
    YAML (a mapping or an object with those attributes); a missing section takes its defaults,
    except ``algorithm`` whose ``name`` must be ``grpo_lm``. Every problem of every section is
    reported in one :class:`ConfigError` with its YAML path."""
    problems: list[ConfigProblem] = []
    out: dict[str, BaseModel] = {}
    for name, model in _SECTIONS:
        data = run_config.get(name) if isinstance(run_config, Mapping) else getattr(run_config, name, None)
        if isinstance(data, BaseModel):
            data = data.model_dump()
        if data is None:
            if name == "algorithm":
                problems.append(ConfigProblem(name, "missing section (needs at least `name: grpo_lm`)"))
                continue
            data = {}
        try:
            out[name] = validate_model(model, data, prefix=name)
        except ConfigError as err:
            problems.extend(err.problems)
    if problems:
        raise ConfigError(problems)
    return LMRunConfig(**out)

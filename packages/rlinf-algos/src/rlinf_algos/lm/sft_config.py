"""The configuration of ``rlinf sft`` (:mod:`rlinf_algos.lm.finetune`): its ``model``, ``data``,
``train``, ``runner`` and ``tools`` sections, validated without torch."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializeAsAny, model_validator

from rlinf_algos.lm.config import LMModelConfig, Loggers, ToolsConfig
from rlinf_algos.lm.data import DataConfig, detect_conversations
from rlinf_algos.models import validate_model_section
from rlinf_core.config import ConfigSection, validate_model
from rlinf_core.errors import ConfigError, ConfigProblem

__all__ = [
    "SFTDataConfig",
    "SFTRunConfig",
    "SFTRunnerConfig",
    "SFTTrainConfig",
    "load_sft_config",
]


class SFTDataConfig(DataConfig):
    """``data`` section of ``rlinf sft``: the files and keys of a GRPO run's ``data`` section
    (verl's parquet and RLinf's JSON lines load unchanged) and where each row's target response is.

    ``data.answer_key`` is read only when ``response_key`` is null; ``shuffle`` and ``seed`` give
    the order of the examples, ``max_prompt_length`` filters on the prompt alone (see also
    ``train.max_length``)."""

    response_key: str | None = Field(
        "response",
        min_length=1,
        description="dotted path to the target response (a string) of each row; null: train on "
        "the reference answer (data.answer_key), for data sets whose answers are the whole response",
    )
    messages_key: str | None = Field(
        None,
        min_length=1,
        description="the column of whole conversations (TRL's conversational format: a list of {role, "
        "content} messages, assistant ones with tool_calls, tool ones with the results); set, every "
        "assistant turn is trained on, the rest is context rendered by the chat template with the tools "
        "section's schemas (prompt_key and response_key are not read); null: `messages` when the first row "
        "has TRL's messages column (and no response_key column), as TRL detects it, else prompt-response rows",
    )
    tools_key: str | None = Field(
        None,
        min_length=1,
        description="with messages_key: the column of each conversation's own tool schemas (TRL's tools "
        "column: a list of {type: function, function: {name, description, parameters}}); a row that has it "
        "is rendered with those instead of the tools section's (a lead's and its subagents' traces in one "
        "data set); null: TRL's `tools` column when conversations' rows have one, else every conversation gets "
        "the tools section's",
    )
    assistant_only_loss: bool = Field(
        True,
        description="with data.messages_key: train on the assistant turns only (the tokens a played "
        "episode samples); false: on every token of the conversation after its first (system prompt, "
        "questions and tool results too, TRL's SFTConfig(assistant_only_loss=False)): more to learn "
        "from per conversation for a model built from scratch",
    )
    append_eos: bool = Field(
        True,
        description="end every response with the tokenizer's eos token (not twice when it already ends "
        "with it); false: train on each response exactly as written, for responses that end their turn "
        "with a marker of their own (a tool call, a hand-over) rather than eos",
    )


class SFTTrainConfig(ConfigSection):
    """``train`` section of ``rlinf sft``: AdamW, linear warm-up then cosine decay, loss on the
    response tokens only."""

    epochs: int | None = Field(
        None, ge=1, description="passes over the training examples; null: 1 unless steps is set"
    )
    steps: int | None = Field(None, ge=1, description="gradient steps (instead of epochs)")
    batch_size: int = Field(32, ge=1, description="examples per gradient step")
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="examples per forward/backward pass (gradients are accumulated over the batch; "
        "the loss is the same); null: the whole batch at once",
    )
    lr: float = Field(1e-4, gt=0.0, description="peak AdamW learning rate")
    adam_betas: tuple[float, float] = Field(
        (0.9, 0.999), description="AdamW's (beta1, beta2), each in [0, 1)"
    )
    warmup_steps: int = Field(10, ge=0, description="steps of linear warm-up from 0 to lr")
    min_lr_ratio: float = Field(
        0.1, ge=0.0, le=1.0, description="the cosine decay ends at lr * min_lr_ratio on the last step"
    )
    weight_decay: float = Field(
        0.0, ge=0.0, description="AdamW decoupled weight decay (matrices only; not biases or norms)"
    )
    max_length: int | None = Field(
        None,
        ge=2,
        description="leave out (and count) examples longer than this many tokens (prompt + response "
        "+ eos), never cut; null: model.max_seq_len, else the model's context",
    )
    grad_clip: float | None = Field(1.0, gt=0.0, description="clip the gradient norm; null: no clipping")
    eval_batch_size: int = Field(32, ge=1, description="examples per forward pass of the validation loss")
    eval_interval: int = Field(
        0, ge=0, description="steps between validation losses in metrics.csv; 0: before and after only"
    )
    eval_generate: int = Field(
        0,
        ge=0,
        description="greedy-decode the first N validation prompts before and after training and report "
        "the fraction whose output equals the response (whitespace stripped); 0 turns it off",
    )
    max_new_tokens: int | None = Field(
        None, ge=1, description="tokens eval_generate may generate; null: the longest response + 8"
    )
    stop_at_exact_match: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="stop early once the greedy exact match on the eval_generate validation prompts "
        "reaches this fraction, checked every eval_interval steps (needs both); null: train every step",
    )

    @model_validator(mode="after")
    def _one_budget(self) -> SFTTrainConfig:
        if self.epochs is not None and self.steps is not None:
            raise ValueError("set train.epochs or train.steps, not both")
        if any(not 0.0 <= b < 1.0 for b in self.adam_betas):
            raise ValueError(f"train.adam_betas must each be in [0, 1), got {list(self.adam_betas)}")
        if self.stop_at_exact_match is not None and not (self.eval_generate and self.eval_interval):
            raise ValueError(
                "train.stop_at_exact_match needs train.eval_generate (validation prompts to decode) and "
                "train.eval_interval (steps between checks) above 0"
            )
        return self


class SFTRunnerConfig(ConfigSection):
    """``runner`` section of ``rlinf sft``."""

    seed: int = Field(
        0, ge=0, description="seeds the model init, LoRA's initial weights, dropout and the order"
    )
    torch_threads: int = Field(2, ge=1, description="torch CPU threads")
    log_interval: int = Field(10, ge=1, description="steps between metrics rows and log lines")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where the model trains; auto: cuda when available, else cpu"
    )
    loggers: Loggers = Field(
        default_factory=lambda: ["csv", "tensorboard"],
        description="metrics backends: csv (metrics.csv), tensorboard (RUN_DIR/tensorboard), wandb "
        "(needs the wandb package; WANDB_MODE=offline works without a network); the same scalars go to each",
    )
    checkpoint_interval: int = Field(
        0,
        ge=0,
        description="steps between checkpoints (checkpoints/step_<n>/: model, optimiser, data position and "
        "random streams; the newest two kept; one also at the end); 0: only on SIGTERM or Ctrl-C, which "
        "always write one, so `rlinf sft CONFIG --resume RUN_DIR` continues a stopped run",
    )
    worker_timeout: float = Field(
        600.0,
        gt=0.0,
        description="seconds the run waits on its learner when a scheduler placed it in a worker",
    )


class SFTRunConfig(BaseModel):
    """The validated sections of an ``rlinf sft`` YAML."""

    model: SerializeAsAny[LMModelConfig]
    data: SFTDataConfig
    train: SFTTrainConfig
    runner: SFTRunnerConfig
    tools: ToolsConfig | None = None
    """The tools whose schemas the chat template renders for conversations (``data.messages_key``)."""


_SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("model", LMModelConfig),
    ("data", SFTDataConfig),
    ("train", SFTTrainConfig),
    ("runner", SFTRunnerConfig),
    ("tools", ToolsConfig),
)


def load_sft_config(data: Mapping[str, Any]) -> SFTRunConfig:
    """Validate an ``rlinf sft`` YAML (a mapping of sections; ``model`` by the model of its
    ``model.type``, :func:`~rlinf_algos.models.validate_model_section`). ``model`` and ``data`` are
    required; ``train`` and ``runner`` take their defaults when absent. Every problem of every
    section is reported in one :class:`ConfigError`, each with its YAML path."""
    problems: list[ConfigProblem] = []
    out: dict[str, BaseModel] = {}
    known = {name for name, _ in _SECTIONS}
    for key in data:
        if key not in known:
            problems.append(
                ConfigProblem(str(key), f"unknown section; rlinf sft reads {', '.join(sorted(known))}")
            )
    for name, model in _SECTIONS:
        section = data.get(name)
        if section is None:
            if name == "tools":
                continue
            if name in ("model", "data"):
                what = "model.path (a model folder) or model.init" if name == "model" else "data.train_files"
                problems.append(ConfigProblem(name, f"missing section (needs at least {what})"))
                continue
            section = {}
        try:
            if name == "model":
                out[name] = validate_model_section(section, LMModelConfig, prefix=name)
            else:
                out[name] = validate_model(model, section, prefix=name)
        except ConfigError as err:
            problems.extend(err.problems)
    data_cfg = out.get("data")
    if data_cfg is not None:  # TRL's messages (and tools) columns, found as TRL finds them
        found = detect_conversations(data_cfg)
        if found:
            logging.getLogger("rlinf.sft").info(
                "data: %s (TRL's conversational format, detected in the first row)",
                ", ".join(f"{k}: {v}" for k, v in found.items()),
            )
            out["data"] = data_cfg = data_cfg.model_copy(update=found)
    if "tools" in out and not getattr(data_cfg, "messages_key", None) and "data" in out:
        problems.append(
            ConfigProblem(
                "tools",
                "tool schemas are rendered for conversations: set data.messages_key (e.g. messages) to the "
                "column of TRL-format conversations, or remove the tools section",
            )
        )
    if data_cfg is not None and data_cfg.tools_key and not data_cfg.messages_key:
        problems.append(
            ConfigProblem(
                "data.tools_key",
                "per-row tool schemas go with conversations: set data.messages_key (e.g. messages) too",
            )
        )
    if data_cfg is not None and data_cfg.messages_key and data_cfg.apply_chat_template is False:
        problems.append(
            ConfigProblem(
                "data.apply_chat_template",
                "conversations (data.messages_key) are rendered by the chat template; remove "
                "apply_chat_template: false",
            )
        )
    if problems:
        raise ConfigError(problems)
    return SFTRunConfig(**out)  # type: ignore[arg-type]

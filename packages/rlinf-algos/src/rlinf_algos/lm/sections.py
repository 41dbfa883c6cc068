"""The sections a language-model run shares with ``rlinf sft``: ``model`` (a folder or a fresh
model from ``model.init``, LoRA, dtype), ``critic`` (``ppo_lm``'s value model), ``tools`` and
``runner.loggers``. Light on purpose (pydantic and rlinf_core only): a driver validates a YAML
without torch. The run's other sections are :mod:`rlinf_algos.lm.config`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, RootModel, field_validator, model_validator

from rlinf_algos.config import LoraConfig
from rlinf_algos.tools.registry import ToolEntry
from rlinf_core.config import ConfigSection
from rlinf_core.errors import ConfigError

__all__ = [
    "CriticConfig",
    "LMModelConfig",
    "Loggers",
    "ModelInitConfig",
    "ToolsConfig",
    "require_wandb",
]

_STRICT = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


class CriticConfig(ConfigSection):
    """``critic`` section (``ppo_lm``): the value model."""

    model_config = _STRICT

    path: str | None = Field(
        None,
        description="a causal-LM folder for the critic's backbone; null: a copy of the policy as RL "
        "starts (warm-started, LoRA merged)",
    )
    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate of the critic")
    warmup_iters: int = Field(0, ge=0, description="iterations the critic trains before the policy does")


class ModelInitConfig(ConfigSection):
    """``model.init``: build a fresh model from a ``transformers`` config (random weights) and the
    task's tokenizer, save it as an ordinary model folder, and load it from there like any user's
    folder. What the examples use, since no weights can be downloaded."""

    model_config = _STRICT

    architecture: Literal["qwen2", "llama"] = "qwen2"
    hidden_size: int = Field(128, ge=8)
    num_layers: int = Field(4, ge=1)
    num_heads: int = Field(4, ge=1)
    num_kv_heads: int | None = Field(None, ge=1, description="grouped-query attention; null: num_heads")
    intermediate_size: int | None = Field(None, ge=8, description="MLP width; null: 4 * hidden_size")
    max_position_embeddings: int = Field(256, ge=16)
    tokenizer: Literal["arith", "bpe"] = Field(
        "arith",
        description="the tokenizer to build: arith (the arithmetic task's characters) or bpe (byte-level "
        "BPE trained on the data section's prompts and answers, with Qwen2's pre-tokenizer (one digit a "
        "token) and ChatML chat template)",
    )
    vocab_size: int = Field(512, ge=300, le=65536, description="vocabulary of a bpe tokenizer")

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelInitConfig:
        head = self.hidden_size // self.num_heads
        if self.hidden_size % self.num_heads != 0 or head % 2 != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_heads ({self.num_heads}) "
                "with an even head size (RoPE rotates pairs)"
            )
        kv = self.num_kv_heads or self.num_heads
        if self.num_heads % kv != 0:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({kv})")
        return self


class LMModelConfig(ConfigSection):
    """``model`` section of the language-model algorithms: a Hugging Face causal language model,
    from a folder (``path``) or built fresh (``init``), optionally with LoRA adapters. The base of
    every language-model type's section (``ModelType.config_model``)."""

    model_config = _STRICT

    type: str = Field(
        "hf",
        min_length=1,
        description="a registered language-model type: hf (transformers AutoModelForCausalLM + "
        "AutoTokenizer), or one a plugin registers (rlinf_register_models)",
    )
    path: str | None = Field(
        None, description="a local model folder (config.json, weights, tokenizer); what a user brings"
    )
    init: ModelInitConfig | None = Field(
        None,
        description="build a fresh model instead (saved to RUN_DIR/base_model, then loaded from there); "
        "the default when model.path is not set",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="parameter dtype (float32 on CPU; bfloat16 on accelerators)"
    )
    trust_remote_code: bool = Field(
        False, description="run code shipped in the model folder (off unless set)"
    )
    lora: LoraConfig | None = Field(None, description="peft LoRA adapters; null trains every weight")
    max_seq_len: int | None = Field(
        None,
        ge=16,
        description="longest sequence (prompt + response); null: the model's max_position_embeddings",
    )

    @model_validator(mode="after")
    def _one_source(self) -> LMModelConfig:
        if self.path is not None and self.init is not None:
            raise ValueError(
                "set one of model.path (a model folder) and model.init (build a fresh model), not both"
            )
        if self.path is None and self.init is None:
            self.init = ModelInitConfig()
        return self


class ToolsConfig(RootModel[list[ToolEntry]]):
    """``tools`` section: the tools a policy may call between turns, one entry each, a name or
    ``{name, path, kwargs, timeout_s}`` (:class:`~rlinf_algos.tools.ToolEntry`)::

        tools:
          - {name: search, kwargs: {corpus: data/corpus.jsonl, top_k: 3}}   # built in
          - {path: my_tools.py, name: lookup, timeout_s: 5}                 # a function in a file
          - python                                                          # a bare name

    In a ``grpo_lm`` run (with a ``data`` section) each episode is a multi-turn tool-calling
    conversation (``algorithm.max_turns``, ``algorithm.max_response_tokens``); in ``rlinf sft``
    the tools' JSON schemas are what the chat template renders for a conversation's tools.
    Relative paths (``path``, a corpus) are resolved against the working directory."""

    @field_validator("root", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("root")
    @classmethod
    def _some(cls, value: list[ToolEntry]) -> list[ToolEntry]:
        if not value:
            raise ValueError("lists no tool; remove the section or name at least one tool")
        names = [e.name for e in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"names {', '.join(map(repr, twice))} twice")
        return value

    @property
    def entries(self) -> list[ToolEntry]:
        return list(self.root)


def _unique_loggers(loggers: list[str]) -> list[str]:
    if len(set(loggers)) != len(loggers):
        raise ValueError(f"lists a backend twice: {loggers}")
    return loggers


Loggers = Annotated[list[Literal["csv", "tensorboard", "wandb"]], AfterValidator(_unique_loggers)]
"""``runner.loggers`` of a language-model run and of ``rlinf sft``."""


def require_wandb(loggers: list[str]) -> None:
    """A :class:`ConfigError` at ``runner.loggers`` when it lists wandb and wandb is not installed."""
    import importlib.util

    if "wandb" in loggers and importlib.util.find_spec("wandb") is None:
        raise ConfigError(
            "wandb is not installed: pip install wandb (WANDB_MODE=offline logs without a network), "
            "or drop it from the list",
            "runner.loggers",
        )

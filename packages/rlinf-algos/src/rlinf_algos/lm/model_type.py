"""``model.type: hf``, the model type of the language-model algorithms (``grpo_lm``, ``ppo_lm``,
``rlinf sft``), registered by rlinf-algos' plugin. Light: the loading code
(:mod:`rlinf_algos.lm.hf`, torch and transformers) is imported when a model is built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

from rlinf_algos.lm.config import LMModelConfig
from rlinf_core.model import ModelType

__all__ = ["HFModels"]


class HFModels(ModelType):
    """``model.type: hf``: a Hugging Face causal language model (:mod:`rlinf_algos.lm.hf`), the
    model type of the language-model algorithms. ``build(spec)`` loads the model of a ``model``
    section (the spec is the section itself)."""

    PLUGIN_NAME: ClassVar[str] = "hf"
    config_model: ClassVar[type[BaseModel] | None] = LMModelConfig
    roles: ClassVar[tuple[str, ...]] = ("AutoModelForCausalLM",)

    def build(self, spec: Mapping[str, Any]) -> Any:
        from rlinf_algos.lm.hf import load_causal_lm

        return load_causal_lm(LMModelConfig.model_validate(spec))

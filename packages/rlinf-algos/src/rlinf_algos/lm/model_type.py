"""The model types of the language-model algorithms (``grpo_lm``, ``ppo_lm``, ``rlinf sft``) and
:func:`load_lm_model`, the one function every role loads its model through.

``model.type`` names a registered model type (``rlinf_register_models``); rlinf-algos registers
``hf`` (:class:`HFModels`). Every language-model load (the actor, the rollout engine, the
reference, a ``ppo_lm`` critic's backbone, the final policy of a sharded learner, ``rlinf sft``'s
learner, :func:`rlinf_algos.load_policy`) calls :func:`load_lm_model` with the run's ``model``
section, which builds through the type that section names, so a plugin's type is what every role
builds. A language-model type subclasses :class:`LMModelType` and implements :meth:`~LMModelType.load`::

    class TinyConfig(LMModelConfig):
        type: str = "tiny"
        tag: str = "mine"

    class TinyModels(LMModelType):
        PLUGIN_NAME = "tiny"
        config_model = TinyConfig

        def load(self, spec, path, *, trainable, device, meta):
            model = MyCausalLM.from_pretrained(path or spec.path)  # a transformers-style model
            return finish(model, trainable=trainable, device=device)

    @hookimpl
    def rlinf_register_models():
        return [TinyModels]

Light: the loading code (:mod:`rlinf_algos.lm.hf`, torch and transformers) is imported when a
model is built.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from rlinf_algos.lm.config import LMModelConfig
from rlinf_core.errors import ConfigError, RlinfError
from rlinf_core.model import ModelType

if TYPE_CHECKING:
    import torch

__all__ = ["HFModels", "LMModelType", "finish", "lm_model_section", "load_lm_model"]


class LMModelType(ModelType):
    """A model type of the language-model algorithms: its ``config_model`` is
    :class:`~rlinf_algos.lm.config.LMModelConfig` or a subclass (the type's own options beside
    ``path``, ``dtype``, ``lora``...), and :meth:`load` turns a validated section into a causal
    language model the roles sample from, score and train (``generate``/``forward`` with a KV
    cache, ``save_pretrained``: a ``transformers`` ``PreTrainedModel`` or one that behaves as
    such)."""

    config_model: ClassVar[type[BaseModel] | None] = LMModelConfig
    roles: ClassVar[tuple[str, ...]] = ("AutoModelForCausalLM",)

    @abstractmethod
    def load(
        self,
        spec: LMModelConfig,
        path: Path | None,
        *,
        trainable: bool,
        device: torch.device | str | None,
        meta: bool,
    ) -> Any:
        """The model of the ``model`` section ``spec`` (validated by this type's
        ``config_model``), from the folder ``path`` when given (a warm-started or written
        policy), else ``spec.path``. ``trainable=False``: every parameter frozen (rollout,
        reference); ``device``: where it then lives (``None``: the CPU); ``meta``: its skeleton
        on the meta device, no weight read (a sharded learner's ranks before FSDP)."""

    def build(self, spec: Mapping[str, Any]) -> Any:
        """:meth:`load` of the section ``spec`` (a mapping), trainable, on the CPU."""
        return self.load(lm_model_section(spec), None, trainable=True, device=None, meta=False)


class HFModels(LMModelType):
    """``model.type: hf``: a Hugging Face causal language model (:mod:`rlinf_algos.lm.hf`):
    ``AutoModelForCausalLM`` of the folder, ``model.dtype``, LoRA adapters with ``model.lora``."""

    PLUGIN_NAME: ClassVar[str] = "hf"

    def load(
        self,
        spec: LMModelConfig,
        path: Path | None,
        *,
        trainable: bool,
        device: torch.device | str | None,
        meta: bool,
    ) -> Any:
        from rlinf_algos.lm.hf import load_causal_lm

        return load_causal_lm(spec, path, trainable=trainable, device=device, meta=meta)


def finish(model: Any, *, trainable: bool, device: torch.device | str | None) -> Any:
    """``model`` with every parameter frozen unless ``trainable``, moved to ``device`` when
    given: what :meth:`LMModelType.load` owes its callers after building a model."""
    if not trainable:
        for p in model.parameters():
            p.requires_grad_(False)
    return model if device is None else model.to(device)


def lm_model_section(spec: LMModelConfig | Mapping[str, Any]) -> LMModelConfig:
    """The ``model`` section ``spec`` validated by the model of the type it names
    (:func:`~rlinf_algos.models.validate_model_section`: a plugin type's options kept); a
    validated section is returned as it is."""
    if isinstance(spec, LMModelConfig):
        return spec
    from rlinf_algos.models import validate_model_section

    return validate_model_section(dict(spec), LMModelConfig)


def load_lm_model(
    spec: LMModelConfig | Mapping[str, Any],
    path: str | Path | None = None,
    *,
    trainable: bool = True,
    device: torch.device | str | None = None,
    meta: bool = False,
) -> Any:
    """The model of the ``model`` section ``spec``, built by the model type ``spec.type`` names
    (``hf``: :func:`rlinf_algos.lm.hf.load_causal_lm`; a plugin's: its :meth:`LMModelType.load`):
    the one way a language-model role loads its model. ``path``: the folder to load from instead
    of ``model.path``; ``trainable``, ``device``, ``meta``: as :meth:`LMModelType.load` takes
    them. A type that is not a language-model type is a :class:`ConfigError` at ``model.type``."""
    section = lm_model_section(spec)
    folder = Path(path) if path is not None else None
    if section.type == HFModels.PLUGIN_NAME:  # always resolves, without loading the plugins
        kind: ModelType = HFModels()
    else:
        from rlinf_algos.models import model_type

        kind = model_type(section.type)
    if not isinstance(kind, LMModelType):
        raise ConfigError(
            f"{section.type!r} ({type(kind).__name__}) is not a language-model type: a model type of the "
            "language-model algorithms subclasses rlinf_algos.lm.model_type.LMModelType",
            "model.type",
        )
    model = kind.load(section, folder, trainable=trainable, device=device, meta=meta)
    if model is None:
        raise RlinfError(f"model type {section.type!r}: load() returned no model")
    return model

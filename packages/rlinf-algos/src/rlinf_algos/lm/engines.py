"""Rollout engines of the language-model runs: :class:`HFEngine`, the ``hf`` engine
(registered by rlinf-algos' plugin), and :func:`make_rollout`, which builds the engine
``rollout.engine`` names.

Torch-free at import: the plugin registers :class:`HFEngine`, and ``rollout.engine`` is
validated, in processes that never build a model; torch and transformers are imported when an
engine is constructed.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any, ClassVar

from rlinf_algos.lm.config import LMModelConfig
from rlinf_algos.lm.model_type import lm_model_section, load_lm_model
from rlinf_core.errors import ConfigError, ConfigProblem
from rlinf_core.rollout import RolloutEngine

__all__ = ["HFEngine", "check_options", "engine_class", "make_rollout", "rollout_problems"]


class HFEngine(RolloutEngine):
    """The ``hf`` engine: holds a versioned copy of the policy and samples from it with the
    Hugging Face ``generate`` (:func:`~rlinf_algos.lm.hf.generate`: KV cache, left padding,
    temperature, top-p, a stop on the stop tokens), on the CPU or the GPU its placement gives.

    With LoRA on a float32 model it samples from merged weights (``W0 + scale * B @ A``, rebuilt
    at every sync from a copy of the base weights ``W0`` kept on the CPU, so syncs do not
    accumulate rounding): generation then costs what the plain model costs, not the adapters'
    extra matmuls on every linear layer. The merged log-probs equal the adapter model's to float
    rounding (about 1e-6), not bit for bit; the learner computes the log-probs its losses use, so
    either way trains the same. In bfloat16 or float16 a small update would round away in the
    merged weight (half a unit in the last place of ``W0``), so there it samples through the
    adapters; ``rollout.options.merge_lora`` (true or false) decides instead.

    Args:
        model_config: the ``model`` section (with ``path`` set: the folder to load), or its dict.
        temperature, top_p: sampling (``temperature=0`` is greedy).
        seed: of its sampling generator.
        pad_id: the tokenizer's pad token.
        max_len: longest sequence (``model.max_seq_len``; ``None``: the model's context).
        merge_lora: sample from merged weights when the model has LoRA adapters (the one option,
            ``rollout.options.merge_lora``; ``None``: when the model is in float32).
        device: where the model lives and samples (``None``: the CPU); :func:`make_rollout`
            gives the process's device from its placement (:func:`rlinf_algos.devices.role_device`).
    """

    PLUGIN_NAME: ClassVar[str] = "hf"
    description: ClassVar[str] = "Hugging Face generate with a KV cache (CPU or GPU)"

    def __init__(
        self,
        model_config: LMModelConfig | dict[str, Any],
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        pad_id: int = 0,
        max_len: int | None = None,
        merge_lora: bool | None = None,
        device: str | None = None,
    ) -> None:
        import torch

        from rlinf_algos.models import lora

        spec = lm_model_section(model_config)  # by its model.type: a plugin type's options kept
        super().__init__(
            spec,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            pad_id=pad_id,
            max_len=max_len if max_len is not None else spec.max_seq_len,
        )
        self.model = load_lm_model(spec, trainable=False, device=device)
        self.model.eval()
        self.device = torch.device(device or "cpu")
        # the sampler draws where the logits are (they never leave the device)
        self.generator = torch.Generator(self.device).manual_seed(seed)
        if merge_lora is None:
            merge_lora = next(self.model.parameters()).dtype == torch.float32
        self.base_weights = lora.lora_base_weights(self.model) if merge_lora else None
        if self.base_weights is not None:
            lora.merge_lora(self.model, self.base_weights)

    def set_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Load the actor's published weights (the LoRA adapter alone when the model has one; a
        key that does not match is an error) as ``version``."""
        from rlinf_algos.lm import hf
        from rlinf_algos.models import lora

        hf.load_sync_state(self.model, dict(state_dict))
        if self.base_weights is not None:
            lora.merge_lora(self.model, self.base_weights)
        self.version = version

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        temperature: float | None = None,
    ) -> list[list[int]]:
        """Responses (ids, the stop token included when reached) to ``prompts``, sampled at this
        worker's temperature and top-p unless ``temperature`` overrides it (0: greedy)."""
        return self._generate(prompts, max_new_tokens, stop_ids, temperature, False).tokens

    def generate_with_log_probs(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        temperature: float | None = None,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """:meth:`generate`, and per response the log-probability of each of its ids under the
        weights and temperature that sampled it (:func:`~rlinf_algos.lm.hf.generate`'s
        ``log_probs``): an asynchronous run's behaviour log-probs, taken while sampling instead
        of by a second forward over the responses."""
        out = self._generate(prompts, max_new_tokens, stop_ids, temperature, True)
        return out.tokens, out.log_probs or []

    def _generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        temperature: float | None,
        log_probs: bool,
    ) -> Any:
        from rlinf_algos.lm import hf
        from rlinf_algos.models import lora

        with lora.bare_lora_layers(self.model) if self.base_weights is not None else nullcontext():
            out = hf.generate(
                self.model,
                prompts,
                max_new_tokens,
                stop_ids,
                pad_id=self.pad_id,
                temperature=self.temperature if temperature is None else temperature,
                top_p=self.top_p,
                generator=self.generator,
                max_len=self.max_len,
                log_probs=log_probs,
            )
        self.tokens += out.num_tokens
        self.seconds += out.seconds
        return out


def engine_class(name: str, plugins: Any = None) -> type[RolloutEngine]:
    """The engine registered as ``name`` in ``plugins`` (a
    :class:`~rlinf_core.plugins.PluginHost`; default: the installed plugins); ``hf`` resolves
    even where the host does not list it. An unknown name is a :class:`ConfigError` at
    ``rollout.engine`` listing the registered engines."""
    if plugins is None:
        from rlinf_core.plugins import load_plugins

        plugins = load_plugins()
    engines = plugins.rollout_engines
    if name in engines:
        return engines.get(name)
    if name.casefold() == HFEngine.PLUGIN_NAME:
        return HFEngine
    raise ConfigError(
        f"{engines.unknown_message(name)}; an engine package registers one with the "
        "rlinf_register_rollout_engines hook (vLLM and SGLang engines come that way, for GPU machines)",
        "rollout.engine",
    )


_RUN_KEYWORDS = ("model_config", "temperature", "top_p", "seed", "pad_id", "max_len")
"""The constructor arguments that come from the run, not from ``rollout.options``."""
_PLACEMENT_KEYWORDS = ("device",)
"""Arguments that come from the placement when the engine takes them, never from the options."""


def check_options(cls: type[RolloutEngine], options: Mapping[str, Any]) -> None:
    """Refuse ``rollout.options`` that ``cls``'s constructor does not take (or that name an
    argument the run gives) with a :class:`ConfigError` at ``rollout.options`` listing the ones
    it takes; inspects the signature only, so nothing is imported or built."""
    clash = sorted(set(options) & {*_RUN_KEYWORDS, *_PLACEMENT_KEYWORDS})
    try:
        if clash:
            raise TypeError(f"{', '.join(clash)} come from the run, not from rollout.options")
        inspect.signature(cls).bind(None, **dict.fromkeys(_RUN_KEYWORDS[1:]), **options)
    except TypeError as err:
        takes = [
            p.name
            for p in inspect.signature(cls).parameters.values()
            if p.name not in _RUN_KEYWORDS and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        raise ConfigError(
            f"rollout engine {cls.PLUGIN_NAME!r} does not take these options ({err}); it takes: "
            f"{', '.join(takes) or 'none'}",
            "rollout.options",
        ) from None


def rollout_problems(run: Any, plugins: Any = None) -> list[ConfigProblem]:
    """The problems of ``run``'s ``rollout`` section: an engine that is not registered (at
    ``rollout.engine``) or options its constructor does not take (at ``rollout.options``)."""
    try:
        check_options(engine_class(run.rollout.engine, plugins), run.rollout.options)
    except ConfigError as err:
        return list(err.problems)
    return []


def make_rollout(
    run: Any, *, seed: int, pad_id: int, plugins: Any = None, device: Any = None
) -> RolloutEngine:
    """The rollout engine of ``run`` (``rollout.engine`` with ``rollout.options``) for its
    ``model`` section and sampling settings (``algorithm.temperature``, ``algorithm.top_p``,
    ``model.max_seq_len``); ``seed``: of this process's sampler; ``device``: where an engine
    that takes one computes (``None``: the placed process's device,
    :func:`~rlinf_algos.devices.role_device`; the local runtime passes its run's device). An
    unknown engine or options it does not take are the :class:`ConfigError` of
    :func:`rollout_problems`."""
    cls = engine_class(run.rollout.engine, plugins)
    check_options(cls, run.rollout.options)
    alg = run.algorithm
    placed: dict[str, Any] = {}
    params = inspect.signature(cls).parameters
    if "device" in params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
        from rlinf_algos.devices import role_device

        placed["device"] = str(device if device is not None else role_device(str(run.runner.device)))
    return cls(
        run.model,
        temperature=alg.temperature,
        top_p=alg.top_p,
        seed=seed,
        pad_id=pad_id,
        max_len=run.model.max_seq_len,
        **placed,
        **run.rollout.options,
    )

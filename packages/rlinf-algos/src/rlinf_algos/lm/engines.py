"""Rollout engines of the language-model runs: ``hf`` (registered by rlinf-algos' plugin) and
:func:`make_rollout`, which builds the engine ``rollout.engine`` names.

Torch-free at import (the plugin registers :class:`HFRolloutEngine` in processes that never build
a model); the engine loads its model when it is constructed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from rlinf_core.errors import ConfigError
from rlinf_core.rollout import RolloutEngine

__all__ = ["HFRolloutEngine", "engine_class", "make_rollout"]


class HFRolloutEngine(RolloutEngine):
    """Hugging Face ``generate`` over the model folder, with the KV cache, left padding,
    temperature, top-p and a stop on the stop tokens
    (:class:`~rlinf_algos.lm.workers.RolloutWorker`, :func:`~rlinf_algos.lm.hf.generate`). Takes
    no options."""

    PLUGIN_NAME: ClassVar[str] = "hf"
    description: ClassVar[str] = "Hugging Face generate with a KV cache (CPU or GPU)"

    def __init__(
        self,
        model_config: Any,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        pad_id: int = 0,
        max_len: int | None = None,
    ) -> None:
        from rlinf_algos.lm.workers import RolloutWorker

        super().__init__(
            model_config, temperature=temperature, top_p=top_p, seed=seed, pad_id=pad_id, max_len=max_len
        )
        self.worker = RolloutWorker(
            model_config, temperature, top_p, seed=seed, pad_id=pad_id, max_len=max_len
        )

    @property
    def model(self) -> Any:
        return self.worker.model

    def set_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        self.worker.set_weights(dict(state_dict), version)
        self.version = version

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        temperature: float | None = None,
    ) -> list[list[int]]:
        out = self.worker.generate(prompts, max_new_tokens, stop_ids, temperature)
        self.tokens, self.seconds = self.worker.tokens, self.worker.seconds
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
    if name.casefold() == HFRolloutEngine.PLUGIN_NAME:
        return HFRolloutEngine
    raise ConfigError(
        f"{engines.unknown_message(name)}; an engine package registers one with the "
        "rlinf_register_rollout_engines hook (vLLM and SGLang engines come that way, for GPU machines)",
        "rollout.engine",
    )


def make_rollout(run: Any, *, seed: int, pad_id: int, plugins: Any = None) -> RolloutEngine:
    """The rollout engine of ``run`` (``rollout.engine`` with ``rollout.options``) for its
    ``model`` section and sampling settings; ``seed``: of this process's sampler."""
    cls = engine_class(run.rollout.engine, plugins)
    alg = run.algorithm
    options = dict(run.rollout.options)
    try:
        return cls(
            run.model,
            temperature=alg.temperature,
            top_p=alg.top_p,
            seed=seed,
            pad_id=pad_id,
            max_len=run.model.max_seq_len,
            **options,
        )
    except TypeError as err:
        if options and "keyword argument" in str(err):
            raise ConfigError(
                f"rollout engine {run.rollout.engine!r} does not take these options ({err})",
                "rollout.options",
            ) from None
        raise

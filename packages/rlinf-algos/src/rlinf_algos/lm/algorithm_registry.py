"""The ``algorithm`` section's model of a language-model run, by ``algorithm.name``, from the one
algorithm registry (``rlinf_register_algorithms``): ``grpo_lm`` and ``ppo_lm`` of rlinf-algos,
and any :class:`~rlinf_algos.lm.algorithm.LMAlgorithm` a plugin registers. Pydantic and
rlinf_core only (imported by :mod:`rlinf_algos.lm.config`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from rlinf_algos.lm.algorithm_config import LMGRPOConfig, LMPPOConfig
from rlinf_core.errors import ConfigError

if TYPE_CHECKING:
    from rlinf_core.plugins import PluginHost

__all__ = ["BUILT_IN", "clear_cache", "lm_algorithm_config", "lm_algorithm_names"]

BUILT_IN: dict[str, type[LMGRPOConfig]] = {"grpo_lm": LMGRPOConfig, "ppo_lm": LMPPOConfig}
"""rlinf-algos' own language-model algorithms (they resolve without loading the plugins)."""


@functools.cache
def _installed() -> PluginHost:
    from rlinf_core.plugins import load_plugins

    return load_plugins()


def clear_cache() -> None:
    """Forget the installed plugins read so far (a test that installs one calls it)."""
    _installed.cache_clear()


def _registered(host: PluginHost | None) -> dict[str, type[LMGRPOConfig]]:
    """Every registered algorithm whose ``algorithm`` section is a language-model one
    (:class:`~rlinf_algos.lm.algorithm_config.LMGRPOConfig` or a subclass), by name."""
    out = dict(BUILT_IN)
    for name, cls in (host if host is not None else _installed()).algorithms.items():
        model = getattr(cls, "config_model", None)
        if isinstance(model, type) and issubclass(model, LMGRPOConfig):
            out.setdefault(name, model)
    return out


def lm_algorithm_names(host: PluginHost | None = None) -> list[str]:
    """The names of the language-model algorithms ``algorithm.name`` may select, sorted."""
    return sorted(_registered(host))


def lm_algorithm_config(name: object, host: PluginHost | None = None) -> type[LMGRPOConfig]:
    """The ``algorithm`` section's model of the language-model algorithm ``name`` (``None``:
    ``grpo_lm``'s). An unknown name, or one of another family, is a one-line
    :class:`ConfigError` at ``algorithm.name`` naming the language-model algorithms."""
    if name is None:
        return LMGRPOConfig
    if isinstance(name, str) and name in BUILT_IN:
        return BUILT_IN[name]
    known = _registered(host)
    if isinstance(name, str) and name in known:
        return known[name]
    raise ConfigError(
        f"{name!r} is not a language-model algorithm; registered: {', '.join(sorted(known))}",
        "algorithm.name",
    )

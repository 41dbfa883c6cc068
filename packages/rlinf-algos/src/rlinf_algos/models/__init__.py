"""Policies by ``model.type``: a registry that plugins extend (``rlinf_register_models``).

An algorithm turns the ``model`` section into a *spec* (a dict: ``type``, ``cls`` — which
network of that type — and its sizes), saved in ``policy.pt`` and sent to every worker;
:func:`build_policy` builds a fresh module from it in whichever process needs one. rlinf-algos
registers ``mlp`` (:class:`MLPModels`, the networks of :mod:`rlinf_algos.models.mlp`).

Adding a model type is one module and one registration line::

    class ConvModels(ModelType):
        PLUGIN_NAME = "conv"
        roles = ("GaussianActorCritic",)

        def build(self, spec):
            return MyConvActorCritic(**spec["kwargs"])

    @hookimpl
    def rlinf_register_models():
        return [ConvModels]
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

from rlinf_core.errors import PluginError, RlinfError
from rlinf_core.model import ModelType

__all__ = ["DEFAULT_MODEL_TYPE", "MLPModels", "build_policy", "model_type"]

DEFAULT_MODEL_TYPE = "mlp"
"""The type of a spec without ``type`` (every ``policy.pt`` written before types existed)."""


class MLPModels(ModelType):
    """``model.type: mlp``: a Gaussian actor-critic (PPO, GRPO) or a tanh-squashed Gaussian actor
    (SAC) over flat observation vectors."""

    PLUGIN_NAME: ClassVar[str] = "mlp"
    roles: ClassVar[tuple[str, ...]] = ("GaussianActorCritic", "SquashedGaussianActor")

    def build(self, spec: Mapping[str, Any]) -> Any:
        from rlinf_algos.models.mlp import GaussianActorCritic, SquashedGaussianActor

        cls = spec.get("cls")
        if cls == "GaussianActorCritic":
            return GaussianActorCritic(
                spec["obs_dim"],
                spec["act_dim"],
                spec["hidden"],
                spec["activation"],
                spec["log_std_init"],
                spec["normalize_obs"],
                spec.get("ortho_init", True),
            )
        if cls == "SquashedGaussianActor":
            return SquashedGaussianActor(
                spec["obs_dim"],
                spec["act_dim"],
                spec["action_low"],
                spec["action_high"],
                spec["hidden"],
                spec["activation"],
                log_std_bound=spec.get("log_std_bound", "tanh"),
                ortho_init=spec.get("ortho_init", True),
                squash_eps=spec.get("squash_eps", 0.0),
            )
        raise RlinfError(
            f"unknown policy class {cls!r} of model type 'mlp'; it builds {', '.join(self.roles)}"
        )


@functools.cache
def _registry() -> Any:
    from rlinf_core.plugins import load_plugins

    return load_plugins().models


def model_type(name: str) -> ModelType:
    """The registered model type ``name`` (``mlp`` always resolves, even with plugins filtered)."""
    if name == MLPModels.PLUGIN_NAME:
        return MLPModels()
    try:
        return _registry().get(name)()
    except PluginError as err:
        raise RlinfError(str(err)) from None


def build_policy(spec: Mapping[str, Any]) -> Any:
    """A fresh policy module from a ``spec`` (``type``, ``cls`` and the type's arguments), as
    saved in ``policy.pt`` and sent to the workers. Extra keys are ignored."""
    return model_type(str(spec.get("type", DEFAULT_MODEL_TYPE))).build(spec)

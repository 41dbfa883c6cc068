"""Policies by ``model.type``: a registry that plugins extend (``rlinf_register_models``).

An algorithm turns the ``model`` section into a *spec* (a dict: ``type``, ``cls`` — which
network of that type — and its sizes), saved in ``policy.safetensors`` and sent to every worker;
:func:`build_policy` builds a fresh module from it in whichever process needs one. rlinf-algos
registers ``mlp`` (:class:`MLPModels`, the networks of :mod:`rlinf_algos.models.mlp`) and
``vla`` (:class:`VLAModels`, :mod:`rlinf_algos.models.vla`).

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

from rlinf_core.errors import ConfigError, PluginError, RlinfError
from rlinf_core.model import ModelType

__all__ = [
    "DEFAULT_MODEL_TYPE",
    "MLPModels",
    "VLAModels",
    "build_policy",
    "check_policy_spec",
    "encoder_options",
    "model_type",
    "parameter_counts",
]

DEFAULT_MODEL_TYPE = "mlp"
"""The type of a spec without ``type`` (every ``policy.pt`` written before types existed)."""


class MLPModels(ModelType):
    """``model.type: mlp``: a Gaussian actor-critic (PPO, GRPO), an actor-critic over discrete,
    multi-discrete, multi-binary or hybrid action spaces (``ActorCritic``: PPO, GRPO) or a
    tanh-squashed Gaussian actor (SAC) over flat observation vectors."""

    PLUGIN_NAME: ClassVar[str] = "mlp"
    roles: ClassVar[tuple[str, ...]] = (
        "GaussianActorCritic",
        "ActorCritic",
        "SquashedGaussianActor",
        "TwinQ",
    )

    def check_spec(self, spec: Mapping[str, Any]) -> None:
        """Refuse dict observations (an MLP takes a vector)."""
        space = spec.get("obs_space") or {}
        if space.get("kind") == "dict":
            raise ConfigError(
                f"model.type mlp takes vector observations; this env gives a dict ({', '.join(space['keys'])}): "
                "use model.type vla",
                "model.type",
            )

    def build(self, spec: Mapping[str, Any]) -> Any:
        from rlinf_algos.models.mlp import ActorCritic, GaussianActorCritic, SquashedGaussianActor, TwinQ

        cls = spec.get("cls")
        if cls == "ActorCritic":
            return ActorCritic(
                spec["obs_dim"],
                spec["action_space"],
                spec["hidden"],
                spec["activation"],
                spec["log_std_init"],
                spec["normalize_obs"],
                spec.get("ortho_init", True),
            )
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
        if cls == "TwinQ":
            return TwinQ(
                spec["obs_dim"],
                spec["act_dim"],
                spec["hidden"],
                spec["activation"],
                ortho_init=spec.get("ortho_init", True),
            )
        raise RlinfError(
            f"unknown policy class {cls!r} of model type 'mlp'; it builds {', '.join(self.roles)}"
        )


class VLAModels(ModelType):
    """``model.type: vla``: policies over dict observations (camera images, state, instruction)
    with vision and language encoders (:mod:`rlinf_algos.models.vla`): a Gaussian actor-critic
    (PPO), and SAC's squashed actor and twin critics."""

    PLUGIN_NAME: ClassVar[str] = "vla"
    roles: ClassVar[tuple[str, ...]] = ("GaussianActorCritic", "SquashedGaussianActor", "TwinQ")

    def check_spec(self, spec: Mapping[str, Any]) -> None:
        """Refuse vector observations (the encoders take images, state and an instruction) and
        action spaces other than a flat ``Box``."""
        if spec.get("cls") == "ActorCritic":
            raise ConfigError(
                "model.type vla takes a continuous (Box) action space; for discrete, multi-discrete, "
                "multi-binary or hybrid actions use model.type mlp",
                "model.type",
            )
        if (spec.get("obs_space") or {}).get("kind") != "dict":
            raise ConfigError(
                "model.type vla takes dict observations (image, state, instruction); this env gives a "
                "vector: set env.obs_mode to pixels or pixels+state, or use model.type mlp",
                "model.type",
            )
        from rlinf_algos.models.vla import privileged_problem

        problem = privileged_problem(
            "privileged" in spec["obs_space"]["keys"],
            spec.get("critic_input", "features"),
            spec.get("predict_privileged", 0.0),
        )
        if problem is not None:
            raise problem

    def build(self, spec: Mapping[str, Any]) -> Any:
        from rlinf_algos.models import vla

        cls = spec.get("cls")
        encoders = {k: spec.get(k) for k in ("vision", "language", "lora")}
        hidden, act = spec.get("hidden") or [256, 256], spec.get("activation") or "relu"
        if cls == "GaussianActorCritic":
            return vla.VLAActorCritic(
                spec["obs_space"],
                spec["act_dim"],
                hidden,
                act,
                spec.get("log_std_init", 0.0),
                spec.get("normalize_obs", True),
                critic_input=spec.get("critic_input", "features"),
                predict_privileged=spec.get("predict_privileged", 0.0),
                encoder_loss=spec.get("encoder_loss", "all"),
                **encoders,
            )
        if cls == "SquashedGaussianActor":
            return vla.VLASquashedActor(
                spec["obs_space"],
                encoders,
                act_dim=spec["act_dim"],
                action_low=spec["action_low"],
                action_high=spec["action_high"],
                hidden=hidden,
                activation=act,
                log_std_bound=spec.get("log_std_bound", "tanh"),
                squash_eps=spec.get("squash_eps", 0.0),
            )
        if cls == "TwinQ":
            return vla.VLATwinQ(
                spec["obs_space"],
                encoders,
                spec["act_dim"],
                critic_input=spec.get("critic_input", "features"),
                hidden=hidden,
                activation=act,
            )
        raise RlinfError(
            f"unknown policy class {cls!r} of model type 'vla'; it builds {', '.join(self.roles)}"
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


def encoder_options(model_cfg: Any) -> dict[str, Any]:
    """What a policy spec carries of the ``model`` section's encoder options (``vla``): the
    ``vision``, ``language`` and ``lora`` sections that are set, and ``critic_input`` /
    ``predict_privileged`` / ``encoder_loss`` when they differ from their defaults (older specs, and every mlp
    spec, stay as they were)."""
    out: dict[str, Any] = {
        k: v.model_dump()
        for k in ("vision", "language", "lora")
        if (v := getattr(model_cfg, k, None)) is not None
    }
    if getattr(model_cfg, "critic_input", "features") != "features":
        out["critic_input"] = model_cfg.critic_input
    if getattr(model_cfg, "predict_privileged", 0.0):
        out["predict_privileged"] = float(model_cfg.predict_privileged)
    if getattr(model_cfg, "encoder_loss", "all") != "all":
        out["encoder_loss"] = model_cfg.encoder_loss
    return out


def parameter_counts(module: Any) -> dict[str, int]:
    """``{"trainable", "total"}`` parameters of a module (what a run reports of its policy: with
    LoRA, or frozen encoders, far fewer train than exist)."""
    params = list(module.parameters())
    return {
        "trainable": int(sum(p.numel() for p in params if p.requires_grad)),
        "total": int(sum(p.numel() for p in params)),
    }


def check_policy_spec(spec: Mapping[str, Any]) -> None:
    """Let the spec's model type refuse what it cannot build (its ``check_spec``, when it has one)
    before any worker tries: a :class:`ConfigError` naming the key to change."""
    check = getattr(model_type(str(spec.get("type", DEFAULT_MODEL_TYPE))), "check_spec", None)
    if check is not None:
        check(spec)


def build_policy(spec: Mapping[str, Any]) -> Any:
    """A fresh policy module from a ``spec`` (``type``, ``cls`` and the type's arguments), as
    saved in ``policy.safetensors`` and sent to the workers. Extra keys are ignored."""
    return model_type(str(spec.get("type", DEFAULT_MODEL_TYPE))).build(spec)

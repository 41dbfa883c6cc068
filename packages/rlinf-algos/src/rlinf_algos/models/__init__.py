"""Policies by ``model.type``: a registry that plugins extend (``rlinf_register_models``).

A model type declares the model of its ``model`` section (``config_model``: a subclass of
:class:`~rlinf_algos.models.config.ModelConfig` that adds its own options) and builds policies.
:func:`validate_model_section` validates the section with the model of the type it names. An
algorithm turns the validated section into a *spec* (a dict: ``type``, ``cls`` — which network of
that type — its sizes and the type's own options, :meth:`ModelConfig.spec_options`), saved in
``policy.safetensors`` and sent to every worker; :func:`build_policy` builds a fresh module from
it in whichever process needs one. rlinf-algos registers ``mlp`` (:class:`MLPModels`, the
networks of :mod:`rlinf_algos.models.mlp`), ``vla`` (:class:`VLAModels`,
:mod:`rlinf_algos.models.vla`, its options :mod:`rlinf_algos.models.vla_config`) and, for the
language-model algorithms, ``hf`` (:class:`rlinf_algos.lm.model_type.HFModels`).

Adding a model type is one module and one registration line::

    class ConvConfig(ModelConfig):
        channels: list[int] = Field([16, 32], description="conv channels")

    class ConvModels(ModelType):
        PLUGIN_NAME = "conv"
        config_model = ConvConfig
        roles = ("GaussianActorCritic",)

        def build(self, spec):
            return MyConvActorCritic(spec["obs_dim"], spec["act_dim"], spec["channels"])

    @hookimpl
    def rlinf_register_models():
        return [ConvModels]
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import BaseModel

from rlinf_algos.models.config import ModelConfig
from rlinf_algos.models.vla_config import VLAModelConfig
from rlinf_core.config import describe_value, validate_model
from rlinf_core.errors import ConfigError, ConfigProblem, PluginError, RlinfError, join_path
from rlinf_core.model import ModelType

if TYPE_CHECKING:
    from torch import nn

    from rlinf_core.plugins import PluginHost, Registry

__all__ = [
    "DEFAULT_MODEL_TYPE",
    "MLPModels",
    "VLAModels",
    "build_policy",
    "check_policy_spec",
    "encoder_options",
    "holds_a_default_option",
    "model_config_class",
    "model_type",
    "parameter_counts",
    "validate_model_section",
]

M = TypeVar("M", bound=BaseModel)

DEFAULT_MODEL_TYPE = "mlp"
"""The type of a spec without ``type`` (every ``policy.pt`` written before types existed)."""


class MLPModels(ModelType):
    """``model.type: mlp``: a Gaussian actor-critic (PPO, GRPO), an actor-critic over discrete,
    multi-discrete, multi-binary or hybrid action spaces (``ActorCritic``: PPO, GRPO) or a
    tanh-squashed Gaussian actor (SAC) over flat observation vectors."""

    PLUGIN_NAME: ClassVar[str] = "mlp"
    config_model: ClassVar[type[BaseModel] | None] = ModelConfig
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

    def build(self, spec: Mapping[str, Any]) -> nn.Module:
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
    config_model: ClassVar[type[BaseModel] | None] = VLAModelConfig
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

    def build(self, spec: Mapping[str, Any]) -> nn.Module:
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
def _registry() -> Registry[type[ModelType]]:
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


def encoder_options(model_cfg: BaseModel) -> dict[str, Any]:
    """What a policy spec carries of the ``model`` section's type-specific options
    (:meth:`~rlinf_algos.models.config.ModelConfig.spec_options`: ``vla``'s encoders and heads, a
    plugin type's own fields; nothing for ``mlp``)."""
    options = getattr(model_cfg, "spec_options", None)
    return dict(options()) if callable(options) else {}


def _family(registry: Registry[type[ModelType]], base: type[BaseModel]) -> list[str]:
    """The registered model types whose section model is ``base`` or extends it."""
    default = str(base.model_fields["type"].default)
    names = [default]
    for name, cls in registry.items():
        model = getattr(cls, "config_model", None)
        if (model is None or issubclass(model, base)) and name.casefold() != default.casefold():
            names.append(name)
    return names


def model_config_class(name: str, base: type[M] = ModelConfig, host: PluginHost | None = None) -> type[M]:  # type: ignore[assignment]
    """The model that validates the ``model`` section of ``model.type: name`` in a run whose
    algorithms take ``base`` (:class:`ModelConfig` for the embodied ones): the type's
    ``config_model`` (``base`` itself for a type that declares none, and for ``base``'s default
    type, which always resolves). An unknown type, or one of another family, is a
    :class:`ConfigError` at ``model.type`` naming the types this run takes."""
    default = str(base.model_fields["type"].default)
    if name.casefold() == default.casefold():
        return base
    registry = host.models if host is not None else _registry()
    if name not in registry:
        family = _family(registry, base)
        takes = "" if set(family) >= set(registry.names()) else f"; this run takes: {', '.join(family)}"
        raise ConfigError(f"{registry.unknown_message(name)}{takes}", "model.type")
    model = getattr(registry.get(name), "config_model", None) or base
    if not issubclass(model, base):
        raise ConfigError(
            f"{name!r} is a model type of other algorithms (its section is {model.__name__}, not a "
            f"{base.__name__}); this run takes: {', '.join(_family(registry, base))}",
            "model.type",
        )
    return model


def validate_model_section(
    data: object,
    base: type[M] = ModelConfig,  # type: ignore[assignment]
    *,
    prefix: str = "model",
    host: PluginHost | None = None,
) -> M:
    """The ``model`` section validated by the model of the type it names
    (:func:`model_config_class`; no ``type``: ``base``'s default). Every problem is one
    :class:`ConfigError` line with its YAML path; a key that is another model type's option says
    which (``model.vision: an option of model.type vla, not of model.type mlp (which takes ...)``).
    ``host``: the plugin host whose model types count (default: the installed plugins)."""
    if data is None:
        data = {}
    if isinstance(data, base):
        return data
    if isinstance(data, BaseModel):
        data = data.model_dump()
    if not isinstance(data, Mapping):
        raise ConfigError(f"must be a mapping, got {describe_value(data)}", prefix)
    name = data.get("type", base.model_fields["type"].default)
    if not isinstance(name, str) or not name:
        return validate_model(base, data, prefix)  # the base reports the bad type
    try:
        model = model_config_class(name, base, host)
    except ConfigError as err:
        raise ConfigError(
            [ConfigProblem(join_path(prefix, "type"), p.message) for p in err.problems]
        ) from None
    foreign = _foreign_options(data, model, base, host)
    problems = [
        ConfigProblem(
            join_path(prefix, key),
            f"an option of model.type {owner}, not of model.type {name} (which takes "
            f"{', '.join(model.model_fields)})",
        )
        for key, owner in foreign.items()
    ]
    data = {k: v for k, v in data.items() if k not in foreign}
    try:
        out = validate_model(model, data, prefix)
    except ConfigError as err:
        raise ConfigError([*problems, *err.problems]) from None
    if problems:
        raise ConfigError(problems)
    return out


def _foreign_options(
    data: Mapping[str, Any], model: type[BaseModel], base: type[BaseModel], host: PluginHost | None
) -> dict[str, str]:
    """``{key: model type}`` for the keys of ``data`` that ``model`` does not take but another
    model type of ``base``'s family does."""
    unknown = [k for k in data if isinstance(k, str) and k not in model.model_fields]
    if not unknown:
        return {}
    registry = host.models if host is not None else _registry()
    owners: dict[str, str] = {}
    for other in _family(registry, base):
        other_model = model_config_class(other, base, host)
        for key in unknown:
            if key in other_model.model_fields and other_model is not model:
                owners.setdefault(key, other)
    return owners


def holds_a_default_option(key: str, value: object, host: PluginHost | None = None) -> bool:
    """Whether ``value`` is the default of option ``key`` of some registered model type: an
    option a type without it never acted on (what a ``config.yaml`` written before each model type
    held its own options recorded of every option, e.g. ``critic_input: features`` of an mlp)."""
    registry = host.models if host is not None else _registry()
    models = [ModelConfig, *(m for cls in registry if (m := getattr(cls, "config_model", None)) is not None)]
    for model in models:
        field = model.model_fields.get(key)
        if (
            field is not None
            and not field.is_required()
            and field.get_default(call_default_factory=True) == value
        ):
            return True
    return False


def parameter_counts(module: nn.Module) -> dict[str, int]:
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


def build_policy(spec: Mapping[str, Any]) -> nn.Module:
    """A fresh policy module from a ``spec`` (``type``, ``cls`` and the type's arguments), as
    saved in ``policy.safetensors`` and sent to the workers. Extra keys are ignored."""
    return model_type(str(spec.get("type", DEFAULT_MODEL_TYPE))).build(spec)

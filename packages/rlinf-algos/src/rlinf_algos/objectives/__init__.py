"""Advantage estimators and policy losses as registered functions, chosen by name.

``algorithm.adv_estimator`` and ``algorithm.policy_loss`` in a run's YAML name them (verl's
``register_adv_est`` / ``register_policy_loss`` are the model). rlinf-algos registers the
built-ins (:mod:`rlinf_algos.objectives.advantages`, :mod:`rlinf_algos.objectives.losses`) through
its plugin; another package adds its own with the ``rlinf_register_advantage_estimators`` and
``rlinf_register_policy_losses`` hooks::

    from rlinf_algos.objectives import advantage_estimator
    from rlinf_core.plugins import hookimpl

    @advantage_estimator("best_of_group")
    def best_of_group(outcomes, cfg):
        '''1 for the best episode of each group, 0 for the others.'''
        ...

    @hookimpl
    def rlinf_register_advantage_estimators():
        return [best_of_group]

The two kinds of estimator (``critic=``):

- an *outcome* estimator (GRPO and its variants; the ``grpo`` and ``grpo_lm`` algorithms) maps
  the episodes' outcomes to one advantage per episode: ``fn(outcomes, cfg) -> Tensor [E]``
  (:class:`~rlinf_algos.objectives.advantages.Outcomes`: ``rewards [E]``, ``group_ids [E]``,
  ``lengths [E]`` or ``None``);
- a *critic* estimator (``gae``; the ``ppo`` and ``ppo_lm`` algorithms) maps per-step rewards
  and a learned critic's values to per-step advantages and returns: ``fn(steps, cfg) ->
  (advantages, returns)`` (:class:`~rlinf_algos.objectives.advantages.StepRewards`).

A policy loss is ``fn(log_prob, old_log_prob, advantages, mask, settings, ref_log_prob=None) ->
(loss, stats)`` over ``[B, L]`` tensors (:class:`~rlinf_algos.objectives.losses.LossSettings`:
clip range, dual clip, KL weight, aggregation), ``stats`` holding ``kl``, ``clip_fraction`` and
``ratio_mean`` (an empty dict may be returned when ``settings.stats`` is false). Embodied ``ppo``
trains on single steps: its rows are ``[B, 1]`` (one step each, the mask all ones), so a loss
that reads whole sequences (``sequences=True``: ``gspo``) is refused there. Each function may name the loss aggregation it is defined with (``aggregation=``):
``algorithm.aggregation: null`` takes the loss's, else the estimator's, else ``token-mean``.

This module imports no torch (the config models validate names with it); the functions'
modules do.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from rlinf_core.errors import PluginError

__all__ = [
    "AGGREGATIONS",
    "AGGREGATION_HELP",
    "DEFAULT_AGGREGATION",
    "Aggregation",
    "advantage_estimator",
    "check_estimator",
    "check_policy_loss",
    "clear_cache",
    "deferred",
    "estimator",
    "estimator_names",
    "loss_function",
    "policy_loss",
    "policy_loss_names",
    "registered_name",
    "resolve_aggregation",
]

F = TypeVar("F", bound=Callable[..., Any])

Aggregation = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
"""The type of an ``aggregation`` config field."""

AGGREGATIONS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
"""How a loss's per-token terms become one number (:func:`rlinf_algos.objectives.losses.aggregate`)."""

AGGREGATION_HELP = (
    "how per-token losses become one number: token-mean, seq-mean-token-sum, seq-mean-token-mean, "
    "seq-mean-token-sum-norm; null: the policy loss's own (dapo: token-mean, gspo: seq-mean-token-mean), "
    "else the estimator's (dr_grpo: seq-mean-token-sum-norm), else token-mean"
)
"""The ``aggregation`` field's description in every config that has one."""

DEFAULT_AGGREGATION = "token-mean"
"""The aggregation when neither the config, the loss nor the estimator names one."""

_ESTIMATOR_HOOK = "rlinf_register_advantage_estimators"
_LOSS_HOOK = "rlinf_register_policy_losses"


def advantage_estimator(
    name: str, *, critic: bool = False, aggregation: str | None = None
) -> Callable[[F], F]:
    """Mark ``fn`` as the advantage estimator ``name`` (what ``algorithm.adv_estimator`` selects).

    Args:
        name: the registered name (matched case-insensitively).
        critic: ``True`` for an estimator of per-step rewards and a critic's values (``ppo``,
            ``ppo_lm``); ``False`` for one of episode outcomes in groups (``grpo``, ``grpo_lm``).
        aggregation: the loss aggregation the estimator is defined with (one of
            :data:`AGGREGATIONS`), or ``None``.

    The function is returned unchanged, with ``PLUGIN_NAME``, ``needs_critic`` and
    ``aggregation`` attributes; return it from ``rlinf_register_advantage_estimators``.
    """
    _check_aggregation(name, aggregation)

    def mark(fn: F) -> F:
        fn.PLUGIN_NAME = name  # type: ignore[attr-defined]
        fn.needs_critic = critic  # type: ignore[attr-defined]
        fn.aggregation = aggregation  # type: ignore[attr-defined]
        return fn

    return mark


def policy_loss(name: str, *, aggregation: str | None = None, sequences: bool = False) -> Callable[[F], F]:
    """Mark ``fn`` as the policy loss ``name`` (what ``algorithm.policy_loss`` selects).

    Args:
        name: the registered name (matched case-insensitively).
        aggregation: the loss aggregation it is defined with, or ``None``.
        sequences: ``True`` when the loss reads whole sequences (a ratio over each row's
            tokens, as GSPO's): the algorithms whose samples are single steps (``ppo``: each
            row of ``[B, 1]`` one step of a random minibatch) refuse it.

    The function is returned unchanged, with ``PLUGIN_NAME``, ``aggregation`` and
    ``needs_sequences`` attributes; return it from ``rlinf_register_policy_losses``.
    """
    _check_aggregation(name, aggregation)

    def mark(fn: F) -> F:
        fn.PLUGIN_NAME = name  # type: ignore[attr-defined]
        fn.aggregation = aggregation  # type: ignore[attr-defined]
        fn.needs_sequences = sequences  # type: ignore[attr-defined]
        return fn

    return mark


class _Deferred:
    """What :func:`deferred` returns: calls the function at ``module:attr``, imported once."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.__name__ = path.rpartition(":")[2]
        self._fn: Callable[..., Any] | None = None

    @property
    def target(self) -> Callable[..., Any]:
        """The function itself (its module imported on first use)."""
        if self._fn is None:
            module, _, attr = self.path.partition(":")
            self._fn = getattr(importlib.import_module(module), attr)
        return self._fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"deferred({self.path!r})"


def deferred(path: str) -> Callable[..., Any]:
    """A stand-in for the function at ``"module:attr"`` that imports its module only when
    called, for a hook that should not import torch: mark it with the decorator the function
    has (``advantage_estimator("gae", critic=True)(deferred("pkg.mod:gae"))``), so that
    validating a name and ``rlinf plugins`` read the marks without importing the maths;
    :func:`estimator` and :func:`loss_function` hand out the function itself. The marks must
    match the function's own (rlinf-algos tests its built-ins' for that)."""
    return _Deferred(path)


def _target(fn: Any) -> Any:
    return fn.target if isinstance(fn, _Deferred) else fn


def _check_aggregation(name: str, aggregation: str | None) -> None:
    if aggregation is not None and aggregation not in AGGREGATIONS:
        raise ValueError(f"{name}: aggregation {aggregation!r} is not one of {', '.join(AGGREGATIONS)}")


def _name_of(fn: Any) -> str:
    return str(getattr(fn, "PLUGIN_NAME", getattr(fn, "__name__", repr(fn))))


@functools.cache
def _registries() -> tuple[dict[str, Any], dict[str, Any]]:
    """``(estimators, losses)`` by case-folded name, from every loaded plugin's hooks."""
    from rlinf_core.plugins import load_plugins

    return _collect(load_plugins())


def _collect(host: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for hook in (_ESTIMATOR_HOOK, _LOSS_HOOK):
        found: dict[str, tuple[Any, str]] = {}
        caller = getattr(host.pm.hook, hook)
        for impl in reversed(caller.get_hookimpls()):  # registration order
            info = host.plugins.get(impl.plugin_name)
            owner = f"plugin {impl.plugin_name!r}" + (
                f" ({info.distribution} {info.version})" if info else ""
            )
            try:
                result = impl.function()
            except Exception as err:
                raise PluginError(f"{owner}: {hook}() raised {type(err).__name__}: {err}") from err
            for fn in result or []:
                if not callable(fn):
                    raise PluginError(f"{owner} returned {fn!r} from {hook}(); expected a function")
                name = _name_of(fn)
                key = name.casefold()
                if key in found:
                    kind = "advantage estimator" if hook == _ESTIMATOR_HOOK else "policy loss"
                    raise PluginError(
                        f"{kind} {name!r} is registered twice: by {found[key][1]} and by {owner}; "
                        "disable one with RLINF_DISABLE_PLUGINS"
                    )
                found[key] = (fn, owner)
        out.append({k: v[0] for k, v in found.items()})
    return out[0], out[1]


def clear_cache() -> None:
    """Forget the registries (after plugins were installed or removed in this process)."""
    _registries.cache_clear()


def estimator_names(critic: bool | None = None) -> list[str]:
    """The registered estimators' names (of one kind when ``critic`` is given), sorted."""
    fns = _registries()[0].values()
    return sorted(
        _name_of(f) for f in fns if critic is None or bool(getattr(f, "needs_critic", False)) == critic
    )


def policy_loss_names(sequences: bool = True) -> list[str]:
    """The registered policy losses' names, sorted; ``sequences=False``: only those an
    algorithm of single-step samples takes (no ``needs_sequences``)."""
    fns = _registries()[1].values()
    return sorted(_name_of(f) for f in fns if sequences or not getattr(f, "needs_sequences", False))


def check_estimator(name: str, critic: bool) -> str:
    """``name`` when it is a registered estimator of the kind the algorithm takes, else a
    ``ValueError`` (pydantic reports it at ``algorithm.adv_estimator``) naming what is."""
    fn = _registries()[0].get(name.casefold())
    fits = estimator_names(critic)
    if fn is None:
        raise ValueError(f"unknown advantage estimator {name!r}; registered: {', '.join(fits) or 'none'}")
    if bool(getattr(fn, "needs_critic", False)) != critic:
        need = (
            "needs a critic (algorithm.name ppo or ppo_lm)"
            if not critic
            else "scores episode outcomes in groups (algorithm.name grpo or grpo_lm)"
        )
        raise ValueError(
            f"advantage estimator {name!r} {need}; this algorithm takes one of: {', '.join(fits)}"
        )
    return name


def registered_name(cls: Any, value: str, info: Any) -> str:
    """A pydantic field validator of ``adv_estimator`` and ``policy_loss``: the shipped default
    passes without a plugin lookup (no torch import); any other name must be registered, and an
    estimator of the kind the section's ``critic_estimators`` says. Use it as
    ``_registered = field_validator("adv_estimator", "policy_loss")(registered_name)``."""
    field = info.field_name
    if value == cls.model_fields[field].default:
        return value
    if field == "policy_loss":
        return check_policy_loss(value, sequences=bool(getattr(cls, "sequence_losses", True)))
    return check_estimator(value, critic=bool(getattr(cls, "critic_estimators", False)))


def check_policy_loss(name: str, sequences: bool = True) -> str:
    """``name`` when it is a registered policy loss the algorithm can use, else a
    ``ValueError`` naming those it can: ``sequences=False`` for an algorithm whose samples are
    single steps (it refuses a loss marked ``sequences=True``)."""
    fn = _registries()[1].get(name.casefold())
    fits = policy_loss_names(sequences)
    if fn is None:
        raise ValueError(f"unknown policy loss {name!r}; registered: {', '.join(fits) or 'none'}")
    if not sequences and getattr(fn, "needs_sequences", False):
        raise ValueError(
            f"policy loss {name!r} reads whole sequences (algorithm.name grpo, grpo_lm or ppo_lm); "
            f"this algorithm trains on single steps and takes one of: {', '.join(fits)}"
        )
    return name


def estimator(name: str) -> Any:
    """The estimator registered as ``name`` (validated configs name one): the function itself,
    imported now if it was registered :func:`deferred`."""
    try:
        return _target(_registries()[0][name.casefold()])
    except KeyError:
        raise PluginError(
            f"unknown advantage estimator {name!r}; registered: {', '.join(estimator_names())}"
        ) from None


def loss_function(name: str) -> Any:
    """The policy loss registered as ``name`` (the function itself, as :func:`estimator`)."""
    try:
        return _target(_registries()[1][name.casefold()])
    except KeyError:
        raise PluginError(
            f"unknown policy loss {name!r}; registered: {', '.join(policy_loss_names())}"
        ) from None


def resolve_aggregation(cfg: Any) -> str:
    """The aggregation a run's loss uses: ``cfg.aggregation`` when set, else the policy loss's
    own, else the estimator's, else :data:`DEFAULT_AGGREGATION`."""
    explicit = getattr(cfg, "aggregation", None)
    if explicit:
        return str(explicit)
    for fn in (loss_function(cfg.policy_loss), estimator(cfg.adv_estimator)):
        agg = getattr(fn, "aggregation", None)
        if agg:
            return str(agg)
    return DEFAULT_AGGREGATION

"""The plugin manager factory and the registries built from plugins.

Nothing is loaded at import time: call :func:`load_plugins` to get a :class:`PluginHost`. It loads
the entry points of group ``rlinf`` one at a time, so a plugin that fails to import is reported
with its entry-point name, distribution and version while the others still load. Registries are
built on first use from the registration hooks; two classes claiming one ``PLUGIN_NAME`` is a
:class:`~rlinf_core.errors.PluginError` naming both classes and both distributions.

Environment variables (comma lists of entry-point names):

``RLINF_DISABLE_PLUGINS``
    never load these plugins.
``RLINF_LOAD_PLUGINS``
    load only these plugins.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar

import pluggy

from rlinf_core import hookspecs
from rlinf_core.errors import PluginError

__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginFailure",
    "PluginHost",
    "PluginInfo",
    "Registry",
    "hookimpl",
    "load_plugins",
]

ENTRY_POINT_GROUP = "rlinf"

hookimpl = pluggy.HookimplMarker(hookspecs.PROJECT_NAME)
"""Marker for hook implementations: ``@hookimpl def rlinf_register_hardware(): ...``."""

# Where the names rlinf ships come from, so "unknown name" errors can say what to install.
KNOWN_PROVIDERS: dict[str, dict[str, str]] = {
    "hardware": {"franka": "rlinf-hw-franka"},
    "algorithms": {"ppo": "rlinf-algos", "sac": "rlinf-algos", "grpo": "rlinf-algos"},
    "schedulers": {"ray": "rlinf-scheduler"},
    "network_providers": {"easytier": "rlinf-net-easytier"},
    "models": {"mlp": "rlinf-algos", "vla": "rlinf-algos", "hf": "rlinf-algos"},
    "rewards": {"exact_match": "rlinf-algos", "math": "rlinf-algos", "arith": "rlinf-algos"},
    "rollout_engines": {"hf": "rlinf-algos"},
    "tools": {"search": "rlinf-algos", "python": "rlinf-algos"},
}

# registry attribute -> (hook name, human kind, base class path)
_REGISTRIES: dict[str, tuple[str, str, str]] = {
    "hardware": ("rlinf_register_hardware", "hardware type", "rlinf_core.hardware:HardwarePlugin"),
    "algorithms": ("rlinf_register_algorithms", "algorithm", "rlinf_core.algorithm:Algorithm"),
    "schedulers": ("rlinf_register_schedulers", "scheduler", "rlinf_core.scheduler:Scheduler"),
    "network_providers": (
        "rlinf_register_network_providers",
        "network provider",
        "rlinf_core.network:NetworkProvider",
    ),
    "models": ("rlinf_register_models", "model type", "rlinf_core.model:ModelType"),
    "env_families": ("rlinf_register_env_families", "env family", "rlinf_core.envs:EnvFamily"),
    "rewards": ("rlinf_register_rewards", "reward function", "rlinf_core.reward:RewardFunction"),
    "rollout_engines": (
        "rlinf_register_rollout_engines",
        "rollout engine",
        "rlinf_core.rollout:RolloutEngine",
    ),
}

T = TypeVar("T")


@dataclass
class PluginInfo:
    """A loaded plugin: its entry-point name, the distribution that ships it, and its module."""

    name: str
    distribution: str
    version: str
    module: str

    @property
    def label(self) -> str:
        return f"{self.name!r} ({self.distribution} {self.version})"


@dataclass
class PluginFailure:
    """A plugin that could not be loaded or whose registration failed."""

    name: str
    distribution: str
    version: str
    error: str
    details: str = field(default="", repr=False)

    def __str__(self) -> str:
        return f"plugin {self.name!r} ({self.distribution} {self.version}) failed: {self.error}"


class Registry(Generic[T]):
    """Classes of one kind, looked up by ``PLUGIN_NAME`` (case-insensitively)."""

    def __init__(self, kind: str, attr: str) -> None:
        self.kind = kind
        self._attr = attr
        self._entries: dict[str, tuple[T, PluginInfo]] = {}

    def _add(self, name: str, obj: T, owner: PluginInfo) -> None:
        key = name.casefold()
        if key in self._entries:
            other, other_owner = self._entries[key]
            raise PluginError(
                f"{self.kind} {name!r} is registered twice: by {_qualname(other)} from "
                f"{other_owner.distribution} {other_owner.version} (plugin {other_owner.name!r}) and by "
                f"{_qualname(obj)} from {owner.distribution} {owner.version} (plugin {owner.name!r}); "
                f"uninstall one of them or disable one with RLINF_DISABLE_PLUGINS"
            )
        self._entries[key] = (obj, owner)

    def get(self, name: str) -> T:
        """The class registered as ``name``; an unknown name is a :class:`PluginError` that lists
        what is available and which package provides the name, if rlinf knows it."""
        try:
            return self._entries[name.casefold()][0]
        except KeyError:
            raise PluginError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        available = ", ".join(sorted(self.names(), key=str.casefold)) or "none"
        msg = f"unknown {self.kind} {name!r}; installed: {available}"
        provider = KNOWN_PROVIDERS.get(self._attr, {}).get(name.casefold())
        if provider:
            msg += f". {name!r} is provided by {provider}: pip install {provider} (or uv add {provider})"
        return msg

    def owner(self, name: str) -> PluginInfo:
        """The plugin that registered ``name``."""
        self.get(name)
        return self._entries[name.casefold()][1]

    def names(self) -> list[str]:
        return [_plugin_name(obj) for obj, _ in self._entries.values()]

    def items(self) -> list[tuple[str, T]]:
        return [(_plugin_name(obj), obj) for obj, _ in self._entries.values()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.casefold() in self._entries

    def __iter__(self) -> Iterator[T]:
        return iter([obj for obj, _ in self._entries.values()])

    def __len__(self) -> int:
        return len(self._entries)


class PluginHost:
    """The plugins of one process and the registries they contribute.

    Build it with :func:`load_plugins`. ``failures`` lists plugins that could not be loaded (or
    whose registration hook failed); ``warnings`` lists filter names that matched nothing.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.plugins: dict[str, PluginInfo] = {}
        self.failures: list[PluginFailure] = []
        self.warnings: list[str] = []

    # -- registries -----------------------------------------------------------------------------
    @cached_property
    def hardware(self) -> Registry[Any]:
        """Hardware types (:class:`~rlinf_core.hardware.HardwarePlugin` subclasses)."""
        return self._build("hardware")

    @cached_property
    def algorithms(self) -> Registry[Any]:
        """Algorithms (:class:`~rlinf_core.algorithm.Algorithm` subclasses)."""
        return self._build("algorithms")

    @cached_property
    def schedulers(self) -> Registry[Any]:
        """Schedulers (:class:`~rlinf_core.scheduler.Scheduler` subclasses)."""
        return self._build("schedulers")

    @cached_property
    def network_providers(self) -> Registry[Any]:
        """Network providers (:class:`~rlinf_core.network.NetworkProvider` subclasses)."""
        return self._build("network_providers")

    @cached_property
    def models(self) -> Registry[Any]:
        """Model types (:class:`~rlinf_core.model.ModelType` subclasses), by ``model.type``."""
        return self._build("models")

    @cached_property
    def env_families(self) -> Registry[Any]:
        """Env families (:class:`~rlinf_core.envs.EnvFamily` subclasses), by ``env.family``."""
        return self._build("env_families")

    @cached_property
    def rewards(self) -> Registry[Any]:
        """Reward functions (:class:`~rlinf_core.reward.RewardFunction` subclasses), by
        ``reward.name``."""
        return self._build("rewards")

    @cached_property
    def rollout_engines(self) -> Registry[Any]:
        """Rollout engines (:class:`~rlinf_core.rollout.RolloutEngine` subclasses), by
        ``rollout.engine``."""
        return self._build("rollout_engines")

    @cached_property
    def tools(self) -> Registry[Any]:
        """Tools agents call, by ``tools[].name``: functions (named by ``__name__``) and
        :class:`~rlinf_core.tools.ToolSet` subclasses (named by ``PLUGIN_NAME``)."""
        from rlinf_core.tools import ToolSet

        registry: Registry[Any] = Registry("tool", "tools")
        for owner, result in self._results("rlinf_register_tools"):
            for obj in result:
                if isinstance(obj, type):
                    if not issubclass(obj, ToolSet):
                        raise PluginError(
                            f"plugin {owner.label} returned the class {_qualname(obj)} from rlinf_register_tools(); "
                            "expected a function or a subclass of rlinf_core.tools.ToolSet"
                        )
                    name = getattr(obj, "PLUGIN_NAME", None)
                    if not isinstance(name, str) or not name.strip():
                        raise PluginError(f"plugin {owner.label}: {_qualname(obj)} has no PLUGIN_NAME string")
                elif callable(obj) and isinstance(getattr(obj, "__name__", None), str):
                    name = obj.__name__
                else:
                    raise PluginError(
                        f"plugin {owner.label} returned {obj!r} from rlinf_register_tools(); "
                        "expected a function or a subclass of rlinf_core.tools.ToolSet"
                    )
                registry._add(name, obj, owner)
        return registry

    @cached_property
    def envs(self) -> dict[str, Any]:
        """Environment specs by gymnasium id (:class:`~rlinf_core.envs.EnvSpec`)."""
        from rlinf_core.envs import EnvSpec

        out: dict[str, tuple[Any, PluginInfo]] = {}
        for owner, result in self._results("rlinf_register_envs"):
            for spec in result:
                if not isinstance(spec, EnvSpec):
                    raise PluginError(
                        f"plugin {owner.label} returned {spec!r} from rlinf_register_envs; expected rlinf_core.envs.EnvSpec"
                    )
                if spec.id in out:
                    other = out[spec.id][1]
                    raise PluginError(
                        f"environment id {spec.id!r} is registered twice: by plugin {other.label} and by plugin {owner.label}"
                    )
                out[spec.id] = (spec, owner)
        return {k: v[0] for k, v in out.items()}

    def _results(self, hook_name: str) -> Iterator[tuple[PluginInfo, list[Any]]]:
        """Each plugin's own result of a registration hook, in registration order."""
        caller = getattr(self.pm.hook, hook_name)
        for impl in reversed(caller.get_hookimpls()):  # pluggy keeps them last-registered-first
            owner = self.plugins.get(impl.plugin_name) or _in_process_info(impl.plugin_name, impl.plugin)
            try:
                result = impl.function()
            except Exception as err:
                raise PluginError(
                    f"plugin {owner.label}: {hook_name}() raised {type(err).__name__}: {err}"
                ) from err
            if result is None:
                continue
            if not isinstance(result, list | tuple):
                raise PluginError(
                    f"plugin {owner.label}: {hook_name}() must return a list, got {type(result).__name__}"
                )
            yield owner, list(result)

    def _build(self, attr: str) -> Registry[Any]:
        hook_name, kind, base_path = _REGISTRIES[attr]
        base = _import_object(base_path)
        registry: Registry[Any] = Registry(kind, attr)
        for owner, result in self._results(hook_name):
            for cls in result:
                if not (isinstance(cls, type) and issubclass(cls, base)):
                    raise PluginError(
                        f"plugin {owner.label} returned {cls!r} from {hook_name}(); expected a subclass of {base_path.replace(':', '.')}"
                    )
                name = getattr(cls, "PLUGIN_NAME", None)
                if not isinstance(name, str) or not name.strip():
                    raise PluginError(f"plugin {owner.label}: {_qualname(cls)} has no PLUGIN_NAME string")
                registry._add(name, cls, owner)
        return registry

    # -- commands and description ---------------------------------------------------------------
    def register_commands(self, cli: Any) -> None:
        """Let every plugin add its subcommands to ``cli``; a plugin whose hook fails is recorded
        in :attr:`failures` and the others still register."""
        for impl in reversed(self.pm.hook.rlinf_register_commands.get_hookimpls()):
            owner = self.plugins.get(impl.plugin_name) or _in_process_info(impl.plugin_name, impl.plugin)
            try:
                impl.function(cli=cli)
            except Exception as err:
                self.failures.append(
                    PluginFailure(
                        owner.name,
                        owner.distribution,
                        owner.version,
                        f"rlinf_register_commands raised {type(err).__name__}: {err}",
                        traceback.format_exc(),
                    )
                )

    def describe(self) -> list[dict[str, Any]]:
        """For ``rlinf plugins``: each plugin with what it registers, by kind."""
        import click

        rows = []
        for name, info in self.plugins.items():
            plugin = self.pm.get_plugin(name)
            registers: dict[str, list[str]] = {}
            errors: list[str] = []
            for attr, (hook_name, _, _) in _REGISTRIES.items():
                registers[attr] = _names_from(plugin, hook_name, errors, lambda c: _plugin_name(c))
            registers["envs"] = _names_from(
                plugin, "rlinf_register_envs", errors, lambda s: getattr(s, "id", repr(s))
            )
            registers["tools"] = _names_from(plugin, "rlinf_register_tools", errors, _plugin_name)
            # functions chosen by name (algorithm.adv_estimator / algorithm.policy_loss)
            for kind in ("advantage_estimators", "policy_losses"):
                registers[kind] = _names_from(plugin, f"rlinf_register_{kind}", errors, _plugin_name)
            group = click.Group("rlinf")
            fn = getattr(plugin, "rlinf_register_commands", None)
            if fn is not None:
                try:
                    fn(cli=group)
                except Exception as err:
                    errors.append(f"rlinf_register_commands: {type(err).__name__}: {err}")
            registers["commands"] = sorted(group.commands)
            row: dict[str, Any] = {
                "name": info.name,
                "distribution": info.distribution,
                "version": info.version,
                "module": info.module,
                "registers": registers,
            }
            if errors:
                row["errors"] = errors
            rows.append(row)
        return rows


def _names_from(plugin: Any, hook_name: str, errors: list[str], name_of: Callable[[Any], str]) -> list[str]:
    fn = getattr(plugin, hook_name, None)
    if fn is None:
        return []
    try:
        result = fn() or []
    except Exception as err:
        errors.append(f"{hook_name}: {type(err).__name__}: {err}")
        return []
    return [name_of(x) for x in result]


def _plugin_name(obj: Any) -> str:
    return str(getattr(obj, "PLUGIN_NAME", getattr(obj, "__name__", repr(obj))))


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _import_object(path: str) -> Any:
    import importlib

    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _in_process_info(name: str, plugin: Any) -> PluginInfo:
    return PluginInfo(name, "(in-process)", "-", getattr(plugin, "__name__", repr(plugin)))


def _env_list(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None or not raw.strip():
        return None
    return {x.strip() for x in raw.split(",") if x.strip()}


def _dist_of(ep: md.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown distribution", "?"
    return dist.metadata["Name"] or "unknown distribution", dist.version or "?"


def _discover(group: str) -> list[md.EntryPoint]:
    seen: set[tuple[str, str]] = set()
    out = []
    for ep in sorted(md.entry_points(group=group), key=lambda e: e.name):
        if (ep.name, ep.value) in seen:  # the same distribution visible twice on sys.path
            continue
        seen.add((ep.name, ep.value))
        out.append(ep)
    return out


def load_plugins(
    *,
    entry_points: Iterable[md.EntryPoint] | None = None,
    extra: Iterable[tuple[str, Any]] = (),
    group: str = ENTRY_POINT_GROUP,
) -> PluginHost:
    """Build a plugin manager and load plugins; return the :class:`PluginHost`.

    Parameters:
        entry_points: the entry points to load; by default those of ``group`` installed in this
            environment, filtered by ``RLINF_DISABLE_PLUGINS`` / ``RLINF_LOAD_PLUGINS``.
        extra: ``(name, module_or_object)`` pairs registered in-process after the entry points
            (for library users and tests); they are not filtered.
        group: the entry-point group.

    A plugin that fails to import, implements an unknown ``rlinf_*`` hook, or whose name is
    taken is recorded in ``host.failures`` (with its distribution and version) and skipped.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    host = PluginHost(pm)

    eps = _discover(group) if entry_points is None else list(entry_points)
    disabled = _env_list("RLINF_DISABLE_PLUGINS") or set()
    only = _env_list("RLINF_LOAD_PLUGINS")
    names = {ep.name for ep in eps}
    for var, wanted in (("RLINF_DISABLE_PLUGINS", disabled), ("RLINF_LOAD_PLUGINS", only or set())):
        for unknown in sorted(wanted - names):
            host.warnings.append(
                f"{var} names {unknown!r}, which is not an installed plugin (installed: {', '.join(sorted(names)) or 'none'})"
            )

    for ep in eps:
        if ep.name in disabled or (only is not None and ep.name not in only):
            continue
        dist, version = _dist_of(ep)
        if pm.has_plugin(ep.name):
            other = host.plugins[ep.name]
            host.failures.append(
                PluginFailure(
                    ep.name,
                    dist,
                    version,
                    f"entry-point name already used by {other.distribution} {other.version}",
                )
            )
            continue
        try:
            module = ep.load()
        except BaseException as err:  # a broken plugin must not take the CLI down (SystemExit too)
            if isinstance(err, KeyboardInterrupt):
                raise
            host.failures.append(
                PluginFailure(
                    ep.name,
                    dist,
                    version,
                    f"import of {ep.value} raised {type(err).__name__}: {err}",
                    traceback.format_exc(),
                )
            )
            continue
        _register(host, ep.name, module, PluginInfo(ep.name, dist, version, ep.value))

    for name, obj in extra:
        _register(host, name, obj, _in_process_info(name, obj))
    return host


def _register(host: PluginHost, name: str, obj: Any, info: PluginInfo) -> None:
    pm = host.pm
    try:
        pm.register(obj, name=name)
        pm.check_pending()
    except (pluggy.PluginValidationError, ValueError) as err:
        if pm.is_registered(obj):
            pm.unregister(obj)
        known = ", ".join(n for n in dir(hookspecs) if n.startswith("rlinf_"))
        host.failures.append(
            PluginFailure(
                info.name,
                info.distribution,
                info.version,
                f"{err} (known hooks: {known})",
                traceback.format_exc(),
            )
        )
        return
    host.plugins[name] = info

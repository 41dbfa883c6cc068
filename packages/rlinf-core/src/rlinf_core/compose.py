"""Composing a run configuration with Hydra: the first step every config file takes.

:func:`compose` turns a config file (or a mapping) and command-line overrides into one plain
mapping, in this order:

1. **Defaults lists**, composed by ``hydra-core``'s compose API (``hydra.compose``; never
   ``@hydra.main``: no working-directory change, no ``outputs/`` folder, no logging set up, and
   no ``_target_`` is ever instantiated). A file's ``defaults:`` list names other files, merged
   in list order as Hydra does: ``group: name`` (the file ``group/name.yaml``, its content at
   the package ``group``), ``group@target.path: name``, ``optional group: name``,
   ``override group: name`` (in the primary config, at the end of its list), ``group: null``,
   ``group: [a, b]``, choices interpolated from other choices (``${model}_data``), ``# @package``
   headers and ``_self_`` (last when not listed). Groups are relative to the including file's
   folder (``/group``: to the primary config's), packages relative to its package. Two things
   stay as rlinf had them (docs/design/core.md, "Configuration on Hydra"): a ``group/name``
   string entry is a choice the command line may swap, like ``group: name``, and Hydra's own
   ``hydra:`` section and ``hydra/...`` groups are dropped. Every file is read with rlinf's
   guards (size, NUL bytes, alias bombs, depth).
2. **Command-line overrides.** ``group=name`` (or ``group@package=name``; the package may be
   left out when the group is listed at one package) swaps a defaults choice, ``+group=name``
   adds one and ``~group`` removes one (when ``group/`` is a folder next to the config): these
   go to Hydra. Every other override is a value override
   (:func:`rlinf_core.config.apply_overrides`): ``key=value``, ``+key=value``, ``++key=value``,
   ``~key``.
3. **Interpolation.** ``${a.b}`` (the value at ``a.b``), ``${oc.env:NAME,default}`` (an
   environment variable) and OmegaConf's other ``oc.*`` resolvers, resolved with OmegaConf
   (imported only when a config has ``${`` or ``???``); ``???`` marks a value that must be given.
   What ``${oc.env:NAME}`` brought in (an API key given to workers through ``env_vars``) is a
   secret: :meth:`Composition.unresolved` puts the interpolation back where the value stands
   (what a run's ``config.yaml``, ``--print-config`` and ``--dry-run`` show, as Hydra keeps
   interpolations unresolved in what it saves), and :func:`mask_secrets` replaces the values this
   process resolved wherever they appear (error messages, text written elsewhere).

A file without a ``defaults:`` list, given no group override, has nothing to compose: it skips
Hydra (and its import). Every problem, Hydra's included, is one :class:`ConfigError` line that
names the file (or the override) and the key or entry. :func:`sweep` expands ``--multirun``
overrides (``runner.seed=0,1,2``) into one override list per run.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import math
import re
import threading
import warnings
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlinf_core.config import apply_overrides, describe_value, parse_override, parse_yaml
from rlinf_core.errors import ConfigError
from rlinf_core.interpolation import (
    MAX_INTERPOLATED_CHARS,
    MAX_INTERPOLATION_STEPS,
    MAX_RESOLVED_CHARS,
    check_bounds,
    env_interpolations,
    key_parts,
    mask_secrets,
    remember_env_secrets,
    value_at,
)
from rlinf_core.io import MAX_USER_FILE_BYTES, read_user_text

__all__ = [
    "MAX_CONFIG_FILES",
    "MAX_INTERPOLATED_CHARS",
    "MAX_INTERPOLATION_STEPS",
    "MAX_RESOLVED_CHARS",
    "MAX_SWEEP_RUNS",
    "Composition",
    "compose",
    "compose_traced",
    "load_config",
    "mask_secrets",
    "needs_resolution",
    "sweep",
]

MAX_CONFIG_FILES = 1000
"""How many files one composition may read (a guard against runaway defaults lists)."""

MAX_SWEEP_RUNS = 10_000
"""The most runs one ``--multirun`` may expand to."""


def load_config(
    path: str | Path, overrides: Iterable[str] = (), *, what: str = "config file"
) -> dict[str, Any]:
    """:func:`compose` of the file at ``path``: what every rlinf command reads a config with."""
    return compose(Path(path), overrides, what=what)


@dataclass(frozen=True)
class Composition:
    """What :func:`compose_traced` made: ``data`` (the composed mapping), ``primary`` (the
    primary config: its path, or ``"the config"`` for a mapping) and ``origin`` (key path ->
    the file, or the override, that set it)."""

    data: dict[str, Any]
    primary: str
    origin: Mapping[tuple[str, ...], str]
    interpolated: Mapping[tuple[str, ...], tuple[str, Any]] = field(default_factory=dict)
    """Key path -> (the text as written, its resolved value) of every value made with
    ``${oc.env:...}``."""

    def unresolved(self, data: Any) -> Any:
        """``data`` (this composition's data, or what validation made of it: defaults added,
        keys in the same places) with ``${oc.env:...}`` put back where it was written (where the
        value there is still the one it resolved to), and every other occurrence of such a value
        masked (:func:`mask_secrets`): what may be saved and printed."""
        out = copy.deepcopy(data)
        for path, (written, value) in self.interpolated.items():
            parent = value_at(out, path[:-1]) if path else None
            key: Any = path[-1] if path else None
            if isinstance(parent, list) and isinstance(key, str) and key.isdigit():
                key = int(key)
            try:
                if parent is not None and parent[key] == value:
                    parent[key] = written
            except (KeyError, IndexError, TypeError):
                continue
        return mask_secrets(out)

    def source_of(self, path: str) -> str | None:
        """Where the value at the YAML ``path`` (``env.kwargs.x``, ``a.list[0]``; text after a
        space is ignored) came from, when that is not the primary config: another file of a
        defaults list, or the command-line override that set it; ``None`` otherwise."""
        parts = key_parts(path.split(" ", 1)[0])
        if not parts:
            return None
        source = _origin_of(self.origin, parts)
        return None if source in (self.primary, "the config") else source


def compose(
    config: str | Path | Mapping[str, Any],
    overrides: Iterable[str] = (),
    *,
    base_dir: str | Path | None = None,
    what: str = "config file",
) -> dict[str, Any]:
    """The composed, overridden and resolved configuration of ``config`` (a file path or a
    mapping), as a plain ``dict``. ``base_dir``: the folder the defaults of a mapping are
    relative to (default: the current directory; a file's own folder for a path)."""
    return compose_traced(config, overrides, base_dir=base_dir, what=what).data


def compose_traced(
    config: str | Path | Mapping[str, Any],
    overrides: Iterable[str] = (),
    *,
    base_dir: str | Path | None = None,
    what: str = "config file",
) -> Composition:
    """:func:`compose`, with where every key came from (:class:`Composition`), so that later
    problems can name the file or override that set a bad value."""
    overrides = list(overrides)
    if isinstance(config, str | Path):
        path = Path(config)
        root = path.parent
        data, _ = _read(path, what)  # the primary config is the top: a package header means nothing
        source = str(path)
    elif isinstance(config, Mapping):
        root = Path(base_dir) if base_dir is not None else Path(".")
        data, source = copy.deepcopy(dict(config)), "the config"
    else:
        raise ConfigError(f"a config is a file path or a mapping, got {type(config).__name__}")
    group_overrides, value_overrides = _split_overrides(overrides, root, data)
    origin: ChainMap[tuple[str, ...], str] = ChainMap({})  # the overrides' first, then the files'
    if "defaults" in data or group_overrides:
        out, files = _compose_with_hydra(root, data, source, group_overrides)
        origin.maps.append(files)
    else:  # nothing to compose: Hydra (and its import) would return the file as it is
        out = data
        origin.maps.append({(): source})
    if value_overrides:
        out = apply_overrides(out, value_overrides)
        for raw in value_overrides:
            _, key, _, _ = parse_override(raw)
            origin[tuple(key.split("."))] = f"override {raw!r}"
    if isinstance(out.get("hydra"), Mapping):
        del out["hydra"]  # Hydra's own settings (run dir, search path, job logging): not the task's
    interpolated: dict[tuple[str, ...], tuple[str, Any]] = {}
    if needs_resolution(out):
        written = dict(env_interpolations(out, ()))
        check_bounds(out, lambda path: _origin_of(origin, list(path)))
        out = _resolve(out, origin)
        for path, text in written.items():
            value = value_at(out, path)
            interpolated[path] = (text, value)
            remember_env_secrets(text)
    return Composition(out, source, origin, interpolated)


# -- reading files -------------------------------------------------------------------------------


def _read(path: Path, what: str) -> tuple[dict[str, Any], str]:
    """``(mapping, its first 512 characters)`` of one YAML file, with :func:`parse_yaml`'s
    guards (the head holds Hydra's ``# @package`` header, if any)."""
    text = read_user_text(path, what=what, max_bytes=MAX_USER_FILE_BYTES, error=ConfigError)
    data = parse_yaml(text, source=str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data, text[:512]


# -- the defaults tree, composed by Hydra --------------------------------------------------------

_PRIMARY = "__rlinf_primary__"
"""The name Hydra knows the primary config by (a file of any name, or a mapping)."""
_SCHEME = "rlinf"
_LOCK = threading.RLock()
"""Hydra keeps its state in process globals (``GlobalHydra``): one composition at a time."""
_UNDER_WAY: list[_Request] = []


@dataclass
class _Request:
    """One composition under way: what the guarded config source serves Hydra, and what it read."""

    root: Path
    primary: dict[str, Any]
    primary_source: str
    files: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """Hydra's config path (``env/maniskill``) -> (the file, its mapping as written)."""
    heads: dict[str, str] = field(default_factory=dict)
    """A file -> its first 512 characters (its ``# @package`` header)."""
    pinned: dict[str, str] = field(default_factory=dict)
    """An override given to Hydra -> the override as the user wrote it."""


def _compose_with_hydra(
    root: Path, primary: dict[str, Any], source: str, group_overrides: list[str]
) -> tuple[dict[str, Any], Mapping[tuple[str, ...], str]]:
    """The defaults tree of ``primary`` composed by Hydra's compose API (``hydra.compose``), with
    ``group_overrides`` (``group=name``, ``+group=name``, ``~group``); every file read through
    :func:`_read`'s guards. Returns the composed mapping (interpolations left as written) and
    where every key came from (worked out from Hydra's defaults list when first asked: only
    error messages ask)."""
    from hydra import compose as hydra_compose
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    request = _Request(root, primary, source)
    with _hydra(request, group_overrides) as loader:
        if any(_unpinned(o) for o in group_overrides):
            listed = _override_keys(loader.compute_defaults_list(_PRIMARY, [], RunMode.RUN).defaults_tree)
            group_overrides[:] = [_pin(o, listed, request) for o in group_overrides]
        data = OmegaConf.to_container(hydra_compose(_PRIMARY, group_overrides), resolve=False)
    assert isinstance(data, dict)

    def origins() -> dict[tuple[str, ...], str]:
        try:
            with _hydra(request, group_overrides) as loader:
                chosen = loader.compute_defaults_list(_PRIMARY, group_overrides, RunMode.RUN).defaults
        except ConfigError:  # a file changed since: name the primary config
            return {(): source}
        return _origins(chosen, request)

    return data, _Lazy(origins)


class _Lazy(Mapping[tuple[str, ...], str]):
    """A mapping made by ``make`` when first read."""

    def __init__(self, make: Callable[[], dict[tuple[str, ...], str]]) -> None:
        self._make = make
        self._data: dict[tuple[str, ...], str] | None = None

    def _get(self) -> dict[tuple[str, ...], str]:
        if self._data is None:
            self._data = self._make()
        return self._data

    def __getitem__(self, key: tuple[str, ...]) -> str:
        return self._get()[key]

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


@contextlib.contextmanager
def _hydra(request: _Request, overrides: list[str]) -> Iterator[Any]:
    """Hydra initialised on ``request``'s folder (what ``initialize_config_dir`` does, with
    rlinf's guarded config source), yielding its config loader. Hydra's global state
    (``GlobalHydra``, its version base) is saved before and put back after, so that composing
    again, or a program that uses Hydra itself, finds it as it was; Hydra's exceptions become
    one :class:`ConfigError` line naming the file and the entry."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    _guarded_source()
    with _LOCK, warnings.catch_warnings():
        backup = get_gh_backup()
        base = version.VersionBase.instance().getbase()
        _UNDER_WAY.append(request)
        try:
            GlobalHydra.instance().clear()
            warnings.filterwarnings("ignore", message=".*Defaults list is missing `_self_`")  # it goes last
            version.setbase("1.3")
            search_path = create_config_search_path(f"{_SCHEME}://{request.root.absolute()}")
            Hydra.create_main_hydra2(task_name="rlinf", config_search_path=search_path)
            yield GlobalHydra.instance().config_loader()
        except ConfigError:
            raise
        except Exception as err:  # Hydra's exceptions, as one line naming the file and the entry
            raise _hydra_problem(err, request, overrides) from None
        finally:
            _UNDER_WAY.pop()
            restore_gh_from_backup(backup)
            version.VersionBase.instance().version_base = base


@functools.cache
def _guarded_source() -> type:
    """Hydra's config source for rlinf (scheme ``rlinf://``): Hydra's file source, except that
    each file is read with :func:`_read`'s guards (size, NUL bytes, alias bombs, depth: one
    :class:`ConfigError` line naming the file), its defaults list checked with rlinf's messages
    and its ``group/name`` entries made choices the command line may swap, as before."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
    from omegaconf import OmegaConf

    class RlinfConfigSource(ConfigSource):
        @staticmethod
        def scheme() -> str:
            return _SCHEME

        def load_config(self, config_path: str) -> ConfigResult:
            request = _UNDER_WAY[-1]
            name = self._normalize_file_name(config_path)
            if name == f"{_PRIMARY}.yaml":
                data, source, header = request.primary, request.primary_source, ""
            elif name.removesuffix(".yaml") in request.files:  # read once per composition
                source, data = request.files[name.removesuffix(".yaml")]
                header = request.heads.get(source, "")
            else:
                path = request.root / name
                if not path.is_file():
                    raise ConfigLoadError(f"Config not found : {path}")
                if len(request.files) >= MAX_CONFIG_FILES:
                    raise ConfigError(
                        f"{request.primary_source}: the defaults lists name more than {MAX_CONFIG_FILES} files"
                    )
                data, header = _read(path, "config file")
                source = str(path)
                request.heads[source] = header
            request.files[name.removesuffix(".yaml")] = (source, data)
            data = {k: v for k, v in data.items() if k != "hydra"}  # Hydra's own settings: dropped
            if "defaults" in data:
                data["defaults"] = _hydra_defaults(data["defaults"], source)
            try:
                header_dict = ConfigSource._get_header_dict(header)
            except ValueError as err:
                raise ConfigError(f"{source}: {_first_line(err)}") from None
            return ConfigResult(
                config=OmegaConf.create(data, flags={"allow_objects": True}),
                path=f"{self.scheme()}://{self.path}",
                provider=self.provider,
                header=header_dict,
            )

        def available(self) -> bool:
            return True

        def is_group(self, config_path: str) -> bool:
            return (_UNDER_WAY[-1].root / config_path).is_dir()

        def is_config(self, config_path: str) -> bool:
            name = self._normalize_file_name(config_path)
            return name == f"{_PRIMARY}.yaml" or (_UNDER_WAY[-1].root / name).is_file()

        def list(self, config_path: str, results_filter: Any) -> list[str]:
            files: list[str] = []
            folder = _UNDER_WAY[-1].root / config_path
            for entry in sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []:
                path = f"{config_path}/{entry}" if config_path else entry
                self._list_add_result(files, path, entry, results_filter)
            return sorted(set(files))

    Plugins.instance().register(RlinfConfigSource)
    return RlinfConfigSource


_VALID = "valid: `group/name`, `group/name@package`, `group: name`, `optional group: name`, `_self_`"


def _hydra_defaults(defaults: Any, source: str) -> list[Any]:
    """``defaults`` checked with rlinf's messages, in Hydra's form: a ``group/name`` (or
    ``group/name@package``) entry becomes ``group: name`` (``group@package: name``), which the
    command line may swap as it could before (Hydra swaps only the mapping form)."""
    if not isinstance(defaults, list):
        raise ConfigError(
            f"{source}: defaults: must be a list (of `group/name`, `group: name` or `_self_`), got "
            f"{describe_value(defaults)}"
        )
    out: list[Any] = []
    for i, item in enumerate(defaults):
        where = f"{source}: defaults[{i}]"
        if isinstance(item, str):
            text = item.strip()
            spec, at, pkg = text.partition("@")
            if not spec.strip():
                raise ConfigError(f"{where}: {describe_value(item)} names no file; {_VALID}")
            group, _, name = spec.strip().rpartition("/")
            if not _is_hydra_group(group):
                out.append({f"{group}{at}{pkg.strip()}": name} if group and name else text)
            continue
        if isinstance(item, Mapping) and len(item) == 1:
            ((key, value),) = item.items()
            words = str(key).split()
            while len(words) > 1 and words[0] in ("optional", "override"):
                words = words[1:]
            if len(words) != 1:
                raise ConfigError(f"{where}: {describe_value(dict(item))} is not a defaults entry; {_VALID}")
            if isinstance(value, list):
                value = [str(v) for v in value]
            elif isinstance(value, int | float) and not isinstance(value, bool):
                value = str(value)
            elif value is not None and not isinstance(value, str):
                raise ConfigError(
                    f"{where}: {words[0].partition('@')[0]}: the choice must be a file name, got "
                    f"{describe_value(value)}"
                )
            if not _is_hydra_group(words[0].partition("@")[0]):
                out.append({str(key): value})
            continue
        raise ConfigError(f"{where}: {describe_value(item)} is not a defaults entry; {_VALID}")
    return out


def _override_keys(tree: Any) -> set[str]:
    """The ``group@package`` keys of every group entry in Hydra's defaults tree."""
    from hydra.core.default_element import GroupDefault

    keys: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        element = getattr(node, "node", node)
        if isinstance(element, GroupDefault):
            keys.add(element.get_override_key())
        stack.extend(getattr(node, "children", None) or [])
    return keys


def _unpinned(override: str) -> bool:
    """Whether ``override`` chooses (or deletes) a group's file without naming its package."""
    return not override.startswith("+") and "@" not in override.partition("=")[0]


def _pin(override: str, listed: set[str], request: _Request) -> str:
    """``group=name`` (or ``~group``) with the package at which the defaults lists name
    ``group``, when that is not the group's own: Hydra matches ``group@package`` only, rlinf
    has always let a group listed at one package be chosen by its name alone."""
    if not _unpinned(override):
        return override
    key, eq, name = override.partition("=")
    group = key.lstrip("~")
    keys = {k for k in listed if k.partition("@")[0] == group}
    if not keys:
        raise ConfigError(
            f"override {override!r}: no {group!r} in the defaults lists to choose from; add it with "
            f"+{override.lstrip('~+')}"
        )
    if len(keys) > 1:
        options = ", ".join(f"{k}=..." for k in sorted(keys))
        raise ConfigError(
            f"override {override!r}: group {group!r} is listed at several packages; name one: {options}"
        )
    (pinned,) = keys
    request.pinned[f"{key[:1] if key.startswith('~') else ''}{pinned}{eq}{name}"] = override
    return f"{'~' if key.startswith('~') else ''}{pinned}{eq}{name}"


def _is_hydra_group(group: str) -> bool:
    """Hydra's own groups (``hydra/job_logging``...) configure Hydra's application runner, not
    the run (the compose API uses none of them): skipped, as before."""
    group = group.strip("/")
    return group == "hydra" or group.startswith("hydra/")


def _origins(chosen: Sequence[Any], request: _Request) -> dict[tuple[str, ...], str]:
    """Key path -> the file that set it, replaying Hydra's defaults list (its ``_self_`` order)
    over the files it read: what error messages name."""
    shadow: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    for item in chosen:
        path = item.config_path
        if path is None or path not in request.files:  # Hydra's own configs (hydra/...)
            continue
        source, data = request.files[path]
        content = {k: v for k, v in data.items() if k != "defaults"}
        parts = [p for p in (item.package or "").split(".") if p]
        node = shadow
        for i, part in enumerate(parts):
            if not isinstance(node.get(part), dict):
                node[part] = {}
                origin[tuple(parts[: i + 1])] = source
            node = node[part]
        _deep_merge(node, content, tuple(parts), origin, source)
    return origin


def _deep_merge(
    into: dict[str, Any],
    new: Mapping[str, Any],
    path: tuple[str, ...],
    origin: dict[tuple[str, ...], str],
    source: str,
) -> None:
    for key, value in new.items():
        here = (*path, str(key))
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value, here, origin, source)
            continue
        into[key] = value
        for sub in _paths(value, here):
            origin[sub] = source


def _paths(value: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    yield path
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _paths(v, (*path, str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, str(i)))


def _first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (of its cause's, when it has none)."""
    while not str(err).strip() and (err.__cause__ or err.__context__) is not None:
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _hydra_problem(err: Exception, request: _Request, overrides: list[str]) -> ConfigError:
    """One :class:`ConfigError` line for what Hydra refused, naming the file and the entry."""
    from hydra.errors import MissingConfigException

    cause: BaseException | None = err
    while cause is not None:  # a guard of the config source, wrapped by Hydra
        if isinstance(cause, ConfigError):
            return cause
        cause = cause.__cause__ or cause.__context__
    if isinstance(err, RecursionError):  # Hydra follows a defaults list that includes itself
        loop = _loop(request)
        if loop:
            parent, child = loop[-2], loop[-1]
            chain = " -> ".join(Path(request.files[p][0]).name for p in loop)
            return ConfigError(
                f"{request.files[parent][0]}: defaults entry {_entry_text(request, parent, child)!r} "
                f"includes itself ({chain})"
            )
    message = _first_line(err)
    match = re.match(r"In '?([^':]*)'?: (.*)", message)
    parent, message = (match.group(1), match.group(2)) if match else (_PRIMARY, message)
    source = request.files.get(parent, (request.primary_source, {}))[0]
    if isinstance(err, MissingConfigException) and err.missing_cfg_file:
        missing = str(err.missing_cfg_file)
        group, _, name = missing.rpartition("/")
        entry = _entry_text(request, parent, group)
        how = f"defaults entry {entry!r}"
        for given in overrides:
            key, _, value = given.partition("=")
            if key.lstrip("+").partition("@")[0] == group and value == name:
                how = f"override {request.pinned.get(given, given)!r}" + (f" (for {how})" if entry else "")
        folder = request.root / group
        options = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
        have = f"; {group or 'it'}/ has: {', '.join(options)}" if options else ""
        return ConfigError(f"{source}: {how}: no file {missing}.yaml in {request.root}{have}")
    choice = re.match(r"You must specify '([^']*)'", message)
    if choice:
        entry = _entry_text(request, parent, choice.group(1).partition("@")[0])
        return ConfigError(
            f"{source}: defaults entry {entry!r} needs a choice: give {choice.group(1)}=NAME on the command line"
        )
    return ConfigError(f"{source}: {message.replace(_PRIMARY, Path(request.primary_source).stem)}")


def _entries(request: _Request, parent: str) -> Iterator[tuple[str, list[str], str]]:
    """``(group, config paths, the entry as written)`` of each entry of ``parent``'s defaults
    list (``parent``: a config path Hydra read), groups and paths from the config root."""
    here = parent.rpartition("/")[0]
    defaults = request.files.get(parent, ("", {}))[1].get("defaults")
    for item in defaults if isinstance(defaults, list) else []:
        if isinstance(item, str):
            text = item.strip()
            spec, _, name = text.partition("@")[0].rpartition("/")
            names = [name]
        elif isinstance(item, Mapping) and len(item) == 1:
            ((key, value),) = item.items()
            spec, text = str(key).split()[-1].partition("@")[0], f"{key}: {value}"
            names = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        else:
            continue
        group = spec.strip("/") if spec.startswith("/") else "/".join(p for p in (here, spec) if p)
        yield group, ["/".join(p for p in (group, n) if p) for n in names], text


def _entry_text(request: _Request, parent: str, group_or_path: str) -> str:
    """The defaults entry of ``parent`` that chooses from a group (or names a config path)."""
    for group, paths, text in _entries(request, parent):
        if group_or_path == group or group_or_path in paths:
            return text
    return ""


def _loop(request: _Request) -> list[str]:
    """A chain of config paths whose defaults lists include the first again, or ``[]``."""
    stack: list[str] = []

    def visit(path: str) -> list[str]:
        if path in stack:
            return [*stack[stack.index(path) :], path]
        if path not in request.files:
            return []
        stack.append(path)
        for _, paths, _ in _entries(request, path):
            found = next((x for x in (visit(p) for p in paths) if x), [])
            if found:
                return found
        stack.pop()
        return []

    return visit(_PRIMARY)


# -- command-line group overrides ----------------------------------------------------------------


def _split_overrides(
    overrides: Sequence[str], root: Path, data: Mapping[str, Any]
) -> tuple[list[str], list[str]]:
    """Overrides that choose a defaults file (``group=name``, ``group@pkg=name``,
    ``+group=name``, ``~group``), written for Hydra, apart from value overrides. An override is
    a group choice when its key has ``@``, or names a folder next to the config that holds
    ``<value>.yaml`` or that the defaults list names."""
    groups: list[str] = []
    values: list[str] = []
    for raw in overrides:
        op, key, value, has_value = parse_override(raw)
        spec, at, pkg = key.partition("@")
        group = (spec.replace(".", "/") if "/" not in spec else spec).strip("/")
        group_dir = root / group
        if op == "delete" and (at or _listed(data, spec)):
            groups.append(f"~{group}{at}{pkg}")
            continue
        if has_value and isinstance(value, str | int | float) and not isinstance(value, bool):
            chooses = group_dir.is_dir() and ((group_dir / f"{value}.yaml").is_file() or _listed(data, spec))
            if not at and not chooses:
                values.append(raw)
                continue
        elif at:
            raise ConfigError(f"override {raw!r}: a group choice takes a file name: {spec}@{pkg}=NAME")
        else:
            values.append(raw)
            continue
        if op == "force":
            raise ConfigError(f"override {raw!r}: ++ sets values; choose a defaults file with {key}=NAME")
        name = str(value)
        if not re.fullmatch(r"[\w\-./]+", name):
            raise ConfigError(
                f"override {raw!r}: {name!r} is not a config file name (letters, digits, _ - . /)"
            )
        groups.append(f"{'+' if op == 'add' else ''}{group}{at}{pkg}={name}")
    return groups, values


def _listed(data: Mapping[str, Any], group: str) -> bool:
    """Whether the primary defaults list names ``group`` (for ``~group``)."""
    defaults = data.get("defaults")
    if not isinstance(defaults, list):
        return False
    for item in defaults:
        text = item if isinstance(item, str) else next(iter(item), "") if isinstance(item, Mapping) else ""
        spec = str(text).split()[-1] if str(text).split() else ""
        spec = spec.partition("@")[0]
        if spec == group or spec.rpartition("/")[0] == group:
            return True
    return False


# -- interpolation ------------------------------------------------------------------------------


def needs_resolution(data: Any) -> bool:
    """Whether ``data`` holds a ``${...}`` interpolation or a ``???`` (a value to be given)."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "${" in item or item == "???":
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _origin_of(origin: Mapping[tuple[str, ...], str], parts: Sequence[str]) -> str:
    for n in range(len(parts), -1, -1):
        if tuple(parts[:n]) in origin:
            return origin[tuple(parts[:n])]
    return "the config"


def _resolve(data: dict[str, Any], origin: Mapping[tuple[str, ...], str]) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    try:
        cfg = OmegaConf.create(data, flags={"allow_objects": True})
        out = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as err:
        parts = key_parts(err.full_key)
        key = ".".join(parts)
        raise ConfigError(
            f"{_origin_of(origin, parts)}: {key}: a value is required (??? in the config); give it on the "
            f"command line: {key}=VALUE"
        ) from None
    except OmegaConfBaseException as err:
        parts = key_parts(getattr(err, "full_key", ""))
        key = ".".join(parts) or "the config"
        written = value_at(data, parts)
        text = f" {describe_value(written)}" if isinstance(written, str) else ""
        message = _message(err)
        if "Environment variable" in message and "not found" in message:
            hint = "; set it, or give a default: ${oc.env:NAME,default}"
        elif "Interpolation key" in message:
            hint = "; interpolations name keys from the top: ${section.key}"
        elif "Unsupported interpolation type" in message:
            hint = (
                "; rlinf resolves ${key.path} and OmegaConf's oc.* resolvers (oc.env, oc.select, oc.decode)"
            )
        else:
            hint = "; write \\${ for a literal ${"
        raise ConfigError(
            f"{_origin_of(origin, parts)}: {key}: cannot resolve{text}: {message}{hint}"
        ) from None
    assert isinstance(out, dict)
    return out


def _message(err: Exception) -> str:
    msg = str(getattr(err, "msg", None) or err).strip()
    msg = msg.splitlines()[0] if msg else type(err).__name__
    msg = re.sub(r"^\w+ raised while resolving interpolation: ", "", msg)
    return msg.strip("\"'") if msg.startswith(('"', "'")) else msg


# -- sweeps -------------------------------------------------------------------------------------


def sweep(overrides: Iterable[str]) -> list[list[str]]:
    """The override lists of a ``--multirun``: ``key=a,b,c`` (a comma outside brackets and
    quotes) or ``key=range(start,stop[,step])`` sweeps a key; the runs are the cartesian product,
    the first swept key varying slowest. ``key=[1,2]`` is one list value, not a sweep."""
    choices: list[list[str]] = []
    for raw in overrides:
        prefix, sep, value = raw.partition("=")
        if not sep or raw.lstrip().startswith("~"):
            choices.append([raw])
            continue
        choices.append([f"{prefix}={v}" for v in _sweep_values(raw, value)])
    runs = math.prod(len(c) for c in choices)
    if runs > MAX_SWEEP_RUNS:
        raise ConfigError(
            f"--multirun: {' x '.join(str(len(c)) for c in choices if len(c) > 1)} = {runs:,} runs "
            f"(at most {MAX_SWEEP_RUNS:,}); sweep fewer values"
        )
    return [list(combo) for combo in itertools.product(*choices)]


_INT = r"-?\d{1,18}"
_RANGE = re.compile(rf"^\s*range\(\s*({_INT})\s*(?:,\s*({_INT})\s*)?(?:,\s*({_INT})\s*)?\)\s*$")


def _short(raw: str, limit: int = 80) -> str:
    return repr(raw) if len(raw) <= limit else repr(raw[: limit - 3] + "...")


def _sweep_values(raw: str, value: str) -> list[str]:
    match = _RANGE.match(value)
    if match is None and value.strip().startswith("range("):
        raise ConfigError(
            f"override {_short(raw)}: a sweep range is range(stop), range(start, stop) or "
            "range(start, stop, step) of whole numbers written out (at most 18 digits)"
        )
    if match:
        a, b, c = match.groups()
        start, stop = (0, int(a)) if b is None else (int(a), int(b))
        step = int(c) if c is not None else 1
        if step == 0:
            raise ConfigError(f"override {raw!r}: range step must not be 0")
        span = range(start, stop, step)
        if not span:
            raise ConfigError(f"override {raw!r}: the range is empty")
        if len(span) > MAX_SWEEP_RUNS:
            raise ConfigError(
                f"override {raw!r}: the range has {len(span):,} values (a sweep makes at most "
                f"{MAX_SWEEP_RUNS:,} runs)"
            )
        return [str(v) for v in span]
    parts: list[str] = []
    depth, quote, current = 0, "", []
    for ch in value:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    if len(parts) > 1 and any(not p.strip() for p in parts):
        raise ConfigError(f"override {raw!r}: an empty value in the sweep (write key=a,b,c)")
    return [p.strip() for p in parts]

"""The defaults tree of a config, composed by hydra-core's compose API: the first step of
:func:`rlinf_core.compose.compose` (which applies value overrides and resolves interpolations
after it).

:func:`compose_defaults` initialises Hydra on the primary config's folder (what
``hydra.initialize_config_dir`` does), with rlinf's config source (scheme ``rlinf://``, Hydra's
plugin interface) in place of Hydra's file source, and calls ``hydra.compose``. The source reads
every file with :func:`read_config_file`'s guards, serves the primary config (a file of any
name, or a mapping) from memory, checks each defaults list with rlinf's messages and drops
Hydra's own ``hydra:`` section and ``hydra/...`` groups. Hydra's global state is saved and put
back around each composition, under one lock. What stays rlinf's, and why:
docs/design/core.md, "Configuration on Hydra".
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlinf_core.config import describe_value, parse_yaml
from rlinf_core.errors import ConfigError
from rlinf_core.io import MAX_USER_FILE_BYTES, read_user_text

__all__ = ["MAX_CONFIG_FILES", "compose_defaults", "read_config_file"]

MAX_CONFIG_FILES = 1000
"""How many files one composition may read (a guard against runaway defaults lists)."""


# -- reading files -------------------------------------------------------------------------------


def read_config_file(path: Path, what: str) -> tuple[dict[str, Any], str]:
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


def compose_defaults(
    root: Path, primary: dict[str, Any], source: str, group_overrides: list[str]
) -> tuple[dict[str, Any], Mapping[tuple[str, ...], str]]:
    """The defaults tree of ``primary`` composed by Hydra's compose API (``hydra.compose``), with
    ``group_overrides`` (``group=name``, ``+group=name``, ``~group``); every file read through
    :func:`read_config_file`'s guards. Returns the composed mapping (interpolations left as written) and
    where every key came from (worked out from Hydra's defaults list when first asked: only
    error messages ask)."""
    from hydra import compose as hydra_compose
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    request = _Request(root, primary, source)
    overrides = list(group_overrides)
    with _hydra(request, overrides) as loader:
        if any(_unpinned(o) for o in overrides):
            listed = _override_keys(loader.compute_defaults_list(_PRIMARY, [], RunMode.RUN).defaults_tree)
            overrides = [_pin(o, listed, request) for o in overrides]
        data = OmegaConf.to_container(hydra_compose(_PRIMARY, overrides), resolve=False)
    assert isinstance(data, dict)

    def origins() -> dict[tuple[str, ...], str]:
        try:
            with _hydra(request, overrides) as loader:
                chosen = loader.compute_defaults_list(_PRIMARY, overrides, RunMode.RUN).defaults
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

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (or copied) as the plain mapping it makes
        return (dict, (self._get(),))


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
    each file is read with :func:`read_config_file`'s guards (size, NUL bytes, alias bombs, depth: one
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
                data, header = read_config_file(path, "config file")
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
            try:
                config = OmegaConf.create(data, flags={"allow_objects": True})
            except Exception as err:  # a key OmegaConf cannot hold (null, a list...)
                raise ConfigError(f"{source}: {_first_line(err)}") from None
            return ConfigResult(
                config=config,
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
    """``err``'s message (its cause's, when it has none) as one line: Hydra's hints ("Did you
    mean to override model@actor.model?") kept, its config search path left out."""
    while not str(err).strip() and (err.__cause__ or err.__context__) is not None:
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    lines: list[str] = []
    for line in str(err).strip().splitlines():
        if line.startswith("Config search path"):
            break
        if line.strip():
            lines.append(line.strip())
    return " ".join(lines) if lines else type(err).__name__


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
        have = f"; {group or request.root.name}/ has: {', '.join(options)}" if options else ""
        near = difflib.get_close_matches(name, [*options, *([] if group else ["_self_"])], n=1)
        have += f" (did you mean {near[0]}?)" if near else ""
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

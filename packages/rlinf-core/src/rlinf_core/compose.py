"""Composing a run configuration the way Hydra does: the first step every config file takes.

:func:`compose` turns a config file (or a mapping) and command-line overrides into one plain
mapping, in this order:

1. **Defaults lists.** A file's ``defaults:`` list names other files, merged in list order:
   ``group/name`` (the file ``group/name.yaml`` relative to the primary config's folder, its
   content placed at the package ``group``), ``group/name@target.path`` (placed at
   ``target.path``; ``@_global_`` is the top), ``group: name`` (the same, in Hydra's mapping
   form), ``optional group: name`` (skipped when the file is missing), ``override group: name``
   (changes the choice of a group listed deeper down), ``group: null`` (none) and ``_self_`` (where
   the file's own keys are merged; last when not listed, as in Hydra 1.1+). Included files may
   have ``defaults:`` of their own: their groups are relative to their folder (``/group``: to
   the primary config's folder), their packages relative to theirs. A ``# @package X`` first line
   sets a file's package when the entry gives none. Dictionaries merge key by key; any other value
   (lists included) is replaced by the later one.
2. **Command-line overrides.** ``group=name`` (or ``group@package=name``) swaps a defaults choice
   and ``+group=name`` adds one (when ``group/`` is a folder next to the config); every other
   override is a value override (:func:`rlinf_core.config.apply_overrides`): ``key=value``,
   ``+key=value``, ``++key=value``, ``~key``.
3. **Interpolation.** ``${a.b}`` (the value at ``a.b``), ``${oc.env:NAME,default}`` (an
   environment variable) and OmegaConf's other ``oc.*`` resolvers, resolved with OmegaConf
   (imported only when a config has ``${`` or ``???``); ``???`` marks a value that must be given.
   Hydra's own ``hydra:`` section is dropped. What ``${oc.env:NAME}`` brought in (an API key
   given to workers through ``env_vars``) is a secret: :meth:`Composition.unresolved` puts the
   interpolation back where the value stands (what a run's ``config.yaml``, ``--print-config``
   and ``--dry-run`` show, as Hydra keeps interpolations unresolved in what it saves), and
   :func:`mask_secrets` replaces the values this process resolved wherever they appear (error
   messages, text written elsewhere).

Every problem is one :class:`ConfigError` line that names the file (or the override) and the
key. :func:`sweep` expands ``--multirun`` overrides (``runner.seed=0,1,2``) into one override
list per run.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
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

_SELF = "_self_"
_GLOBAL = "_global_"
_PACKAGE_HEADER = re.compile(r"^#\s*@package\s+(\S+)\s*$")


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
    composer = _Composer(root, group_overrides)
    composer.include_primary(data, source)
    composer.check_unused()
    out = composer.data
    origin = composer.origin
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


def _read(path: Path, what: str) -> tuple[dict[str, Any], str | None]:
    """``(mapping, package header or None)`` of one YAML file, with :func:`parse_yaml`'s guards."""
    text = read_user_text(path, what=what, max_bytes=MAX_USER_FILE_BYTES, error=ConfigError)
    data = parse_yaml(text, source=str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    header = None
    for line in text.splitlines()[:3]:
        match = _PACKAGE_HEADER.match(line.strip())
        if match:
            header = match.group(1)
            break
    return data, header


# -- the defaults tree ---------------------------------------------------------------------------


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)


@dataclass
class _Entry:
    """One item of a defaults list."""

    text: str  # as written, for messages
    group: str  # absolute group folder ("" for the config root), "/"-separated
    names: list[str | None]  # the choice(s); None: nothing
    package: str | None  # the explicit @package, absolute, or None
    optional: bool = False
    is_group: bool = False  # "group: name" (or "group/name"): a choice the command line may swap
    default_package: str = ""  # where it goes without @package or a header: the parent's + its group


@dataclass
class _GroupOverride:
    raw: str
    group: str
    package: str | None
    names: list[str | None]
    add: bool
    used: list[str] = field(default_factory=list)


class _Composer:
    def __init__(self, root: Path, overrides: list[_GroupOverride]) -> None:
        self.root = root
        self.overrides = overrides
        self.data: dict[str, Any] = {}
        self.origin: dict[tuple[str, ...], str] = {}
        self.stack: list[Path] = []
        self.files = 0
        self.in_file: dict[str, _GroupOverride] = {}  # `override group: name` entries of the primary

    def include_primary(self, data: dict[str, Any], source: str) -> None:
        defaults = data.pop("defaults", None)
        entries = self._entries(defaults, source, group="", package="")
        entries += [
            _Entry(
                o.raw, o.group, o.names, o.package, is_group=True, default_package=o.group.replace("/", ".")
            )
            for o in self.overrides
            if o.add
        ]
        if not any(e.group == _SELF for e in entries):
            entries.append(_Entry(_SELF, _SELF, [], None))
        self._compose(entries, data, source, package="")

    def check_unused(self) -> None:
        for o in self.overrides:
            if o.add:
                continue
            if not o.used:
                listed = f"{o.group}@{o.package}" if o.package is not None else o.group
                raise ConfigError(
                    f"override {o.raw!r}: no {listed!r} in the defaults lists to choose from; add it with "
                    f"+{o.raw.lstrip('+')}"
                )
            if o.package is None and len(set(o.used)) > 1:
                options = ", ".join(f"{o.group}@{p}=..." for p in sorted(set(o.used)))
                raise ConfigError(
                    f"override {o.raw!r}: group {o.group!r} is listed at several packages; name one: {options}"
                )

    def _entries(self, defaults: Any, source: str, *, group: str, package: str) -> list[_Entry]:
        if defaults is None:
            return []
        if not isinstance(defaults, list):
            raise ConfigError(
                f"{source}: defaults: must be a list (of `group/name`, `group: name` or `_self_`), got "
                f"{describe_value(defaults)}"
            )
        out: list[_Entry] = []
        for i, item in enumerate(defaults):
            entry = self._entry(item, f"{source}: defaults[{i}]", group=group, package=package)
            if entry is not None and not _is_hydra_group(entry.group):
                out.append(entry)
        return out

    def _entry(self, item: Any, where: str, *, group: str, package: str) -> _Entry | None:
        """One defaults item, with its group folder and package made absolute."""
        valid = "valid: `group/name`, `group/name@package`, `group: name`, `optional group: name`, `_self_`"
        if isinstance(item, str):
            text = item.strip()
            if text == _SELF:
                return _Entry(_SELF, _SELF, [], None)
            spec, _, pkg = text.partition("@")
            spec = spec.strip()
            if not spec:
                raise ConfigError(f"{where}: {describe_value(item)} names no file; {valid}")
            sub, _, name = spec.rpartition("/")
            return _Entry(
                text,
                self._group(sub, group),
                [name],
                self._package(pkg.strip(), package) if pkg else None,
                is_group=bool(sub),
                default_package=self._default_package(sub, package),
            )
        if isinstance(item, Mapping) and len(item) == 1:
            ((key, value),) = item.items()
            words = str(key).split()
            optional = override = False
            while len(words) > 1 and words[0] in ("optional", "override"):
                optional |= words[0] == "optional"
                override |= words[0] == "override"
                words = words[1:]
            if len(words) != 1:
                raise ConfigError(f"{where}: {describe_value(dict(item))} is not a defaults entry; {valid}")
            spec, _, pkg = words[0].partition("@")
            if isinstance(value, list):
                names: list[str | None] = [str(v) for v in value]
            elif value is None:
                names = [None]
            elif isinstance(value, str | int | float) and not isinstance(value, bool):
                names = [str(value)]
            else:
                raise ConfigError(
                    f"{where}: {spec}: the choice must be a file name, got {describe_value(value)}"
                )
            entry = _Entry(
                f"{key}: {value}",
                self._group(spec, group),
                names,
                self._package(pkg.strip(), package) if pkg else None,
                optional=optional,
                is_group=True,
                default_package=self._default_package(spec, package),
            )
            if override:  # Hydra allows it in the primary config only; it is accepted anywhere here
                self.in_file.setdefault(
                    _override_key(entry.group, entry.package),
                    _GroupOverride(entry.text, entry.group, entry.package, names, add=False, used=["file"]),
                )
                return None
            return entry
        raise ConfigError(f"{where}: {describe_value(item)} is not a defaults entry; {valid}")

    @staticmethod
    def _group(spec: str, group: str) -> str:
        spec = spec.strip()
        if spec.startswith("/"):
            return spec.strip("/")
        return "/".join(p for p in (group, spec.strip("/")) if p)

    @staticmethod
    def _default_package(spec: str, parent: str) -> str:
        """A group's package: ``/a/b`` -> ``a.b``; ``a/b`` -> the parent's package + ``a.b``."""
        spec = spec.strip()
        if spec.startswith("/"):
            return spec.strip("/").replace("/", ".")
        return _join(parent, spec.strip("/").replace("/", "."))

    @staticmethod
    def _package(pkg: str, parent: str) -> str:
        if pkg == _GLOBAL:
            return ""
        if pkg.startswith(_GLOBAL + "."):
            return pkg[len(_GLOBAL) + 1 :]
        if pkg == "_here_":
            return parent
        return _join(parent, pkg)

    def _choice(self, entry: _Entry, package: str) -> tuple[list[str | None], str]:
        """The names to load for ``entry`` at ``package``: the command line's choice, then an
        ``override`` entry's, then the entry's own."""
        if not entry.is_group:
            return entry.names, f"defaults entry {entry.text!r}"
        for o in self.overrides:
            if o.add or o.group != entry.group:
                continue
            if o.package is None or o.package == package:
                o.used.append(package)
                return o.names, f"override {o.raw!r} (for defaults entry {entry.text!r})"
        for key in (_override_key(entry.group, package), _override_key(entry.group, None)):
            if key in self.in_file:
                return self.in_file[key].names, f"defaults entry {self.in_file[key].raw!r}"
        return entry.names, f"defaults entry {entry.text!r}"

    def _compose(self, entries: list[_Entry], own: dict[str, Any], source: str, *, package: str) -> None:
        for entry in entries:
            if entry.group == _SELF:
                self._merge(own, package, source)
                continue
            where = entry.package if entry.package is not None else entry.default_package
            names, how = self._choice(entry, where)
            for name in names:
                if name is None:
                    continue
                if name == "???":
                    raise ConfigError(
                        f"{source}: defaults entry {entry.text!r} needs a choice: give "
                        f"{entry.group}=NAME on the command line"
                    )
                self._include(entry, name, source, package, how)

    def _include(self, entry: _Entry, name: str, source: str, parent_package: str, how: str) -> None:
        rel = "/".join(p for p in (entry.group, name) if p) + ".yaml"
        path = self.root / rel
        if not path.is_file():
            if entry.optional:
                return
            folder = self.root / entry.group
            options = sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []
            have = f"; {entry.group or 'it'}/ has: {', '.join(options)}" if options else ""
            raise ConfigError(f"{source}: {how}: no file {rel} in {self.root}{have}")
        resolved = path.resolve()
        if resolved in self.stack:
            chain = " -> ".join(p.name for p in [*self.stack, resolved])
            raise ConfigError(f"{source}: defaults entry {entry.text!r} includes itself ({chain})")
        self.files += 1
        if self.files > MAX_CONFIG_FILES:
            raise ConfigError(f"{source}: the defaults lists name more than {MAX_CONFIG_FILES} files")
        data, header = _read(path, "config file")
        if entry.package is not None:
            package = entry.package
        elif header is not None and header != "_group_":
            package = self._package(header, parent_package)
        else:
            package = entry.default_package
        self.stack.append(resolved)
        defaults = data.pop("defaults", None)
        entries = self._entries(defaults, str(path), group=entry.group, package=package)
        if not any(e.group == _SELF for e in entries):
            entries.append(_Entry(_SELF, _SELF, [], None))
        self._compose(entries, data, str(path), package=package)
        self.stack.pop()

    def _merge(self, content: dict[str, Any], package: str, source: str) -> None:
        parts = [p for p in package.split(".") if p]
        node = self.data
        for i, part in enumerate(parts):
            if not isinstance(node.get(part), dict):
                node[part] = {}
                self.origin[tuple(parts[: i + 1])] = source
            node = node[part]
        _deep_merge(node, copy.deepcopy(content), tuple(parts), self.origin, source)


def _is_hydra_group(group: str) -> bool:
    """Hydra's own groups (``hydra/job_logging``...) configure Hydra, not the run: skipped."""
    return group == "hydra" or group.startswith("hydra/")


def _override_key(group: str, package: str | None) -> str:
    return f"{group}@{package}" if package is not None else group


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


# -- command-line group overrides ----------------------------------------------------------------


def _split_overrides(
    overrides: Sequence[str], root: Path, data: Mapping[str, Any]
) -> tuple[list[_GroupOverride], list[str]]:
    """Overrides that choose a defaults file (``group=name``, ``group@pkg=name``,
    ``+group=name``, ``~group``) apart from value overrides. An override is a group choice when
    its key has ``@``, or names a folder next to the config that holds ``<value>.yaml``."""
    groups: list[_GroupOverride] = []
    values: list[str] = []
    for raw in overrides:
        op, key, value, has_value = parse_override(raw)
        spec, at, pkg = key.partition("@")
        group_dir = root / spec.replace(".", "/") if "/" not in spec else root / spec
        names: list[str | None]
        if op == "delete" and (at or _listed(data, spec)):
            names = [None]
        elif has_value and isinstance(value, str | int | float) and not isinstance(value, bool):
            chooses = group_dir.is_dir() and ((group_dir / f"{value}.yaml").is_file() or _listed(data, spec))
            if not at and not chooses:
                values.append(raw)
                continue
            names = [str(value)]
        elif at:
            raise ConfigError(f"override {raw!r}: a group choice takes a file name: {spec}@{pkg}=NAME")
        else:
            values.append(raw)
            continue
        if op == "force":
            raise ConfigError(f"override {raw!r}: ++ sets values; choose a defaults file with {key}=NAME")
        groups.append(
            _GroupOverride(raw, spec.strip("/"), pkg or None, names, add=op == "add" and names != [None])
        )
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

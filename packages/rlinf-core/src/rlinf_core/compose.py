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

import copy
import itertools
import math
import re
from collections import ChainMap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rlinf_core.config import apply_overrides, describe_value, parse_override
from rlinf_core.errors import ConfigError
from rlinf_core.hydra_defaults import MAX_CONFIG_FILES, compose_defaults, read_config_file
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
        data, _ = read_config_file(
            path, what
        )  # the primary config is the top: a package header means nothing
        source = str(path)
    elif isinstance(config, Mapping):
        root = Path(base_dir) if base_dir is not None else Path(".")
        data, source = copy.deepcopy(dict(config)), "the config"
    else:
        raise ConfigError(f"a config is a file path or a mapping, got {type(config).__name__}")
    group_overrides, value_overrides = _split_overrides(overrides, root, data)
    origin: ChainMap[tuple[str, ...], str] = ChainMap({})  # the overrides' first, then the files'
    if "defaults" in data or group_overrides:
        out, files = compose_defaults(root, data, source, group_overrides)
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

    if not OmegaConf.has_resolver("now"):  # Hydra's ${now:FORMAT}, also where Hydra is not imported
        OmegaConf.register_new_resolver("now", lambda fmt: datetime.now().strftime(fmt), use_cache=True)
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
                "; rlinf resolves ${key.path}, OmegaConf's oc.* resolvers (oc.env, oc.select, oc.decode) "
                "and Hydra's ${now:FORMAT}"
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

"""Configuration helpers shared by every rlinf package: YAML loading, dotted command-line
overrides, and turning pydantic validation errors into :class:`ConfigError` problems that name
their YAML path, the bad value and what would be valid."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rlinf_core.errors import ConfigError, ConfigProblem, format_path, join_path

__all__ = ["apply_overrides", "load_yaml", "validate_model", "validation_problems"]

M = TypeVar("M", bound=BaseModel)

_MAX_INPUT_REPR = 80


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping from ``path``; a missing file, a syntax error or a non-mapping top
    level is a :class:`ConfigError` naming the file (and line and column for syntax errors)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {p}: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"{p}: invalid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def _describe_input(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_INPUT_REPR else text[: _MAX_INPUT_REPR - 3] + "..."


def validation_problems(err: ValidationError, prefix: str = "") -> list[ConfigProblem]:
    """One :class:`ConfigProblem` per pydantic error, with its YAML path (``prefix`` first),
    pydantic's explanation of what is valid, and the value that was given."""
    problems = []
    for e in err.errors(include_url=False):
        loc = [part for part in e["loc"] if not (isinstance(part, str) and part.startswith("function-"))]
        path = join_path(prefix, format_path(loc))
        msg = e["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling; it is not a setting here)"
        elif e["type"] != "missing" and "input" in e and not isinstance(e["input"], Mapping | list):
            msg = f"{msg} (got {_describe_input(e['input'])})"
        problems.append(ConfigProblem(path, msg))
    return problems


def validate_model(model: type[M], data: Any, prefix: str = "") -> M:
    """``model.model_validate(data)``, raising :class:`ConfigError` with YAML paths instead of a
    pydantic ``ValidationError``."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_problems(err, prefix)) from None


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply ``key.sub=value`` overrides (values parsed as YAML) to a copy of ``data``.

    ``runner.max_steps=10`` sets a nested key, creating mappings on the way; ``a.list.0=3``
    indexes into a list. A malformed override is a :class:`ConfigError` that quotes it.
    """
    import copy

    out = copy.deepcopy(data)
    for raw in overrides:
        key, sep, value_text = raw.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {raw!r} is not of the form key.path=value")
        try:
            value = yaml.safe_load(value_text) if value_text.strip() else ""
        except yaml.YAMLError:
            raise ConfigError(f"override {raw!r}: the value is not valid YAML") from None
        parts = key.strip().split(".")
        node: Any = out
        for i, part in enumerate(parts[:-1]):
            node = _child(node, part, parts[: i + 1], raw, create=True)
        _assign(node, parts[-1], value, parts, raw)
    return out


def _child(node: Any, part: str, path: Sequence[str], raw: str, *, create: bool) -> Any:
    if isinstance(node, list):
        idx = _index(node, part, path, raw)
        return node[idx]
    if not isinstance(node, dict):
        raise ConfigError(f"override {raw!r}: {'.'.join(path[:-1])} is not a mapping")
    if part not in node or node[part] is None:
        node[part] = {}
    return node[part]


def _assign(node: Any, part: str, value: Any, path: Sequence[str], raw: str) -> None:
    if isinstance(node, list):
        node[_index(node, part, path, raw)] = value
    elif isinstance(node, dict):
        node[part] = value
    else:
        raise ConfigError(f"override {raw!r}: {'.'.join(path[:-1])} is not a mapping")


def _index(node: list[Any], part: str, path: Sequence[str], raw: str) -> int:
    try:
        idx = int(part)
    except ValueError:
        raise ConfigError(
            f"override {raw!r}: {'.'.join(path[:-1])} is a list; use an index, not {part!r}"
        ) from None
    if not -len(node) <= idx < len(node):
        raise ConfigError(f"override {raw!r}: index {idx} is outside the list of {len(node)} items")
    return idx

"""Configuration helpers shared by every rlinf package: YAML loading, dotted command-line
overrides, the strict base model of configuration sections, and turning pydantic validation
errors into :class:`ConfigError` problems that name their YAML path, the bad value and what would
be valid.

YAML is read in one place, :func:`parse_yaml` (files through :func:`load_yaml`), so every loader
gets the same guards: the file checks of :func:`rlinf_core.io.read_user_text`, nesting at most
:data:`MAX_YAML_DEPTH` deep (no ``RecursionError``), aliases that may not blow the document up
(a "billion laughs" alias bomb is refused before it is built), and keys given twice in one
mapping refused with both lines (YAML would silently keep the second).
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from rlinf_core.errors import ConfigError, ConfigProblem, format_path, join_path
from rlinf_core.io import MAX_USER_FILE_BYTES, read_user_text

__all__ = [
    "MAX_YAML_DEPTH",
    "OVERRIDE_FORMS",
    "ConfigSection",
    "apply_overrides",
    "describe_value",
    "load_yaml",
    "number_problem",
    "parse_override",
    "parse_yaml",
    "validate_model",
    "validation_problems",
]

M = TypeVar("M", bound=BaseModel)

_MAX_INPUT_REPR = 80

MAX_YAML_DEPTH = 64
"""How deeply YAML collections may nest (real configs use under 10 levels)."""

_EXPANSION_FLOOR = 2**20
_EXPANSION_FACTOR = 10
"""Aliases may expand a document to ``_EXPANSION_FACTOR`` times its text, or 1 MiB if more (as
expat bounds entity amplification)."""

_INT64_MAX = 2**63 - 1


def load_yaml(path: str | Path, *, what: str = "config file") -> dict[str, Any]:
    """Read a YAML mapping from ``path`` (a config, an inventory); every problem is one
    :class:`ConfigError` line naming the file: missing, not a regular file, over 16 MiB, not
    UTF-8, a syntax error (with line and column), nested too deeply, an alias bomb, a key given
    twice, or a top level that is not a mapping."""
    p = Path(path)
    text = read_user_text(p, what=what, max_bytes=MAX_USER_FILE_BYTES, error=ConfigError)
    data = parse_yaml(text, source=str(p))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def parse_yaml(text: str, *, source: str = "<string>") -> Any:
    """``yaml.safe_load(text)`` with the guards of this module; ``source`` names the text in
    messages (a file path, or the override it came from)."""
    try:
        loader = yaml.SafeLoader(text)  # its reader refuses control characters (a NUL byte) at once
    except yaml.reader.ReaderError as err:
        raise ConfigError(f"{source}: invalid YAML: {_reader_problem(text, err)}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_tree(node, source, len(text))
        return loader.construct_document(node)
    except ConfigError:
        raise
    except yaml.reader.ReaderError as err:
        raise ConfigError(f"{source}: invalid YAML: {_reader_problem(text, err)}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"{source}: invalid YAML{where}: {_shorten(str(problem))}") from None
    except RecursionError:
        raise ConfigError(
            f"{source}: nested too deeply to read (more than {MAX_YAML_DEPTH} levels); flatten it"
        ) from None
    except (ValueError, OverflowError) as err:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"{source}: cannot read a value: {_shorten(str(err))}") from None
    finally:
        loader.dispose()


def _reader_problem(text: str, err: Any) -> str:
    """What YAML's reader refused (a NUL byte or another control character), and where."""
    pos = int(getattr(err, "position", 0) or 0)
    code = getattr(err, "character", None)
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    what = (
        "a NUL byte"
        if code == 0
        else f"the control character U+{code:04X}"
        if code is not None
        else "a character"
    )
    return (
        f"{what} at line {line}, column {column} (YAML allows no control characters: is it a binary "
        "file, or text saved in UTF-16?)"
    )


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_tree(root: yaml.Node, source: str, text_size: int) -> None:
    """Refuse a composed document that nests too deeply, refers to itself, expands (through
    aliases) far beyond its text, or gives a key twice in one mapping. Iterative: the checks
    themselves never recurse."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_stack.discard(key)
            kids = _children(node)
            size[key] = (
                (len(node.value) if isinstance(node, yaml.ScalarNode) else 0)
                + 2
                + sum(size[id(k)] for k in kids)
            )
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if depth[key] > MAX_YAML_DEPTH:
                raise ConfigError(
                    f"{source}: nested more than {MAX_YAML_DEPTH} levels deep (line "
                    f"{node.start_mark.line + 1}); flatten it"
                )
            continue
        if key in size:
            continue
        if key in on_stack:
            raise ConfigError(
                f"{source}: an alias at line {node.start_mark.line + 1} refers to a value that contains it; "
                "YAML configs cannot be recursive"
            )
        on_stack.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)
    total = size[id(root)]
    if total > max(_EXPANSION_FLOOR, _EXPANSION_FACTOR * text_size):
        raise ConfigError(
            f"{source}: its aliases (*name) expand {text_size:,} characters of YAML to about "
            f"{total:,}; refusing a document that large (a YAML alias bomb?): write fewer aliases"
        )
    _check_duplicate_keys(root, source)


def _check_duplicate_keys(root: yaml.Node, source: str) -> None:
    problems: list[ConfigProblem] = []
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, list[str | int]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, [*path, i]) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                ident = (key_node.tag, key_node.value)
                line = key_node.start_mark.line + 1
                if ident in first:
                    problems.append(
                        ConfigProblem(
                            format_path([*path, _shorten(key_node.value, 60)]),
                            f"key given twice in {source} (lines {first[ident]} and {line}); YAML would keep "
                            "only the second: merge them into one",
                        )
                    )
                else:
                    first[ident] = line
                stack.append((value_node, [*path, _shorten(key_node.value, 60)]))
    if problems:
        raise ConfigError(sorted(problems, key=lambda p: p.message))


# -- strict sections ---------------------------------------------------------------------------


def _leaves(annotation: Any) -> list[Any]:
    """The alternatives of an annotation: ``int | None`` -> ``[int, NoneType]``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _leaves(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [leaf for arg in get_args(annotation) for leaf in _leaves(arg)]
    return [annotation]


def _takes(annotation: Any, kind: type) -> bool:
    for leaf in _leaves(annotation):
        if leaf is kind or leaf is Any or leaf is object:
            return True
        if get_origin(leaf) is Literal and any(type(a) is kind for a in get_args(leaf)):
            return True
    return False


def number_problem(annotation: Any, value: Any) -> str | None:
    """Why ``value`` may not stand where ``annotation`` expects a number, or ``None``: a boolean
    (YAML ``true``) where an int or float is expected, a float that is not finite, or an integer
    beyond 64 bits; looked for inside lists and mappings too (``[1]: ...`` names the item)."""
    found = _number_problem(annotation, value, "")
    if found is None:
        return None
    where, message, bad = found
    return f"{where}: {message} (got {describe_value(bad)})" if where else message


def _number_problem(annotation: Any, value: Any, where: str) -> tuple[str, str, Any] | None:
    leaves = _leaves(annotation)
    if any(leaf is Any or leaf is object for leaf in leaves):
        return None
    numeric = any(leaf is int or leaf is float for leaf in leaves)
    if isinstance(value, bool):
        if numeric and not _takes(annotation, bool):
            return where, "expected a number, not a boolean", value
        return None
    if isinstance(value, float) and not math.isfinite(value) and numeric:
        return where, "expected a finite number", value
    if isinstance(value, int) and numeric and abs(value) > _INT64_MAX:
        return where, "out of range: numbers must fit in 64 bits", value
    if isinstance(value, list | tuple):
        for leaf in leaves:
            origin, args = get_origin(leaf), get_args(leaf)
            if origin not in (list, tuple, set, frozenset, Sequence) or not args:
                continue
            for i, item in enumerate(value):
                if origin is tuple and args[-1] is not Ellipsis:
                    if i >= len(args):
                        break
                    item_type = args[i]
                else:
                    item_type = args[0]
                found = _number_problem(item_type, item, f"{where}[{i}]")
                if found:
                    return found
            break
    elif isinstance(value, Mapping):
        for leaf in leaves:
            origin, args = get_origin(leaf), get_args(leaf)
            if origin in (dict, Mapping) and len(args) == 2:
                for k, item in value.items():
                    found = _number_problem(args[1], item, join_path(where, str(k)))
                    if found:
                        return found
                break
    return None


class ConfigSection(BaseModel):
    """Base of every configuration section model: unknown keys are errors, defaults are
    validated, and numbers are strict, where pydantic alone would coerce: ``true`` is not ``1``,
    ``.inf`` and ``.nan`` are refused, integers fit in 64 bits (see :func:`number_problem`).
    Strings such as ``3e-4`` (YAML 1.1 reads them as text) still become numbers."""

    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None:
            problem = number_problem(field.annotation, value)
            if problem:
                raise ValueError(problem)
        return value


def describe_value(value: Any) -> str:
    """``repr(value)`` cut to 80 characters (messages quote values, never a whole expanded one)."""
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
            msg = f"{msg} (got {describe_value(e['input'])})"
        problems.append(ConfigProblem(path, msg))
    return problems


def validate_model(model: type[M], data: Any, prefix: str = "") -> M:
    """``model.model_validate(data)``, raising :class:`ConfigError` with YAML paths instead of a
    pydantic ``ValidationError``."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(validation_problems(err, prefix)) from None


OVERRIDE_FORMS = (
    "key.path=value (set), +key.path=value (add), ++key.path=value (add or replace) or ~key.path (delete)"
)
"""The command-line override forms, as Hydra writes them (quoted in error messages)."""


def parse_override(raw: str) -> tuple[str, str, Any, bool]:
    """``(op, key, value, has_value)`` of one command-line override: ``op`` is ``"set"``
    (``key=value``), ``"add"`` (``+key=value``), ``"force"`` (``++key=value``) or ``"delete"``
    (``~key``, or ``~key=value``: delete only if it holds that value). Values are parsed as YAML
    (with :func:`parse_yaml`'s guards); an empty value is ``""``. A malformed override is a
    :class:`ConfigError` that quotes it and lists the valid forms."""
    text = raw.strip()
    op, body = "set", text
    if text.startswith("++"):
        op, body = "force", text[2:]
    elif text.startswith("+"):
        op, body = "add", text[1:]
    elif text.startswith("~"):
        op, body = "delete", text[1:]
    key, sep, value_text = body.partition("=")
    key = key.strip()
    if (not sep and op != "delete") or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {_shorten(raw, 100)!r} is not of the form {OVERRIDE_FORMS}")
    if not sep:
        return op, key, None, False
    source = f"override {_shorten(raw, 100)!r}"
    try:
        value = parse_yaml(value_text, source=source) if value_text.strip() else ""
    except ConfigError as err:
        detail = str(err).removeprefix(f"{source}: ")
        raise ConfigError(f"{source}: the value is not valid YAML ({detail})") from None
    return op, key, value, True


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply command-line overrides (values parsed as YAML) to a copy of ``data``.

    ``runner.max_steps=10`` sets a nested key, creating mappings on the way (unlike Hydra, a key
    the config does not have yet may be set without ``+``); ``a.list.0=3`` indexes into a list.
    As in Hydra, ``+key=value`` adds a key that must not be there yet, ``++key=value`` adds or
    replaces, ``~key`` deletes a key that must be there (``~key=value``: only if it holds
    ``value``). A malformed or impossible override is a :class:`ConfigError` that quotes it.
    """
    import copy

    out = copy.deepcopy(data)
    for raw in overrides:
        op, key, value, has_value = parse_override(raw)
        parts = key.split(".")
        node: Any = out
        for i, part in enumerate(parts[:-1]):
            node = _child(node, part, parts[: i + 1], raw, create=op != "delete")
        if op == "delete":
            _delete(node, parts[-1], parts, raw, value, has_value)
            continue
        if op == "add" and _has(node, parts[-1]):
            current = node[_index(node, parts[-1], parts, raw)] if isinstance(node, list) else node[parts[-1]]
            plain = raw.strip()[1:]
            raise ConfigError(
                f"override {_shorten(raw, 100)!r}: {key} is already set (to {describe_value(current)}); "
                f"change it with {_shorten(plain, 60)}, or add-or-replace with +{_shorten(raw.strip(), 60)}"
            )
        _assign(node, parts[-1], value, parts, raw)
    return out


def _has(node: Any, part: str) -> bool:
    if isinstance(node, dict):
        return part in node
    if isinstance(node, list):
        try:
            return -len(node) <= int(part) < len(node)
        except ValueError:
            return False
    return False


def _delete(node: Any, part: str, path: Sequence[str], raw: str, value: Any, has_value: bool) -> None:
    key = ".".join(path)
    if not _has(node, part):
        raise ConfigError(f"override {_shorten(raw, 100)!r}: {key} is not in the config, nothing to delete")
    idx: Any = _index(node, part, path, raw) if isinstance(node, list) else part
    if has_value and node[idx] != value:
        raise ConfigError(
            f"override {_shorten(raw, 100)!r}: {key} is {describe_value(node[idx])}, not "
            f"{describe_value(value)}; give ~{key} to delete it whatever it holds"
        )
    del node[idx]


def _child(node: Any, part: str, path: Sequence[str], raw: str, *, create: bool) -> Any:
    if isinstance(node, list):
        idx = _index(node, part, path, raw)
        return node[idx]
    if not isinstance(node, dict):
        raise ConfigError(f"override {raw!r}: {'.'.join(path[:-1])} is not a mapping")
    if part not in node or node[part] is None:
        if not create:
            raise ConfigError(f"override {raw!r}: {'.'.join(path)} is not in the config, nothing to delete")
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

"""What ``${...}`` interpolations may cost and what they may reveal: the two guards
:func:`rlinf_core.compose.compose` puts around OmegaConf's resolution.

- :func:`check_bounds` sizes every interpolation before OmegaConf resolves it (a 35-line
  interpolation bomb went past 4 GB): one value over :data:`MAX_INTERPOLATED_CHARS`, the whole
  over :data:`MAX_RESOLVED_CHARS` or more than :data:`MAX_INTERPOLATION_STEPS` resolutions is one
  :class:`~rlinf_core.errors.ConfigError` naming the key.
- :func:`remember_env_secrets` / :func:`mask_secrets`: the values ``${oc.env:NAME}`` brought into
  this process (an API key given to workers through ``env_vars``) are replaced by
  ``${oc.env:NAME}`` wherever they would be saved or printed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from rlinf_core.errors import ConfigError

__all__ = [
    "MAX_INTERPOLATED_CHARS",
    "MAX_INTERPOLATION_STEPS",
    "MAX_RESOLVED_CHARS",
    "MIN_SECRET_CHARS",
    "check_bounds",
    "env_interpolations",
    "key_parts",
    "mask_secrets",
    "remember_env_secrets",
    "value_at",
]

MAX_INTERPOLATED_CHARS = 1_000_000
"""The most characters one interpolated value may resolve to."""
MAX_RESOLVED_CHARS = 32_000_000
"""The most characters the whole resolved configuration may hold (interpolations copy nodes;
twice the largest config file read)."""
MAX_INTERPOLATION_STEPS = 1_000_000
"""The most interpolations resolving the configuration may take (OmegaConf resolves a reference
again at every use: a chain of keys each using the previous one twice doubles at every key)."""
_KEY_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_ENV_REF = re.compile(r"\$\{oc\.env:\s*([^,}\s]+)")
MIN_SECRET_CHARS = 6
"""Values of ``${oc.env:...}`` at least this long are masked wherever they appear (shorter ones,
such as ``0`` or ``true``, only where the interpolation stood: masking every ``0`` would garble
the text)."""
_SECRETS: dict[str, str] = {}
"""Every ``${oc.env:NAME}`` value this process resolved (at least :data:`MIN_SECRET_CHARS`
long) -> ``${oc.env:NAME}``."""


def mask_secrets(obj: Any) -> Any:
    """``obj`` (text, or a mapping or list of them) with every value an ``${oc.env:NAME}``
    interpolation brought into this process replaced by ``${oc.env:NAME}`` (values of at least
    :data:`MIN_SECRET_CHARS` characters, longest first)."""
    if isinstance(obj, str):
        for value in sorted(_SECRETS, key=len, reverse=True):
            if value in obj:
                obj = obj.replace(value, _SECRETS[value])
        return obj
    if isinstance(obj, Mapping):
        return {k: mask_secrets(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(mask_secrets(v) for v in obj)
    return obj


def env_interpolations(value: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], str]]:
    """``(key path, text)`` of every string leaf that reads an environment variable."""
    if isinstance(value, str):
        if _ENV_REF.search(value):
            yield path, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from env_interpolations(v, (*path, str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from env_interpolations(v, (*path, str(i)))


def remember_env_secrets(text: str) -> None:
    """Remember the values of the environment variables ``text`` reads, for :func:`mask_secrets`."""
    for name in _ENV_REF.findall(text):
        got = os.environ.get(name)
        if got is not None and len(got) >= MIN_SECRET_CHARS:
            _SECRETS[got] = f"${{oc.env:{name}}}"


def key_parts(full_key: Any) -> list[str]:
    """The parts of a key path: ``a.b[0].c`` -> ``["a", "b", "0", "c"]``."""
    return [m.group(1) or m.group(2) for m in _KEY_PART.finditer(str(full_key or ""))]


def value_at(data: Any, parts: Sequence[str]) -> Any:
    """The value at ``parts`` (:func:`key_parts`) of ``data``, or ``None``."""
    node = data
    for part in parts:
        if isinstance(node, Mapping):
            node = node.get(part, node.get(int(part)) if part.isdigit() else None)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


_RESOLVER = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*:(.*)$", re.S)
_SELECTS = ("oc.select", "oc.dict.keys", "oc.dict.values")


def _interpolations(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, inside)`` of every top-level ``${...}`` of ``text`` (``\\${`` is literal)."""
    out = []
    i = 0
    while True:
        i = text.find("${", i)
        if i < 0:
            return out
        if i > 0 and text[i - 1] == "\\":
            i += 2
            continue
        depth, j = 0, i + 1
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= len(text):
            return out  # unbalanced: OmegaConf's grammar error names it
        out.append((i, j + 1, text[i + 2 : j]))
        i = j + 1


def check_bounds(data: Mapping[str, Any], where: Callable[[tuple[str, ...]], str]) -> None:
    """Refuse ``data`` (a composed mapping, before resolution) when resolving its interpolations
    would go over a limit: one :class:`ConfigError` naming the key, prefixed by ``where(path)``
    (the file or override that set it)."""
    _Bounds(data, where).check()


class _Bounds:
    """What resolving ``data`` would make, estimated before OmegaConf does it: the characters of
    each value and of the whole, and the interpolations resolved (with repeats, as OmegaConf
    resolves a reference again at every use), each in linear time; over a limit is one
    :class:`ConfigError` naming the key (an interpolation bomb never reaches OmegaConf)."""

    def __init__(self, data: Mapping[str, Any], where: Callable[[tuple[str, ...]], str]) -> None:
        self.data, self.where = data, where
        self.memo: dict[tuple[str, ...], tuple[int, int]] = {}
        self.active: set[tuple[str, ...]] = set()

    def check(self) -> None:
        try:
            chars, steps = self.node(())
        except RecursionError:
            raise ConfigError(
                "the config: interpolations refer to each other too deeply to resolve; shorten the chain "
                "of ${...} references"
            ) from None
        if chars > MAX_RESOLVED_CHARS:
            raise ConfigError(
                f"the config: resolving its interpolations would make {chars:,} characters (at most "
                f"{MAX_RESOLVED_CHARS:,}); a ${{...}} copies what it names at every use"
            )
        if steps > MAX_INTERPOLATION_STEPS:
            raise ConfigError(
                f"the config: resolving it would take {steps:,} interpolations (at most "
                f"{MAX_INTERPOLATION_STEPS:,}): keys that use one another over and over"
            )

    def _fail(self, path: tuple[str, ...], what: str) -> ConfigError:
        key = ".".join(path) or "the config"
        return ConfigError(f"{self.where(path)}: {key}: {what}")

    def node(self, path: tuple[str, ...]) -> tuple[int, int]:
        """``(characters, interpolations)`` of the node at ``path`` once resolved."""
        if path in self.memo:
            return self.memo[path]
        if path in self.active:
            return 0, 1  # a cycle: OmegaConf names it
        self.active.add(path)
        value = value_at(self.data, path) if path else self.data
        chars, steps = 0, 0
        if isinstance(value, str):
            chars, steps = self.text(value, path)
            if steps and chars > MAX_INTERPOLATED_CHARS:
                raise self._fail(
                    path,
                    f"its interpolations would resolve to {chars:,} characters (at most "
                    f"{MAX_INTERPOLATED_CHARS:,} in one value)",
                )
        elif isinstance(value, Mapping):
            for k in value:
                c, n = self.node((*path, str(k)))
                chars, steps = chars + c + len(str(k)), steps + n
        elif isinstance(value, list):
            for i in range(len(value)):
                c, n = self.node((*path, str(i)))
                chars, steps = chars + c, steps + n
        else:
            chars = len(str(value))
        if steps > MAX_INTERPOLATION_STEPS:
            raise self._fail(
                path,
                f"resolving it would take {steps:,} interpolations (at most {MAX_INTERPOLATION_STEPS:,}): "
                "keys that use one another over and over",
            )
        self.active.discard(path)
        self.memo[path] = (chars, steps)
        return chars, steps

    def text(self, text: str, path: tuple[str, ...]) -> tuple[int, int]:
        chars, steps = len(text), 0
        for start, end, inside in _interpolations(text):
            c, n = self.inside(inside, path)
            chars, steps = chars - (end - start) + c, steps + 1 + n
        return chars, steps

    def inside(self, inside: str, path: tuple[str, ...]) -> tuple[int, int]:
        """``(characters, interpolations)`` of one ``${inside}`` in the value at ``path``."""
        match = _RESOLVER.match(inside)
        if match is None:
            return self.node(self.target(inside.strip(), path))
        name, args = match.group(1), match.group(2)
        chars, steps = self.text(args, path)  # nested ${...} in the arguments
        if name == "oc.env":
            var = args.partition(",")[0]
            got = os.environ.get(var.strip())
            return (len(got) if got is not None else chars), steps
        if name in _SELECTS and not _interpolations(args):
            c, n = self.node(self.target(args.partition(",")[0].strip(), path))
            return chars + c, steps + n
        return chars, steps

    @staticmethod
    def target(key: str, path: tuple[str, ...]) -> tuple[str, ...]:
        """The absolute path of ``key`` (``a.b``, ``a[0]``; ``.b``, ``..b`` relative to the node
        holding the value at ``path``)."""
        if not key.startswith("."):
            return tuple(key_parts(key))
        dots = len(key) - len(key.lstrip("."))
        base = path[: max(0, len(path) - dots)]
        return (*base, *key_parts(key[dots:]))

"""What a model writes and what a tool returns, made safe to handle (*light*: no torch).

- :func:`loads_bounded`: ``json.loads`` of a tool call a model wrote, with limits on its size
  (:data:`MAX_CALL_CHARS`), its nesting (:data:`MAX_JSON_DEPTH`: deeper input would end the
  run with a ``RecursionError``) and its integers (:data:`MAX_INT_DIGITS`: Python refuses to
  convert longer ones with a ``ValueError``); every failure is a :class:`ValueError` whose
  message the model can read.
- :func:`as_text`: a tool's result as text, whatever it is: a string (a ``str`` subclass's
  overrides ignored), bytes (decoded, invalid UTF-8 replaced), anything else as JSON or, failing
  that, its ``str()``; a ``str()`` that raises is described instead; lone surrogates become
  ``?``; text over the limit is cut with a note. It never raises.
- :func:`describe_error`: one line naming an exception, even one whose ``str()`` raises.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_CALL_CHARS", "MAX_INT_DIGITS", "MAX_JSON_DEPTH", "as_text", "describe_error", "loads_bounded"]

MAX_CALL_CHARS = 65536
"""Longest tool call (the JSON between the tags, or an ``arguments`` string) parsed."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects in a tool call."""
MAX_INT_DIGITS = 4000
"""Longest integer literal in a tool call (Python converts at most 4300 digits)."""

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


def _depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings (an upper bound for broken JSON)."""
    depth = deepest = 0
    for ch in _BRACKETS.findall(_STRINGS.sub('""', text)):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


def loads_bounded(text: str, *, max_chars: int = MAX_CALL_CHARS, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)`` within the module's limits.

    Raises:
        ValueError: not valid JSON (the decoder's message and position), too long, nested too
            deep, or an integer too long; the message says which.
    """
    if len(text) > max_chars:
        raise ValueError(f"{len(text)} characters, more than the {max_chars} a tool call may have")
    depth = _depth(text)
    if depth > max_depth:
        raise ValueError(f"nested {depth} levels deep (at most {max_depth})")
    try:
        return json.loads(text, parse_int=_int)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON ({err.msg} at position {err.pos})") from None
    except RecursionError:
        raise ValueError(f"nested too deep (at most {max_depth} levels)") from None
    except ValueError as err:
        raise ValueError(f"not accepted: {err}") from None


def _plain(text: str) -> str:
    """``text`` as an exact ``str`` that encodes as UTF-8 (lone surrogates become ``?``)."""
    text = str.__str__(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _safe_str(value: Any) -> str:
    try:
        return _plain(str(value))
    except BaseException:  # a hostile __str__ (runs in a tool thread)
        try:
            kind = type(value).__name__
        except BaseException:
            kind = "object"
        return f"<{_plain(str(kind))} object whose str() failed>"


def _cut(text: str, limit: int) -> str:
    if len(text) > limit:
        return text[:limit] + f"\n[truncated: {len(text) - limit} more characters]"
    return text


def as_text(value: Any, limit: int) -> str:
    """``value`` as the text of a tool message, at most ``limit`` characters plus a note (see
    the module doc). Never raises."""
    try:
        if isinstance(value, str):  # a subclass's overrides are not called
            n = str.__len__(value)
            text = _plain(str.__getitem__(value, slice(0, limit)))
            return text + (f"\n[truncated: {n - limit} more characters]" if n > limit else "")
        if isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
            text = data[: 4 * limit + 4].decode("utf-8", "replace")
            note = f"\n[truncated: {len(data)} bytes in all]" if len(data) > 4 * limit + 4 else ""
            return _cut(_plain(text), limit) + note
        try:
            text = json.dumps(value, ensure_ascii=False, default=_safe_str)
        except BaseException:  # circular, too deep, keys JSON cannot hold, a hostile default
            text = _safe_str(value)
        return _cut(_plain(text), limit)
    except BaseException:  # whatever the object does, the model gets a message
        return "[the tool's result could not be shown as text]"


def describe_error(err: BaseException) -> str:
    """``TypeName: first line of the message`` (``TypeName`` alone for an empty or failing
    message); at most 500 characters."""
    try:
        kind = type(err).__name__
    except BaseException:
        kind = "Exception"
    detail = _safe_str(err).strip()
    first = detail.splitlines()[0] if detail else ""
    if "whose str() failed" in first and first.startswith("<"):
        first = ""
    out = f"{kind}: {first}" if first else kind
    return out if len(out) <= 500 else out[:497] + "..."

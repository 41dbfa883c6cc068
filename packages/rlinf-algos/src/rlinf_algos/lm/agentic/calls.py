"""Tool calls in sampled text, in the Qwen2.5 / Hermes format (*light*: no torch).

The model writes one block per call, as the Qwen2.5 and Hermes chat templates teach it in their
system prompt::

    <tool_call>
    {"name": "search", "arguments": {"query": "founder of Veltrix"}}
    </tool_call>

:func:`parse_tool_calls` finds every block. A block whose JSON does not parse, is not an object,
has no string ``name`` or whose ``arguments`` is neither an object nor a JSON string of one, and
an opening tag never closed (the turn ran out of tokens), comes back as a :class:`ToolCall` with
``error`` set: the episode answers it with that error and counts it as malformed, it never
raises. The JSON is read within :func:`~rlinf_algos.tools.guard.loads_bounded`'s limits (size,
nesting, integer length), so a model writing ``[[[[...`` or a 5,000-digit number gets an error
message, not the run a ``RecursionError``; a turn's calls past :data:`MAX_CALLS_PER_TURN` are
answered with an error and not run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlinf_algos.tools.guard import loads_bounded

__all__ = ["MAX_CALLS_PER_TURN", "TOOL_CALL_CLOSE", "TOOL_CALL_OPEN", "ToolCall", "parse_tool_calls"]

MAX_CALLS_PER_TURN = 32
"""Tool calls of one turn that run; the rest are answered with an error."""

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


@dataclass
class ToolCall:
    """One parsed call: ``name`` and ``arguments`` (a dict), or ``error`` saying why the block
    is not a call. ``raw`` is the text between the tags."""

    name: str | None
    arguments: dict[str, Any] | None
    raw: str
    error: str | None = None

    def as_message(self) -> dict[str, Any]:
        """The call as an assistant message's ``tool_calls`` item (OpenAI / transformers form)."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments or {}}}


def _shown(name: str) -> str:
    return repr(name if len(name) <= 60 else name[:57] + "...")


def _one(raw: str) -> ToolCall:
    try:
        obj = loads_bounded(raw.strip())
    except ValueError as err:
        return ToolCall(None, None, raw, f"the tool call is {err}")
    if not isinstance(obj, dict):
        return ToolCall(None, None, raw, f"the tool call must be a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall(None, None, raw, 'the tool call has no "name" string')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = loads_bounded(args) if args.strip() else {}
        except ValueError as err:
            return ToolCall(name, None, raw, f'"arguments" of {_shown(name)} is {err}')
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCall(
            name, None, raw, f'"arguments" of {_shown(name)} must be a JSON object, got {type(args).__name__}'
        )
    return ToolCall(name, args, raw)


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>...</tool_call>`` block of ``text``, in order (see the module doc)."""
    calls = [_one(m.group(1)) for m in _BLOCK.finditer(text)]
    for i in range(MAX_CALLS_PER_TURN, len(calls)):
        c = calls[i]
        calls[i] = ToolCall(
            c.name,
            None,
            c.raw,
            f"more than {MAX_CALLS_PER_TURN} tool calls in one turn; this one was not run",
        )
    tail = text[text.rfind(TOOL_CALL_CLOSE) + len(TOOL_CALL_CLOSE) :] if TOOL_CALL_CLOSE in text else text
    if TOOL_CALL_OPEN in tail:
        raw = tail[tail.index(TOOL_CALL_OPEN) + len(TOOL_CALL_OPEN) :]
        calls.append(ToolCall(None, None, raw, f"the tool call was never closed with {TOOL_CALL_CLOSE}"))
    return calls

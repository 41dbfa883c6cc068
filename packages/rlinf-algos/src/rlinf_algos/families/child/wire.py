"""The message format between an env worker and a simulator process: plain data and numpy arrays
over a pipe, without pickle (neither side runs code the other sends).

A message is ``[u32 header length][header JSON][buffers...]``: the header holds the value with
every array replaced by ``{"__nd__": i, "dtype", "shape"}`` and the byte length of each buffer.
Values: ``None``, bools, ints, floats (NaN and infinities included), strings, lists, tuples (read
back as lists), dicts with string keys, and numpy arrays of numeric or bool dtype.

Imported by rlinf (the parent) and by :mod:`server` in the simulator's interpreter, so it needs
the standard library and numpy only.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

import numpy as np

__all__ = ["WireError", "WireTimeout", "decode", "encode", "read_message", "write_message"]

_LEN = struct.Struct("<I")
_MAX_HEADER = 64 << 20


class WireError(Exception):
    """The pipe closed, or a message was malformed."""


class WireTimeout(WireError):
    """No message within the time allowed."""


def encode(value: Any) -> list[bytes | memoryview]:
    """``value`` as the chunks of one message (header first)."""
    buffers: list[memoryview] = []

    def walk(v: Any) -> Any:
        if isinstance(v, np.generic):  # a numpy scalar travels as the Python scalar it holds
            return walk(v.item())
        if isinstance(v, np.ndarray):
            shape = list(v.shape)
            arr = np.ascontiguousarray(v)
            if arr.dtype.kind not in "biufc":
                raise WireError(f"cannot send an array of dtype {arr.dtype}")
            buffers.append(memoryview(arr).cast("B"))
            return {"__nd__": len(buffers) - 1, "dtype": arr.dtype.str, "shape": shape}
        if isinstance(v, dict):
            return {str(k): walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x) for x in v]
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if v == v and v not in (float("inf"), float("-inf")) else {"__f__": repr(v)}
        raise WireError(f"cannot send a value of type {type(v).__name__}")

    body = walk(value)
    header = json.dumps({"v": body, "b": [len(b) for b in buffers]}, separators=(",", ":")).encode()
    return [_LEN.pack(len(header)) + header, *buffers]


def decode(header: bytes | bytearray, buffers: list[bytearray]) -> Any:
    """The value of one message from its header JSON and buffers."""
    doc = json.loads(header)["v"]

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            if "__nd__" in v:
                return np.frombuffer(buffers[v["__nd__"]], dtype=np.dtype(v["dtype"])).reshape(v["shape"])
            if "__f__" in v:
                return float(v["__f__"])
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(doc)


def write_message(fd: int, value: Any) -> None:
    """Send ``value`` over the pipe ``fd`` (blocking)."""
    for chunk in encode(value):
        view = memoryview(chunk)
        while view:
            n = os.write(fd, view)
            view = view[n:]


def _read_exactly(fd: int, n: int, deadline: float | None, what: str) -> bytearray:
    out = bytearray()
    while len(out) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireTimeout(what)
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise WireTimeout(what)
        chunk = os.read(fd, min(n - len(out), 1 << 20))
        if not chunk:
            raise WireError(f"the pipe closed while reading {what}")
        out += chunk
    return out  # a bytearray: the arrays decoded from it are writable


def read_message(fd: int, timeout: float | None = None, what: str = "a message") -> Any:
    """The next value on the pipe ``fd``; :class:`WireTimeout` when none arrives within
    ``timeout`` seconds (``None``: wait for ever), :class:`WireError` when the pipe closes."""
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = _LEN.unpack(_read_exactly(fd, _LEN.size, deadline, what))
    if size > _MAX_HEADER:
        raise WireError(f"a message header of {size} bytes (at most {_MAX_HEADER})")
    doc = _read_exactly(fd, size, deadline, what)
    sizes = json.loads(doc)["b"]
    buffers = [_read_exactly(fd, int(s), deadline, what) for s in sizes]
    return decode(doc, buffers)

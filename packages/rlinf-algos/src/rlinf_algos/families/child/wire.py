"""The format between an env worker and a simulator process: plain data and numpy arrays over a
pipe, the per-step arrays in a shared-memory block, without pickle (neither side runs code the
other sends).

**Frames.** Everything on a pipe is a frame: a fixed 8-byte header ``struct("<II")`` holding
the frame's kind and the byte length of its body, then the body.

- ``MSG`` (1): a value. The body is ``[header JSON][buffers...]``: the JSON holds the value with
  every array replaced by ``{"__nd__": i, "dtype", "shape"}`` and the byte length of each buffer.
  Values: ``None``, bools, ints, floats (NaN and infinities included), strings, lists, tuples
  (read back as lists), dicts with string keys, and numpy arrays of numeric or bool dtype. The
  rare requests (``make``, ``reset``, ``render``...) and every error reply are messages.
- ``STEP`` (2), parent to child, empty body: step every copy with the actions in the block.
- ``STEPPED`` (3), child to parent: the step's results are in the block; the body is empty, or
  a JSON object holding what cannot live in the block (the text leaves of the observations,
  ``{"obs": {path: [str, ...]}, "final_obs": {path: [str or null, ...]}}``).

A step therefore costs two 8-byte writes and reads on the pipes, and copies of the arrays it
changes; no JSON and no per-step dict on the wire.

**The block.** The parent creates an anonymous shared file (``memfd_create``; an unlinked
temporary file where that is missing) before starting the child, which inherits its descriptor:
no name exists anywhere, so nothing is left behind whatever way either side ends (a ``SIGKILL``
included): the kernel frees it with the last descriptor. Once the simulator's spaces are known
the parent sizes it and sends the :class:`Layout` (every array's name, dtype, shape and byte
offset, each at a 64-byte boundary) in a ``share`` message; both sides then see the same numpy
views: ``actions [N, A] float32``; ``reward [N] float64``; ``terminated``, ``truncated``,
``success``, ``done``, ``final_success``, ``final_success_once`` ``[N] bool``; and each array leaf
of the observation as ``obs/PATH`` and ``final_obs/PATH`` ``[N, ...]`` (``PATH`` is ``""`` for a
plain array observation, a dict's keys joined by ``/`` otherwise). ``final_*`` rows are valid
where ``done`` is set. The pipe's write and read order the accesses: the parent touches the
block only between a ``STEPPED`` and its next ``STEP``, the child only in between.

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

__all__ = [
    "MSG",
    "STEP",
    "STEPPED",
    "Layout",
    "WireError",
    "WireTimeout",
    "decode",
    "encode",
    "read_frame",
    "read_message",
    "read_value",
    "write_frame",
    "write_message",
]

FRAME = struct.Struct("<II")
"""A frame's header: its kind and the byte length of its body."""
MSG, STEP, STEPPED = 1, 2, 3
_LEN = struct.Struct("<I")
_MAX_BODY = 1 << 31
_ALIGN = 64

RESULT_FIELDS = (
    ("reward", "<f8"),
    ("terminated", "|b1"),
    ("truncated", "|b1"),
    ("success", "|b1"),
    ("done", "|b1"),
    ("final_success", "|b1"),
    ("final_success_once", "|b1"),
)
"""The per-copy ``[N]`` results of a step in the block, beside ``actions`` and the observations."""


class WireError(Exception):
    """The pipe closed, or a message was malformed."""


class WireTimeout(WireError):
    """No message within the time allowed."""


def encode(value: Any) -> list[bytes | memoryview]:
    """``value`` as the chunks of one ``MSG`` frame (the frame header and JSON first)."""
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
    size = _LEN.size + len(header) + sum(len(b) for b in buffers)
    if size >= _MAX_BODY:
        raise WireError(f"a message of {size} bytes (at most {_MAX_BODY})")
    return [FRAME.pack(MSG, size) + _LEN.pack(len(header)) + header, *buffers]


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


def _write_all(fd: int, chunks: list[Any]) -> None:
    """Write ``chunks`` in order, in as few system calls as the pipe takes (one, mostly)."""
    views = [memoryview(c).cast("B") for c in chunks if len(c)]
    while views:
        n = os.writev(fd, views)
        while n and views:
            if n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][n:]
                n = 0


def write_message(fd: int, value: Any) -> None:
    """Send ``value`` as a ``MSG`` frame over the pipe ``fd`` (blocking)."""
    _write_all(fd, encode(value))


_EMPTY = {kind: FRAME.pack(kind, 0) for kind in (STEP, STEPPED)}


def write_frame(fd: int, kind: int, body: bytes = b"") -> None:
    """Send a ``STEP`` or ``STEPPED`` frame (blocking)."""
    if body:
        _write_all(fd, [FRAME.pack(kind, len(body)), body])
    else:  # 8 bytes: one write, whole (a pipe never splits a write of up to PIPE_BUF bytes)
        os.write(fd, _EMPTY[kind])


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


def read_frame(fd: int, deadline: float | None = None, what: str = "a message") -> tuple[int, int]:
    """The next frame's ``(kind, body length)``; waits until ``deadline`` (``time.monotonic``;
    ``None``: for ever): :class:`WireTimeout` after it, :class:`WireError` when the pipe closes
    or the header is not one."""
    if deadline is not None:  # the usual case in one select and one read
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise WireTimeout(what)
    head = os.read(fd, FRAME.size)
    if not head:
        raise WireError(f"the pipe closed while reading {what}")
    if len(head) < FRAME.size:
        head += _read_exactly(fd, FRAME.size - len(head), deadline, what)
    kind, size = FRAME.unpack(head)
    if kind not in (MSG, STEP, STEPPED) or size >= _MAX_BODY:
        raise WireError(f"a malformed frame (kind {kind}, {size} bytes) while reading {what}")
    return kind, size


def read_body(fd: int, size: int, deadline: float | None = None, what: str = "a message") -> bytearray:
    """The ``size`` bytes of a frame's body."""
    return _read_exactly(fd, size, deadline, what) if size else bytearray()


def read_value(fd: int, size: int, deadline: float | None = None, what: str = "a message") -> Any:
    """The value of a ``MSG`` frame whose body is ``size`` bytes."""
    if size < _LEN.size:
        raise WireError(f"a message of {size} bytes while reading {what}")
    (hsize,) = _LEN.unpack(_read_exactly(fd, _LEN.size, deadline, what))
    if hsize > size - _LEN.size:
        raise WireError(f"a message header of {hsize} bytes in a body of {size} while reading {what}")
    doc = _read_exactly(fd, hsize, deadline, what)
    sizes = [int(s) for s in json.loads(doc)["b"]]
    if _LEN.size + hsize + sum(sizes) != size:
        raise WireError(f"a message whose buffers do not fill its body while reading {what}")
    return decode(doc, [_read_exactly(fd, s, deadline, what) for s in sizes])


def read_message(fd: int, timeout: float | None = None, what: str = "a message") -> Any:
    """The next value on the pipe ``fd``; :class:`WireTimeout` when none arrives within
    ``timeout`` seconds (``None``: wait for ever), :class:`WireError` when the pipe closes or the
    next frame is not a message."""
    deadline = None if timeout is None else time.monotonic() + timeout
    kind, size = read_frame(fd, deadline, what)
    if kind != MSG:
        raise WireError(f"a frame of kind {kind} where {what} was expected")
    return read_value(fd, size, deadline, what)


class Layout:
    """Where each array of a step lives in the shared block: ``fields`` maps a name to
    ``(dtype string, shape, byte offset)``; ``size`` is the block's byte length.

    Built by the parent from the number of copies, the action size and the simulator's
    observation spec (``{"kind": "box" | "text" | "dict", ...}``), and sent to the child as
    :meth:`to_plain`, so both sides view the same bytes the same way. Text leaves have no room
    in the block (``text`` lists their paths): they travel in the ``STEPPED`` body.
    """

    def __init__(self, fields: dict[str, tuple[str, tuple[int, ...], int]], text: list[str]) -> None:
        self.fields, self.text = fields, list(text)
        end = max((off + _nbytes(dt, shape) for dt, shape, off in fields.values()), default=0)
        self.size = max(_ALIGN, -(-end // _ALIGN) * _ALIGN)

    @classmethod
    def for_step(cls, num_envs: int, action_dim: int, obs_spec: dict[str, Any]) -> Layout:
        wanted: list[tuple[str, str, tuple[int, ...]]] = [("actions", "<f4", (num_envs, action_dim))]
        wanted += [(name, dt, (num_envs,)) for name, dt in RESULT_FIELDS]
        text: list[str] = []
        leaves = list(_leaves(obs_spec, ""))
        for prefix in ("obs", "final_obs"):
            for path, spec in leaves:
                if spec["kind"] == "text":
                    if prefix == "obs":
                        text.append(path)
                    continue
                dtype = np.dtype(spec.get("dtype", "float32")).newbyteorder("=").str
                wanted.append((f"{prefix}/{path}", dtype, (num_envs, *(int(s) for s in spec["shape"]))))
        fields, off = {}, 0
        for name, dt, shape in wanted:
            fields[name] = (dt, shape, off)
            off += -(-_nbytes(dt, shape) // _ALIGN) * _ALIGN
        return cls(fields, text)

    def to_plain(self) -> dict[str, Any]:
        return {
            "fields": [[k, dt, list(s), off] for k, (dt, s, off) in self.fields.items()],
            "text": self.text,
        }

    @classmethod
    def from_plain(cls, plain: dict[str, Any]) -> Layout:
        fields = {str(k): (str(dt), tuple(int(x) for x in s), int(off)) for k, dt, s, off in plain["fields"]}
        return cls(fields, [str(t) for t in plain["text"]])

    def views(self, buffer: Any) -> dict[str, np.ndarray]:
        """Every field as a numpy array over ``buffer`` (an ``mmap`` of at least :attr:`size`)."""
        return {
            name: np.ndarray(shape, np.dtype(dt), buffer=buffer, offset=off)
            for name, (dt, shape, off) in self.fields.items()
        }


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return int(np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64)))


def _leaves(spec: dict[str, Any], path: str) -> Any:
    """``(path, spec)`` of each box or text leaf of an observation spec (dict keys joined by ``/``)."""
    if spec["kind"] == "dict":
        for key, sub in spec["keys"].items():
            yield from _leaves(sub, f"{path}/{key}" if path else str(key))
    elif spec["kind"] in ("box", "text"):
        yield path, spec
    else:
        raise WireError(f"has a leaf of kind {spec['kind']!r} (box, text or dict expected)")


def tree_set(tree: dict[str, Any], path: str, value: Any) -> None:
    """Put ``value`` at ``path`` of a nested dict, making the dicts on the way."""
    keys = path.split("/")
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = value

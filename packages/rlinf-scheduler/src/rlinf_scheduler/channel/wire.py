"""What travels between a channel's clients and its actor: frames, errors, payloads.

* **Frames**: a 4-byte big-endian length (:data:`HDR`) and the pickle of a tuple (:func:`frame`).
  The connecting side first sends the channel's token as :data:`TOKEN_BYTES` raw bytes, then a
  hello frame ``(peer_id, peer_desc, control)`` (:func:`hello`); requests are ``(rid, op, args)``,
  replies ``(rid, ok, value)`` where a failed ``value`` is ``(error class name, message, peer)``
  (:func:`raise_remote` raises it again on the client). :class:`~rlinf_scheduler.link.Link`
  speaks the same framing.
* **Queue entries** (what the actor holds): ``(kind, data, weight, producer_desc)``; kind ``"b"``:
  pickled payload bytes, ``"t"``: pickled payload with torch tensors, ``"r"``/``"rt"``: the slot
  id of an object-store payload.
* **Payload packing** (:func:`pack_payload` / :func:`unpack_payload`): torch tensors become
  zero-copy numpy views so that pickle protocol 5 and Ray's object store move them without
  copies; sizes are measured in the same walk.
* :class:`ChannelPeerDied`, the error a waiter gets when a peer it depends on died.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import socket
import struct
import sys
import warnings
from typing import Any

from rlinf_core.errors import ChannelClosed, ChannelEmpty, ChannelError, ChannelFull, ChannelTimeout, PeerLost

__all__ = [
    "HDR",
    "PICKLE_PROTOCOL",
    "SCALARS",
    "SLOT_WAIT",
    "TOKEN_BYTES",
    "ChannelPeerDied",
    "frame",
    "hello",
    "keepalive",
    "pack_payload",
    "raise_remote",
    "unpack_payload",
]

HDR = struct.Struct("!I")
"""The length prefix of every frame (4 bytes, big-endian)."""
PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
"""The pickle protocol of frames and inline payloads (5: out-of-band buffers)."""
TOKEN_BYTES = 32
"""Length of the raw token a client sends first (a ``secrets.token_hex(16)``)."""
SLOT_WAIT = 60.0
"""Seconds a consumer waits for a large item's object reference to reach the actor."""


class ChannelPeerDied(ChannelError, PeerLost):
    """A producer or consumer a waiter depends on died (or the channel actor itself did).

    ``peer`` is the dead process's description (its name, pid and node address). A
    :class:`~rlinf_core.errors.PeerLost`: the peer's own failure, where known, is the root cause.
    """

    def __init__(self, message: str, peer: str = "") -> None:
        super().__init__(message)
        self.peer = peer

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.peer))


# ------------------------------------------------------------------------------------------------
# Payload packing: torch tensors become zero-copy numpy views so that pickle protocol 5 and Ray's
# object store move them without copies; sizes are measured in the same walk.
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Tensor:
    """A torch tensor carried as a numpy array (``view``: the torch dtype to reinterpret as)."""

    array: Any
    dtype: str
    view: bool


_TORCH_VIEWS = {"torch.bfloat16": "int16", "torch.float8_e4m3fn": "uint8", "torch.float8_e5m2": "uint8"}


SCALARS = frozenset({int, float, bool, complex, type(None)})
"""Types that hold no payload bytes (the fast path of small control items)."""


def _pack(obj: Any, torch: Any) -> tuple[Any, int, bool]:
    """(packed object, payload bytes, whether it holds torch tensors)."""
    if type(obj) in SCALARS:
        return obj, 0, False
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return obj, obj.nbytes, False
    if torch is not None and isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        dtype = str(t.dtype)
        view = dtype in _TORCH_VIEWS
        if view:
            t = t.view(getattr(torch, _TORCH_VIEWS[dtype]))
        return _Tensor(t.numpy(), dtype, view), t.nelement() * t.element_size(), True
    if isinstance(obj, bytes | bytearray | memoryview | str):
        return obj, len(obj), False
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        size, has, changed = 0, False, False
        for k, v in obj.items():
            pv, n, h = _pack(v, torch)
            out[k] = pv
            size += n
            has |= h
            changed |= pv is not v
        return (out if changed else obj), size, has
    if isinstance(obj, list | tuple):
        items = []
        size, has, changed = 0, False, False
        for v in obj:
            pv, n, h = _pack(v, torch)
            items.append(pv)
            size += n
            has |= h
            changed |= pv is not v
        if not changed:
            return obj, size, has
        if isinstance(obj, list):
            return items, size, has
        return (type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)), size, has
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        size, has, changed = 0, False, False
        values = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            pv, n, h = _pack(v, torch)
            values[f.name] = pv
            size += n
            has |= h
            changed |= pv is not v
        if not changed:
            return obj, size, has
        new = object.__new__(type(obj))
        new.__dict__.update(getattr(obj, "__dict__", {}))
        for name, v in values.items():
            object.__setattr__(new, name, v)
        return new, size, has
    return obj, 0, False


def _unpack(obj: Any) -> Any:
    if isinstance(obj, _Tensor):
        import torch

        with warnings.catch_warnings():
            # Arrays read from the object store are read-only views: so are these tensors.
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(obj.array)
        return t.view(getattr(torch, obj.dtype.removeprefix("torch."))) if obj.view else t
    if isinstance(obj, dict):
        return {k: _unpack(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_unpack(v) for v in obj]
    if isinstance(obj, tuple):
        items = [_unpack(v) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        new = object.__new__(type(obj))
        new.__dict__.update(getattr(obj, "__dict__", {}))
        for f in dataclasses.fields(obj):
            object.__setattr__(new, f.name, _unpack(getattr(obj, f.name)))
        return new
    return obj


def pack_payload(obj: Any) -> tuple[Any, int, bool]:
    """Prepare ``obj`` for pickling or ``ray.put``: torch tensors become zero-copy numpy views.

    Returns ``(packed, nbytes, has_torch)``: ``nbytes`` counts the bytes of every array, tensor,
    ``bytes`` and ``str`` inside dicts, lists, tuples and dataclasses (other objects count 0).
    Undo with :func:`unpack_payload` when ``has_torch``.
    """
    return _pack(obj, sys.modules.get("torch"))


def unpack_payload(obj: Any) -> Any:
    """Inverse of :func:`pack_payload`: numpy views back to torch tensors (sharing memory)."""
    return _unpack(obj)


# ------------------------------------------------------------------------------------------------
# Wire format: 4-byte big-endian length + pickle of a tuple.
#   hello    32 raw token bytes, then (peer_id, peer_desc, control)
#   request  (rid, op, args)
#   reply    (rid, ok, value)     value: result, or (error class name, message, peer)
# Entries (what a queue holds): (kind, data, weight, producer_desc); kind "b": pickled payload
# bytes, "t": pickled payload with torch tensors, "r"/"rt": object-store slot id.
# ------------------------------------------------------------------------------------------------

_ERRORS: dict[str, type[Exception]] = {
    "ChannelClosed": ChannelClosed,
    "ChannelTimeout": ChannelTimeout,
    "ChannelFull": ChannelFull,
    "ChannelEmpty": ChannelEmpty,
    "ChannelPeerDied": ChannelPeerDied,
    "ChannelError": ChannelError,
    "ValueError": ValueError,
}


def frame(obj: Any) -> bytes:
    """``obj`` pickled, behind its 4-byte length (:data:`HDR`)."""
    body = pickle.dumps(obj, PICKLE_PROTOCOL)
    return HDR.pack(len(body)) + body


def hello(token: str, peer_id: str, desc: str, control: bool) -> bytes:
    """The first bytes a client sends: the raw token, then its ``(peer_id, desc, control)`` frame."""
    return token.encode() + frame((peer_id, desc, control))


def raise_remote(value: tuple[str, str, str]) -> None:
    """Raise the error a failed reply carries, ``(class name, message, peer)``, as its channel error."""
    name, message, peer = value
    cls = _ERRORS.get(name, ChannelError)
    if cls is ChannelPeerDied:
        raise ChannelPeerDied(message, peer)
    raise cls(message)


def keepalive(sock: socket.socket) -> None:
    """No Nagle delay, and TCP keep-alive (5 s idle, 3 probes 2 s apart) so a vanished node is noticed."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, val in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, opt):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), val)

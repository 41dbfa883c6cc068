"""Ray-backed channels: named, keyed FIFO queues between processes and nodes.

:class:`RayChannel` implements :class:`rlinf_core.channel.Channel` (same semantics and errors as
:class:`~rlinf_core.channel.LocalChannel`) for every process of a Ray cluster. Its parts:

* **One channel actor** (an asyncio Ray actor, named ``rlinf-channel:<name>`` in a namespace)
  owns the queues. It is created by name from the driver or any worker (``get_if_exists``: two
  creators race safely) on the node the plan says (``node_id``; default: the node of the process
  that creates it, which is the consumer's node when the consumer creates it).
* **A direct data plane.** A Ray actor call costs 1-2 ms here; a queue operation must cost far less.
  The actor therefore also listens on a TCP port of its node's Ray address; every client process
  opens authenticated connections to it (the token travels only over Ray's authenticated RPC) and
  runs ``put``/``get`` over them: one small frame each way, waiters parked on asyncio futures in
  the actor, no polling.
* **Payloads by reference.** An item whose arrays/tensors add up to at least ``inline_limit``
  bytes is put once in Ray's object store by the producer (torch tensors as zero-copy numpy
  views) and only its ``ObjectRef`` is handed to the actor; the queue carries a slot id. The
  consumer fetches the object in one transfer from wherever it lives (zero-copy on the same
  node). Smaller items are pickled once by the producer and unpickled once by the consumer; the
  actor never unpickles a payload.
* **Peers and failure.** Every client process keeps one *control connection* per channel for its
  life. Losing it without the goodbye that :meth:`RayChannel.disconnect`, garbage collection or
  interpreter exit sends marks the process dead (TCP keep-alive covers a vanished node). Every
  waiter on a key whose producer (for ``get``) or consumer (for a ``put`` blocked on a full
  queue) died fails at once with :class:`ChannelPeerDied` naming that peer, instead of hanging
  until its timeout; the record is cleared when a process of the same name reconnects. A queued
  large item whose producer died (its object died with its owner) is reported the same way.

:class:`DistributedRayChannel` keeps one channel actor per node and routes each key to the replica
on the node of the key's first producer, so a producer's ``put`` never leaves its node.

Payloads are numpy arrays, torch tensors (only if torch is importable; it is not a dependency),
and dicts, lists, tuples and dataclasses of them, or anything picklable.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import hmac
import math
import os
import pickle
import secrets
import socket
import struct
import sys
import threading
import time
import uuid
import warnings
import weakref
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

from rlinf_core.channel import DEFAULT_KEY, DEFAULT_TIMEOUT, Channel
from rlinf_core.errors import ChannelClosed, ChannelEmpty, ChannelError, ChannelFull, ChannelTimeout

__all__ = [
    "INLINE_LIMIT",
    "ChannelPeerDied",
    "DistributedRayChannel",
    "RayChannel",
    "pack_payload",
    "unpack_payload",
]

INLINE_LIMIT = 256 * 1024
"""Items whose arrays/tensors/bytes add up to this many bytes or more go through the object store."""

ACTOR_PREFIX = "rlinf-channel:"
_REPLY_SLACK = 30.0  # seconds a client waits beyond an operation's own timeout for the actor's reply
_SLOT_WAIT = 60.0  # seconds a consumer waits for a large item's reference to reach the actor
_HDR = struct.Struct("!I")
_PICKLE = pickle.HIGHEST_PROTOCOL


class ChannelPeerDied(ChannelError):
    """A producer or consumer a waiter depends on died (or the channel actor itself did).

    ``peer`` is the dead process's description (its name, pid and node address).
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


_SCALARS = frozenset({int, float, bool, complex, type(None)})


def _pack(obj: Any, torch: Any) -> tuple[Any, int, bool]:
    """(packed object, payload bytes, whether it holds torch tensors)."""
    if type(obj) in _SCALARS:
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


def _frame(obj: Any) -> bytes:
    body = pickle.dumps(obj, _PICKLE)
    return _HDR.pack(len(body)) + body


_TOKEN_BYTES = 32  # secrets.token_hex(16)


def _hello(token: str, control: bool) -> bytes:
    return token.encode() + _frame((_PEER_ID, _peer_desc(), control))


def _raise_remote(value: tuple[str, str, str]) -> None:
    name, message, peer = value
    cls = _ERRORS.get(name, ChannelError)
    if cls is ChannelPeerDied:
        raise ChannelPeerDied(message, peer)
    raise cls(message)


def _keepalive(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, val in (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, opt):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), val)


# ------------------------------------------------------------------------------------------------
# The channel actor (runs inside Ray; also usable directly as a plain asyncio server in tests).
# ------------------------------------------------------------------------------------------------


class _Key:
    __slots__ = ("consumers", "items", "producers", "waiters", "weight")

    def __init__(self) -> None:
        self.items: deque[tuple[Any, ...]] = deque()
        self.weight = 0.0
        self.waiters: list[asyncio.Future[None]] = []
        self.producers: set[str] = set()
        self.consumers: set[str] = set()


class _Peer:
    __slots__ = ("dead_since", "desc", "name")

    def __init__(self, name: str, desc: str) -> None:
        self.name = name
        self.desc = desc
        self.dead_since: float | None = None


class ChannelCore:
    """The queues, waiters and peer table of one channel (single asyncio thread; no locks).

    Public for tests and for embedding; :class:`RayChannel` runs it inside a Ray actor.
    """

    def __init__(self, name: str, maxsize: int, default_timeout: float) -> None:
        self.name = name
        self.maxsize = maxsize
        self.default_timeout = default_timeout
        self.closed = False
        self.keys: dict[Hashable, _Key] = {}
        self.peers: dict[str, _Peer] = {}
        self.token = secrets.token_hex(16)
        self.address: tuple[str, int] | None = None
        self._server: asyncio.AbstractServer | None = None
        self._slots: dict[bytes, asyncio.Future[Any]] = {}
        self._dropped: set[bytes] = set()
        self.routes: dict[Hashable, str] = {}
        self._route_waiters: list[asyncio.Future[None]] = []
        self._control: dict[str, int] = {}

    # -- server -----------------------------------------------------------------------------------
    async def start(self, host: str) -> tuple[str, int]:
        if self.address is None:
            self._server = await asyncio.start_server(self._serve, host, 0, limit=1 << 20)
            port = self._server.sockets[0].getsockname()[1]
            self.address = (host, port)
        return self.address

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            _keepalive(sock)
        peer_id = ""
        control = False
        said_bye = False
        tasks: dict[int, asyncio.Task[None]] = {}
        cancelled: set[int] = set()
        try:
            # The token comes first, as raw bytes: nothing from the network is unpickled before
            # the peer proved it got the token through Ray's authenticated RPC.
            token = await asyncio.wait_for(reader.readexactly(_TOKEN_BYTES), 10.0)
            if not hmac.compare_digest(token, self.token.encode()):
                return
            n = _HDR.unpack(await reader.readexactly(4))[0]
            if n > 4096:
                return
            peer_id, desc, control = pickle.loads(await reader.readexactly(n))
            self._hello(peer_id, desc, control)
            writer.write(_frame((0, True, None)))
            while True:
                n = _HDR.unpack(await reader.readexactly(4))[0]
                rid, op, args = pickle.loads(await reader.readexactly(n))
                if op == "bye":
                    said_bye = True
                    break
                if op == "cancel":
                    task = tasks.pop(args, None)
                    if task is not None:
                        task.cancel()
                        cancelled.add(args)
                    continue
                self._dispatch(writer, tasks, cancelled, peer_id, rid, op, args)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, pickle.UnpicklingError, TimeoutError):
            pass
        finally:
            for task in tasks.values():
                task.cancel()
            if control and peer_id:
                self._goodbye(peer_id, said_bye)
            writer.close()

    def _hello(self, peer_id: str, desc: str, control: bool) -> None:
        peer = self.peers.get(peer_id)
        if peer is None:
            peer = self.peers[peer_id] = _Peer(peer_id, desc)
        peer.desc = desc
        if control:
            self._control[peer_id] = self._control.get(peer_id, 0) + 1
            # A named actor came back (a restarted worker): forget the death of its predecessor.
            name = desc.split(" (pid")[0]
            for other in self.peers.values():
                if (
                    other.dead_since is not None
                    and name.startswith("actor '")
                    and other.desc.split(" (pid")[0] == name
                ):
                    other.dead_since = None
                    self._forget(other.name)

    def _forget(self, peer_id: str) -> None:
        for k in self.keys.values():
            k.producers.discard(peer_id)
            k.consumers.discard(peer_id)

    def _goodbye(self, peer_id: str, said_bye: bool) -> None:
        left = self._control.get(peer_id, 1) - 1
        self._control[peer_id] = left
        if said_bye:
            if left <= 0:
                self._forget(peer_id)
            return
        peer = self.peers.get(peer_id)
        if peer is not None and peer.dead_since is None:
            peer.dead_since = time.time()
            for k in self.keys.values():
                if peer_id in k.producers or peer_id in k.consumers:
                    self._wake(k)

    def _dispatch(
        self,
        writer: asyncio.StreamWriter,
        tasks: dict[int, asyncio.Task[None]],
        cancelled: set[int],
        peer: str,
        rid: int,
        op: str,
        args: tuple[Any, ...],
    ) -> None:
        def reply(ok: bool, value: Any) -> None:
            if not writer.is_closing():
                writer.write(_frame((rid, ok, value)))

        def fail(exc: BaseException) -> None:
            reply(False, (type(exc).__name__, str(exc), getattr(exc, "peer", "")))

        handler = getattr(self, "op_" + op, None)
        if handler is None:
            fail(ChannelError(f"unknown channel operation {op!r}"))
            return
        try:
            result = handler(peer, *args)
        except (ChannelError, ValueError) as exc:
            fail(exc)
            return
        if not asyncio.iscoroutine(result):
            reply(True, result)
            return

        async def run() -> None:
            try:
                value = await result
                if rid in cancelled:
                    # The client gave up while the item arrived (asyncio.wait_for returns a
                    # result that raced with the cancellation): the item goes back to the head.
                    if op in ("get", "get_batch"):
                        self._give_back(self._key(args[0]), [value] if op == "get" else list(value))
                    return
                reply(True, value)
            except (ChannelError, ValueError) as exc:
                if rid not in cancelled:
                    fail(exc)
            except asyncio.CancelledError:
                pass
            finally:
                tasks.pop(rid, None)
                cancelled.discard(rid)

        tasks[rid] = asyncio.get_running_loop().create_task(run())

    # -- helpers ------------------------------------------------------------------------------------
    def _key(self, key: Hashable) -> _Key:
        k = self.keys.get(key)
        if k is None:
            k = self.keys[key] = _Key()
        return k

    def _wake(self, k: _Key) -> None:
        waiters, k.waiters = k.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _wake_all(self) -> None:
        for k in self.keys.values():
            self._wake(k)
        waiters, self._route_waiters = self._route_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _is_full(self, k: _Key) -> bool:
        return self.maxsize > 0 and len(k.items) >= self.maxsize

    def _check_open(self) -> None:
        if self.closed:
            raise ChannelClosed(f"channel {self.name!r} is closed")

    def _check_dead(self, ids: Iterable[str], role: str, key: Hashable, what: str) -> None:
        for pid in ids:
            peer = self.peers.get(pid)
            if peer is not None and peer.dead_since is not None:
                raise ChannelPeerDied(
                    f"{role} {peer.desc} of key {key!r} of channel {self.name!r} died "
                    f"(its connection dropped {time.time() - peer.dead_since:.1f} s ago) "
                    f"while waiting {what}",
                    peer.desc,
                )

    def _timeout(self, what: str, key: Hashable, t: float) -> ChannelTimeout:
        return ChannelTimeout(
            f"timed out after {t:g} s waiting {what} on key {key!r} of channel {self.name!r}"
        )

    async def _wait(self, k: _Key, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        k.waiters.append(fut)
        try:
            await asyncio.wait_for(fut, None if math.isinf(remaining) else remaining)
            return True
        except TimeoutError:
            return False
        finally:
            if not fut.done():
                fut.cancel()

    def _append(self, k: _Key, entry: tuple[Any, ...]) -> None:
        k.items.append(entry)
        k.weight += entry[2]
        self._wake(k)

    def _popleft(self, k: _Key) -> tuple[Any, ...]:
        entry = k.items.popleft()
        k.weight -= entry[2]
        self._wake(k)
        return entry

    def _give_back(self, k: _Key, taken: list[tuple[Any, ...]]) -> None:
        for entry in reversed(taken):
            k.items.appendleft(entry)
            k.weight += entry[2]
        taken.clear()
        self._wake(k)

    @staticmethod
    def _deadline(t: float) -> float:
        if t < 0:
            raise ValueError(f"timeout must be >= 0, got {t}")
        return time.monotonic() + t

    def _drop(self, entry: tuple[Any, ...]) -> None:
        if entry[0] in ("r", "rt"):
            fut = self._slots.pop(entry[1], None)
            if fut is None or not fut.done():
                self._dropped.add(entry[1])  # its reference may still be on its way: discard it then
            if fut is not None and not fut.done():
                fut.cancel()

    # -- operations (peer id first; plain return = immediate reply, coroutine = may wait) --------
    def op_info(self, peer: str) -> dict[str, Any]:
        return {"maxsize": self.maxsize, "default_timeout": self.default_timeout, "closed": self.closed}

    def op_put(self, peer: str, key: Hashable, entry: tuple[Any, ...], timeout: float, nowait: bool) -> Any:
        try:
            self._check_open()
        except ChannelClosed:
            self._drop(entry)
            raise
        k = self._key(key)
        k.producers.add(peer)
        if not self._is_full(k):
            self._append(k, entry)
            return None
        if nowait:
            self._drop(entry)
            raise ChannelFull(f"key {key!r} of channel {self.name!r} is full ({self.maxsize} items)")
        return self._put_wait(k, key, entry, timeout)

    async def _put_wait(self, k: _Key, key: Hashable, entry: tuple[Any, ...], timeout: float) -> None:
        deadline = self._deadline(timeout)
        ok = False
        try:
            while True:
                self._check_open()
                if not self._is_full(k):
                    self._append(k, entry)
                    ok = True
                    return
                self._check_dead(k.consumers, "consumer", key, "for room (the queue is full)")
                if not await self._wait(k, deadline):
                    raise self._timeout("for room (the queue is full)", key, timeout)
        finally:
            if not ok:
                self._drop(entry)

    def op_put_many(self, peer: str, key: Hashable, entries: list[tuple[Any, ...]], timeout: float) -> Any:
        self._check_open()
        k = self._key(key)
        k.producers.add(peer)
        if self.maxsize == 0 or len(k.items) + len(entries) <= self.maxsize:
            k.items.extend(entries)  # one wake-up for the whole batch
            k.weight += sum(e[2] for e in entries)
            self._wake(k)
            return None
        i = 0
        while i < len(entries) and not self._is_full(k):
            self._append(k, entries[i])
            i += 1
        if i == len(entries):
            return None
        return self._put_many_wait(k, key, entries, i, timeout)

    async def _put_many_wait(
        self, k: _Key, key: Hashable, entries: list[tuple[Any, ...]], i: int, timeout: float
    ) -> None:
        deadline = self._deadline(timeout)
        try:
            while i < len(entries):
                self._check_open()
                while i < len(entries) and not self._is_full(k):
                    self._append(k, entries[i])
                    i += 1
                if i == len(entries):
                    return
                self._check_dead(k.consumers, "consumer", key, "for room (the queue is full)")
                if not await self._wait(k, deadline):
                    raise self._timeout(
                        f"for room (the queue is full; {i} of {len(entries)} items were put)", key, timeout
                    )
        finally:
            for entry in entries[i:]:
                self._drop(entry)

    def op_get(self, peer: str, key: Hashable, timeout: float, nowait: bool) -> Any:
        k = self._key(key)
        k.consumers.add(peer)
        if k.items:
            return self._popleft(k)
        self._check_open()
        if nowait:
            raise ChannelEmpty(f"key {key!r} of channel {self.name!r} is empty")
        return self._get_wait(k, key, timeout)

    async def _get_wait(self, k: _Key, key: Hashable, timeout: float) -> tuple[Any, ...]:
        deadline = self._deadline(timeout)
        while True:
            if k.items:
                return self._popleft(k)
            self._check_open()
            self._check_dead(k.producers, "producer", key, "for an item")
            if not await self._wait(k, deadline):
                raise self._timeout("for an item", key, timeout)

    def op_get_batch(self, peer: str, key: Hashable, target: float, timeout: float, nowait: bool) -> Any:
        k = self._key(key)
        k.consumers.add(peer)
        if k.weight >= target:
            taken: list[tuple[Any, ...]] = []
            got = 0.0
            items = k.items
            while got < target and items:
                entry = items.popleft()
                taken.append(entry)
                got += entry[2]
            k.weight -= got
            self._wake(k)
            return taken
        self._check_open()
        if nowait:
            raise ChannelEmpty(f"key {key!r} of channel {self.name!r} holds weight {k.weight:g} < {target:g}")
        return self._get_batch_wait(k, key, target, timeout)

    async def _get_batch_wait(self, k: _Key, key: Hashable, target: float, timeout: float) -> list[Any]:
        deadline = self._deadline(timeout)
        taken: list[tuple[Any, ...]] = []
        got = 0.0
        try:
            while True:
                while k.items and got < target:
                    entry = self._popleft(k)
                    taken.append(entry)
                    got += entry[2]
                if got >= target:
                    result, taken = taken, []
                    return result
                self._check_open()
                what = f"for items of weight {target:g} (have {got:g})"
                self._check_dead(k.producers, "producer", key, what)
                if not await self._wait(k, deadline):
                    raise self._timeout(what, key, timeout)
        finally:
            # Timeout, close, dead peer or cancellation: nothing taken is lost.
            if taken:
                self._give_back(k, taken)

    def op_unget(self, peer: str, key: Hashable, entries: list[tuple[Any, ...]]) -> None:
        """Put entries back at the head (a client cancelled a get whose reply was in flight)."""
        self._give_back(self._key(key), list(entries))

    def op_qsize(self, peer: str, key: Hashable) -> int:
        k = self.keys.get(key)
        return len(k.items) if k else 0

    def op_weight(self, peer: str, key: Hashable) -> float:
        k = self.keys.get(key)
        return k.weight if k else 0.0

    def op_full(self, peer: str, key: Hashable) -> bool:
        k = self.keys.get(key)
        return k is not None and self._is_full(k)

    def op_keys(self, peer: str) -> list[Hashable]:
        return [key for key, k in self.keys.items() if k.items]

    def op_close(self, peer: str) -> None:
        self.closed = True
        self._wake_all()

    def op_closed(self, peer: str) -> bool:
        return self.closed

    # -- key routing of DistributedRayChannel (kept by its home replica) ---------------------------
    def op_route(self, peer: str, key: Hashable, node: str | None, timeout: float) -> Any:
        """The node whose replica holds ``key``; a producer (``node`` given) claims it if unclaimed,
        a consumer (``node`` None) waits until some producer has."""
        if key in self.routes:
            return self.routes[key]
        self._check_open()
        if node is not None:
            self.routes[key] = node
            waiters, self._route_waiters = self._route_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            return node
        return self._route_wait(key, timeout)

    async def _route_wait(self, key: Hashable, timeout: float) -> str:
        deadline = self._deadline(timeout)
        while key not in self.routes:
            self._check_open()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timeout("for a producer to claim the key", key, timeout)
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._route_waiters.append(fut)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, None if math.isinf(remaining) else remaining)
        return self.routes[key]

    def op_route_peek(self, peer: str, key: Hashable) -> str | None:
        return self.routes.get(key)

    def op_route_nodes(self, peer: str) -> list[str]:
        return sorted(set(self.routes.values()))

    def op_peers(self, peer: str) -> list[dict[str, Any]]:
        return [
            {
                "id": p.name,
                "desc": p.desc,
                "dead": p.dead_since is not None,
                "connected": self._control.get(i, 0),
            }
            for i, p in self.peers.items()
        ]

    # -- object-store slots ---------------------------------------------------------------------------
    def _slot(self, slot: bytes) -> asyncio.Future[Any]:
        fut = self._slots.get(slot)
        if fut is None:
            fut = self._slots[slot] = asyncio.get_running_loop().create_future()
        return fut

    def hold(self, slot: bytes, refs: list[Any]) -> None:
        if slot in self._dropped:
            self._dropped.discard(slot)
            return
        fut = self._slot(slot)
        if not fut.done():
            fut.set_result(refs[0])

    async def take(self, slots: list[bytes], producers: list[str]) -> list[Any]:
        refs = []
        for slot, producer in zip(slots, producers, strict=True):
            fut = self._slot(slot)
            try:
                refs.append(await asyncio.wait_for(asyncio.shield(fut), _SLOT_WAIT))
            except TimeoutError:
                raise ChannelPeerDied(
                    f"the payload of an item of channel {self.name!r} from producer {producer} never "
                    f"reached the channel within {_SLOT_WAIT:g} s (did the producer die?)",
                    producer,
                ) from None
            finally:
                if fut.done():
                    self._slots.pop(slot, None)
        return refs


def _channel_actor_class() -> Any:
    import ray

    @ray.remote(num_cpus=0, max_concurrency=10_000, max_restarts=0)
    class RlinfChannelActor:
        """Ray actor holding one :class:`ChannelCore` and its TCP data plane."""

        def __init__(self, name: str, maxsize: int, default_timeout: float, host: str | None) -> None:
            self.core = ChannelCore(name, maxsize, default_timeout)
            self.host = host

        async def connect_info(self) -> dict[str, Any]:
            host = self.host or _node_address()
            address = await self.core.start(host)
            return {
                "address": address,
                "token": self.core.token,
                "maxsize": self.core.maxsize,
                "default_timeout": self.core.default_timeout,
                "node_id": ray.get_runtime_context().get_node_id(),
            }

        async def hold(self, slot: bytes, refs: list[Any]) -> None:
            self.core.hold(slot, refs)

        async def take(self, slots: list[bytes], producers: list[str]) -> list[Any]:
            return await self.core.take(slots, producers)

        async def state(self) -> dict[str, Any]:
            return {
                "closed": self.core.closed,
                "keys": {repr(k): len(v.items) for k, v in self.core.keys.items()},
                "peers": self.core.op_peers(""),
            }

    return RlinfChannelActor


_ACTOR_CLS: Any = None


def _actor_cls() -> Any:
    global _ACTOR_CLS
    if _ACTOR_CLS is None:
        _ACTOR_CLS = _channel_actor_class()
    return _ACTOR_CLS


def _node_address() -> str:
    """The address Ray uses for this node (the overlay address when Ray is bound to one)."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return node["NodeManagerAddress"]
    return ray.util.get_node_ip_address()


# ------------------------------------------------------------------------------------------------
# Client side
# ------------------------------------------------------------------------------------------------

_PEER_ID = uuid.uuid4().hex
_PEER_DESC: str | None = None
_CLIENTS: weakref.WeakSet[RayChannel] = weakref.WeakSet()


def _peer_desc() -> str:
    """``'<name> (pid N, node ADDR)'`` for this process: its actor name or id, else ``driver``."""
    global _PEER_DESC
    if _PEER_DESC is None:
        import ray

        ctx = ray.get_runtime_context()
        name = "driver"
        try:
            actor_id = ctx.get_actor_id()
        except Exception:
            actor_id = None
        if actor_id:
            actor_name = ctx.get_actor_name()
            name = f"actor {actor_name!r}" if actor_name else f"actor {actor_id}"
            with contextlib.suppress(Exception):
                name += f" [{ctx.current_actor._ray_actor_creation_function_descriptor.class_name}]"
        elif getattr(getattr(ctx, "worker", None), "mode", 0) != 0:  # a task in a worker process
            name = "task worker"
        try:
            node = _node_address()
        except Exception:
            node = "?"
        _PEER_DESC = f"{name} (pid {os.getpid()}, node {node})"
    return _PEER_DESC


class _SyncConn:
    """One blocking connection; a request is a write then a read of the reply."""

    def __init__(self, address: tuple[str, int], token: str, control: bool, connect_timeout: float) -> None:
        self.sock = socket.create_connection(address, timeout=connect_timeout)
        _keepalive(self.sock)
        self.file = self.sock.makefile("rb", buffering=1 << 16)
        self.sock.sendall(_hello(token, control))
        self._read(connect_timeout)

    def _read(self, timeout: float | None) -> Any:
        self.sock.settimeout(timeout)
        hdr = self.file.read(4)
        if len(hdr) < 4:
            raise ConnectionError("connection closed")
        n = _HDR.unpack(hdr)[0]
        body = self.file.read(n)
        if len(body) < n:
            raise ConnectionError("connection closed")
        _rid, ok, value = pickle.loads(body)
        if not ok:
            _raise_remote(value)
        return value

    def call(self, op: str, args: tuple[Any, ...], wait: float | None) -> Any:
        self.sock.sendall(_frame((0, op, args)))
        return self._read(wait)

    def bye(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(_frame((0, "bye", ())))
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
            self.sock.close()


class _AsyncConn:
    """One multiplexed asyncio connection per event loop: many requests in flight, replies by id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, tuple[asyncio.Future[Any], str, Hashable]] = {}
        self.next_id = 1
        self.error: BaseException | None = None
        self.task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, address: tuple[str, int], token: str, timeout: float) -> _AsyncConn:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*address, limit=1 << 20), timeout)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            _keepalive(sock)
        writer.write(_hello(token, False))
        n = _HDR.unpack(await asyncio.wait_for(reader.readexactly(4), timeout))[0]
        _, ok, value = pickle.loads(await reader.readexactly(n))
        if not ok:
            _raise_remote(value)
        return cls(reader, writer)

    async def _read_loop(self) -> None:
        try:
            while True:
                n = _HDR.unpack(await self.reader.readexactly(4))[0]
                rid, ok, value = pickle.loads(await self.reader.readexactly(n))
                item = self.pending.pop(rid, None)
                if item is None:
                    continue
                fut, op, key = item
                if fut.cancelled():
                    # The reply of a get the caller cancelled was already on its way: put its
                    # item(s) back at the head of the queue, in order, on this connection.
                    if ok and op in ("get", "get_batch") and not self.writer.is_closing():
                        entries = [value] if op == "get" else value
                        self.writer.write(_frame((0, "unget", (key, entries))))
                    continue
                if ok:
                    fut.set_result(value)
                else:
                    try:
                        _raise_remote(value)
                    except Exception as exc:
                        fut.set_exception(exc)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self.error = exc
        finally:
            for fut, _, _ in self.pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection to the channel actor closed"))
            self.pending.clear()

    async def call(self, op: str, args: tuple[Any, ...], key: Hashable, wait: float | None) -> Any:
        if self.error is not None or self.task.done():
            raise ConnectionError("connection to the channel actor closed")
        rid = self.next_id
        self.next_id += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[rid] = (fut, op, key)
        self.writer.write(_frame((rid, op, args)))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except asyncio.CancelledError:
            # Cancelled by the caller: stop the server-side wait; an item already on its way is
            # put back at the head by the read loop.
            fut.cancel()
            if not self.writer.is_closing():
                self.writer.write(_frame((0, "cancel", rid)))
            raise
        except TimeoutError:
            fut.cancel()
            raise

    def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(Exception):
            self.writer.close()


class RayChannel(Channel):
    """A :class:`~rlinf_core.channel.Channel` shared by every process of a Ray cluster.

    Create or connect with :meth:`create` / :meth:`connect`; a handle can also be passed to a Ray
    task or actor (it pickles as the channel's name and reconnects there). Thread-safe; the async
    methods may run on any number of event loops.

    Parameters of :meth:`create`:
        name: the channel's name (the actor is ``rlinf-channel:<name>``).
        maxsize: bound on the number of items of each key (``0``: unbounded).
        default_timeout: seconds a blocking call waits when its ``timeout`` is ``None``.
        node_id: the Ray node id the channel actor must live on (default: this process's node).
        namespace: the Ray namespace of the actor (default: the current one).
        detached: keep the channel alive after its creator exits (until :meth:`destroy`).
        inline_limit: items with at least this many payload bytes go through the object store.
    """

    def __init__(
        self,
        name: str,
        actor: Any,
        info: dict[str, Any],
        *,
        namespace: str | None = None,
        inline_limit: int = INLINE_LIMIT,
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.maxsize: int = info["maxsize"]
        self.default_timeout: float = info["default_timeout"]
        self.node_id: str = info["node_id"]
        self.inline_limit = inline_limit
        self._actor = actor
        self._address: tuple[str, int] = tuple(info["address"])  # type: ignore[assignment]
        self._token: str = info["token"]
        self._lock = threading.Lock()
        self._pool: list[_SyncConn] = []
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._closed_local = False
        self._disconnected = False
        self._desc = _peer_desc()
        self._control = _SyncConn(self._address, self._token, True, 30.0)
        _CLIENTS.add(self)

    # -- creation / connection ----------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        name: str,
        *,
        maxsize: int = 0,
        default_timeout: float = DEFAULT_TIMEOUT,
        node_id: str | None = None,
        namespace: str | None = None,
        detached: bool = False,
        inline_limit: int = INLINE_LIMIT,
        timeout: float = 60.0,
    ) -> RayChannel:
        """Create the channel ``name`` (or connect to it if it exists) and return a handle.

        Raises :class:`ChannelError` if a channel of that name exists with another ``maxsize``,
        ``ValueError`` for a bad argument.
        """
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        _check_name(name)
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0, got {maxsize}")
        if not default_timeout >= 0:
            raise ValueError(f"default_timeout must be >= 0, got {default_timeout}")
        node = node_id or ray.get_runtime_context().get_node_id()
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if node not in alive:
            raise ValueError(f"node_id {node!r} of channel {name!r} is not an alive Ray node")
        options: dict[str, Any] = {
            "name": ACTOR_PREFIX + name,
            "get_if_exists": True,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False),
        }
        if namespace is not None:
            options["namespace"] = namespace
        if detached:
            options["lifetime"] = "detached"
        actor = _actor_cls().options(**options).remote(name, maxsize, default_timeout, None)
        info = _get(actor.connect_info.remote(), timeout, f"channel actor {name!r} to start")
        if info["maxsize"] != maxsize:
            raise ChannelError(
                f"channel {name!r} already exists with maxsize={info['maxsize']}, not {maxsize}; "
                "connect to it with RayChannel.connect or pick another name"
            )
        return cls(name, actor, info, namespace=namespace, inline_limit=inline_limit)

    @classmethod
    def connect(
        cls,
        name: str,
        *,
        namespace: str | None = None,
        timeout: float = 60.0,
        inline_limit: int = INLINE_LIMIT,
    ) -> RayChannel:
        """Connect to the existing channel ``name``, waiting up to ``timeout`` s for it to appear."""
        import ray

        _check_name(name)
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            try:
                actor = ray.get_actor(ACTOR_PREFIX + name, namespace=namespace)
                break
            except ValueError:
                if time.monotonic() >= deadline:
                    raise ChannelTimeout(
                        f"timed out after {timeout:g} s waiting for channel {name!r} to be created "
                        f"(namespace {namespace or ray.get_runtime_context().namespace!r})"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        info = _get(actor.connect_info.remote(), max(deadline - time.monotonic(), 1.0), f"channel {name!r}")
        return cls(name, actor, info, namespace=namespace, inline_limit=inline_limit)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reconnect, (self.name, self.namespace, self.inline_limit))

    def __repr__(self) -> str:
        return f"RayChannel({self.name!r}, maxsize={self.maxsize}, node={self.node_id[:12]})"

    # -- connections ------------------------------------------------------------------------------------
    def _call(self, op: str, args: tuple[Any, ...], wait: float | None = _REPLY_SLACK) -> Any:
        if self._disconnected:
            raise ChannelError(f"this handle of channel {self.name!r} was disconnected")
        with self._lock:
            conn = self._pool.pop() if self._pool else None
        try:
            if conn is None:
                conn = _SyncConn(self._address, self._token, False, _REPLY_SLACK)
            result = conn.call(op, args, wait)
        except (ChannelError, ValueError):
            with self._lock:  # a reply that carried an error: the connection is in sync
                self._pool.append(conn)  # type: ignore[arg-type]
            raise
        except (ConnectionError, OSError, TimeoutError) as exc:
            if conn is not None:
                conn.close()
            raise self._lost(exc) from exc
        except BaseException:
            if conn is not None:  # interrupted mid-call: its reply would desynchronise the stream
                conn.close()
            raise
        with self._lock:
            self._pool.append(conn)
        return result

    def _lost(self, exc: BaseException) -> ChannelError:
        if isinstance(exc, TimeoutError | socket.timeout):
            return ChannelTimeout(
                f"channel actor of {self.name!r} did not answer within the operation's timeout "
                f"plus {_REPLY_SLACK:g} s (is its node overloaded or gone?)"
            )
        return ChannelPeerDied(
            f"lost the connection to the actor of channel {self.name!r} on node {self._address[0]} ({exc}); "
            "the channel actor died or its node is unreachable",
            f"channel actor {ACTOR_PREFIX}{self.name}",
        )

    async def _acall(
        self, op: str, args: tuple[Any, ...], key: Hashable = None, wait: float | None = None
    ) -> Any:
        if self._disconnected:
            raise ChannelError(f"this handle of channel {self.name!r} was disconnected")
        loop = asyncio.get_running_loop()
        conn = self._async.get(loop)
        if isinstance(conn, asyncio.Future):
            conn = await asyncio.shield(conn)
        if conn is None or conn.error is not None:
            # The connection opens in a task of its own: a caller cancelled while it opens (an
            # aget given up on) must not cancel it under the other callers waiting for it.
            opening = loop.create_task(self._open_async(loop))
            opening.add_done_callback(lambda t: t.cancelled() or t.exception())  # mark retrieved
            self._async[loop] = opening
            conn = await asyncio.shield(opening)
        try:
            return await conn.call(op, args, key, wait)
        except (ConnectionError, OSError, TimeoutError) as exc:
            raise self._lost(exc) from exc

    async def _open_async(self, loop: asyncio.AbstractEventLoop) -> Any:
        try:
            conn = await _AsyncConn.open(self._address, self._token, _REPLY_SLACK)
        except BaseException as exc:
            self._async.pop(loop, None)
            if isinstance(exc, OSError | ConnectionError | TimeoutError):
                raise self._lost(exc) from exc
            raise
        self._async[loop] = conn
        return conn

    def _timeout_of(self, timeout: float | None) -> float:
        t = self.default_timeout if timeout is None else timeout
        if t < 0:
            raise ValueError(f"timeout must be >= 0, got {t}")
        return t

    @staticmethod
    def _wait_of(t: float) -> float | None:
        return None if math.isinf(t) else t + _REPLY_SLACK

    # -- payloads ----------------------------------------------------------------------------------------
    def _encode(self, item: Any, weight: float) -> tuple[tuple[Any, ...], Any]:
        """(entry, ObjectRef or None). Large payloads go to the object store once."""
        if not weight > 0:
            _check_weight(weight)
        if type(item) in _SCALARS:  # the fast path of small control items
            return ("b", pickle.dumps(item, _PICKLE), weight, self._desc), None
        packed, nbytes, has_torch = pack_payload(item)
        if nbytes >= self.inline_limit:
            import ray

            ref = ray.put(packed)
            return ("rt" if has_torch else "r", uuid.uuid4().bytes, weight, self._desc), ref
        return ("t" if has_torch else "b", pickle.dumps(packed, _PICKLE), weight, self._desc), None

    def _hold(self, entry: tuple[Any, ...], ref: Any) -> None:
        if ref is not None:
            self._actor.hold.remote(entry[1], [ref])

    def _decode(self, entries: list[tuple[Any, ...]]) -> list[Any]:
        if all(e[0] == "b" for e in entries):
            return [pickle.loads(e[1]) for e in entries]
        slots = [e for e in entries if e[0] in ("r", "rt")]
        fetched: dict[bytes, Any] = {}
        if slots:
            import ray

            refs = _get(
                self._actor.take.remote([e[1] for e in slots], [e[3] for e in slots]),
                _SLOT_WAIT + _REPLY_SLACK,
                f"item references of channel {self.name!r}",
            )
            try:
                values = ray.get(refs)
            except ray.exceptions.ObjectLostError as exc:
                raise self._payload_lost(slots, exc) from exc
            fetched = {e[1]: v for e, v in zip(slots, values, strict=True)}
        return [self._value(e, fetched) for e in entries]

    async def _adecode(self, entries: list[tuple[Any, ...]]) -> list[Any]:
        slots = [e for e in entries if e[0] in ("r", "rt")]
        fetched: dict[bytes, Any] = {}
        if slots:
            import ray

            try:
                refs = await self._actor.take.remote([e[1] for e in slots], [e[3] for e in slots])
                values = await asyncio.gather(*refs)
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(getattr(exc, "cause", None), ChannelError) else None
                if cause is not None:
                    raise cause from None
                raise
            except ray.exceptions.ObjectLostError as exc:
                raise self._payload_lost(slots, exc) from exc
            fetched = {e[1]: v for e, v in zip(slots, values, strict=True)}
        return [self._value(e, fetched) for e in entries]

    def _payload_lost(self, slots: list[tuple[Any, ...]], exc: BaseException) -> ChannelPeerDied:
        producers = sorted({e[3] for e in slots})
        return ChannelPeerDied(
            f"the object-store payload of an item of channel {self.name!r} is lost: its producer "
            f"{', '.join(producers)} died before the item was read ({type(exc).__name__})",
            producers[0],
        )

    @staticmethod
    def _value(entry: tuple[Any, ...], fetched: dict[bytes, Any]) -> Any:
        kind, data = entry[0], entry[1]
        if kind == "b":
            return pickle.loads(data)
        if kind == "t":
            return unpack_payload(pickle.loads(data))
        value = fetched[data]
        return unpack_payload(value) if kind == "rt" else value

    # -- sync API ---------------------------------------------------------------------------------------
    def put(
        self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1, timeout: float | None = None
    ) -> None:
        t = self._timeout_of(timeout)
        entry, ref = self._encode(item, weight)
        self._hold(entry, ref)
        self._call("put", (key, entry, t, False), self._wait_of(t))

    def put_nowait(self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1) -> None:
        entry, ref = self._encode(item, weight)
        self._hold(entry, ref)
        self._call("put", (key, entry, 0.0, True))

    def put_many(
        self,
        items: Iterable[Any],
        key: Hashable = DEFAULT_KEY,
        *,
        weights: Iterable[float] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Put several items on ``key`` in one message, in order (the batched fast path).

        Waits for room as :meth:`put` does; on timeout the items already placed stay queued and
        the error says how many.
        """
        t = self._timeout_of(timeout)
        items = list(items)
        ws = [1.0] * len(items) if weights is None else list(weights)
        if len(ws) != len(items):
            raise ValueError(f"put_many got {len(items)} items but {len(ws)} weights")
        entries = []
        for item, w in zip(items, ws, strict=True):
            entry, ref = self._encode(item, w)
            self._hold(entry, ref)
            entries.append(entry)
        if entries:
            self._call("put_many", (key, entries, t), self._wait_of(t))

    def get(self, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None) -> Any:
        t = self._timeout_of(timeout)
        return self._decode([self._call("get", (key, t, False), self._wait_of(t))])[0]

    def get_nowait(self, key: Hashable = DEFAULT_KEY) -> Any:
        return self._decode([self._call("get", (key, 0.0, True))])[0]

    def get_batch(
        self, target_weight: float, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None
    ) -> list[Any]:
        _check_target(target_weight)
        t = self._timeout_of(timeout)
        return self._decode(self._call("get_batch", (key, float(target_weight), t, False), self._wait_of(t)))

    def get_batch_nowait(self, target_weight: float, key: Hashable = DEFAULT_KEY) -> list[Any]:
        """Like :meth:`get_batch`, but raise :class:`ChannelEmpty` unless the weight is there now."""
        _check_target(target_weight)
        return self._decode(self._call("get_batch", (key, float(target_weight), 0.0, True)))

    def qsize(self, key: Hashable = DEFAULT_KEY) -> int:
        return self._call("qsize", (key,))

    def weight(self, key: Hashable = DEFAULT_KEY) -> float:
        """Summed weight of the items waiting in queue ``key``."""
        return self._call("weight", (key,))

    def full(self, key: Hashable = DEFAULT_KEY) -> bool:
        return self._call("full", (key,))

    def keys(self) -> list[Hashable]:
        """Keys that currently hold at least one item."""
        return self._call("keys", ())

    def peers(self) -> list[dict[str, Any]]:
        """Processes that connected: ``{"id", "desc", "dead", "connected"}`` each."""
        return self._call("peers", ())

    def close(self) -> None:
        self._call("close", ())
        self._closed_local = True

    @property
    def closed(self) -> bool:
        if self._closed_local:
            return True
        self._closed_local = self._call("closed", ())
        return self._closed_local

    def disconnect(self) -> None:
        """Say goodbye and drop this handle's connections (the channel itself stays)."""
        if self._disconnected:
            return
        self._disconnected = True
        with self._lock:
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.bye()
        for conn in list(self._async.values()):
            if isinstance(conn, _AsyncConn):
                with contextlib.suppress(Exception):
                    conn.writer.write(_frame((0, "bye", ())))
                    conn.close()
        self._control.bye()

    def destroy(self) -> None:
        """Close the channel and kill its actor (queued items are dropped)."""
        import ray

        with contextlib.suppress(ChannelError):
            self.close()
        self.disconnect()
        ray.kill(self._actor, no_restart=True)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.disconnect()

    # -- asyncio API ------------------------------------------------------------------------------------
    async def aput(
        self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1, timeout: float | None = None
    ) -> None:
        t = self._timeout_of(timeout)
        entry, ref = self._encode(item, weight)
        self._hold(entry, ref)
        await self._acall("put", (key, entry, t, False), key, self._wait_of(t))

    async def aget(self, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None) -> Any:
        t = self._timeout_of(timeout)
        entry = await self._acall("get", (key, t, False), key, self._wait_of(t))
        return (await self._adecode([entry]))[0]

    async def aget_batch(
        self, target_weight: float, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None
    ) -> list[Any]:
        _check_target(target_weight)
        t = self._timeout_of(timeout)
        entries = await self._acall("get_batch", (key, float(target_weight), t, False), key, self._wait_of(t))
        return await self._adecode(entries)

    async def aput_many(
        self,
        items: Iterable[Any],
        key: Hashable = DEFAULT_KEY,
        *,
        weights: Iterable[float] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Async :meth:`put_many`."""
        t = self._timeout_of(timeout)
        items = list(items)
        ws = [1.0] * len(items) if weights is None else list(weights)
        if len(ws) != len(items):
            raise ValueError(f"put_many got {len(items)} items but {len(ws)} weights")
        entries = []
        for item, w in zip(items, ws, strict=True):
            entry, ref = self._encode(item, w)
            self._hold(entry, ref)
            entries.append(entry)
        if entries:
            await self._acall("put_many", (key, entries, t), key, self._wait_of(t))


def _reconnect(name: str, namespace: str | None, inline_limit: int) -> RayChannel:
    return RayChannel.connect(name, namespace=namespace, inline_limit=inline_limit)


def _get(ref: Any, timeout: float, what: str) -> Any:
    import ray

    try:
        return ray.get(ref, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise ChannelTimeout(f"timed out after {timeout:g} s waiting for {what}") from None
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, ChannelError):
            raise cause from None
        raise
    except ray.exceptions.RayActorError as exc:
        raise ChannelPeerDied(f"the actor behind {what} died: {exc}", what) from None


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"channel name must be a non-empty string without '/', got {name!r}")


def _check_weight(weight: float) -> None:
    if not weight > 0:
        raise ValueError(f"weight must be > 0, got {weight!r}")


def _check_target(target: float) -> None:
    if not target > 0:
        raise ValueError(f"target_weight must be > 0, got {target!r}")


class DistributedRayChannel(Channel):
    """A channel with one replica (a :class:`RayChannel` actor) per node that produces.

    The replica holding a key is the one on the node of the key's first producer: that producer's
    ``put`` stays on its node, and each consumer fetches from wherever its key lives (an
    object-store payload moves in one transfer). The *home* replica (``name``, on ``node_id`` or
    the creator's node) keeps the key -> node table and serves its own node's keys; the others are
    ``name@<node id>``, created on first use. A consumer that asks for a key no producer has claimed
    yet waits for the claim within its timeout. Same semantics and errors as :class:`RayChannel`.
    """

    def __init__(self, home: RayChannel, namespace: str | None, options: dict[str, Any]) -> None:
        import ray

        self.name = home.name
        self.maxsize = home.maxsize
        self.default_timeout = home.default_timeout
        self.namespace = namespace
        self._home = home
        self._options = options
        self._node = ray.get_runtime_context().get_node_id()
        self._routes: dict[Hashable, str] = {}
        self._replicas: dict[str, RayChannel] = {home.node_id: home}
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls,
        name: str,
        *,
        maxsize: int = 0,
        default_timeout: float = DEFAULT_TIMEOUT,
        node_id: str | None = None,
        namespace: str | None = None,
        detached: bool = False,
        inline_limit: int = INLINE_LIMIT,
        timeout: float = 60.0,
    ) -> DistributedRayChannel:
        """Create (or connect to) the distributed channel ``name``; see :meth:`RayChannel.create`."""
        options = {"maxsize": maxsize, "default_timeout": default_timeout, "detached": detached}
        home = RayChannel.create(
            name,
            node_id=node_id,
            namespace=namespace,
            inline_limit=inline_limit,
            timeout=timeout,
            **options,  # type: ignore[arg-type]
        )
        return cls(home, namespace, options)

    @classmethod
    def connect(
        cls, name: str, *, namespace: str | None = None, timeout: float = 60.0
    ) -> DistributedRayChannel:
        """Connect to the existing distributed channel ``name``."""
        home = RayChannel.connect(name, namespace=namespace, timeout=timeout)
        options = {"maxsize": home.maxsize, "default_timeout": home.default_timeout, "detached": False}
        return cls(home, namespace, options)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reconnect_distributed, (self.name, self.namespace, self._options))

    def __repr__(self) -> str:
        return f"DistributedRayChannel({self.name!r}, maxsize={self.maxsize}, replicas={len(self._replicas)})"

    def _replica(self, node: str) -> RayChannel:
        with self._lock:
            rep = self._replicas.get(node)
        if rep is not None:
            return rep
        name = f"{self.name}@{node}"
        if node == self._node:
            rep = RayChannel.create(
                name,
                node_id=node,
                namespace=self.namespace,
                inline_limit=self._home.inline_limit,
                **self._options,
            )
        else:
            rep = RayChannel.connect(name, namespace=self.namespace, inline_limit=self._home.inline_limit)
        with self._lock:
            return self._replicas.setdefault(node, rep)

    def _route(self, key: Hashable, produce: bool, timeout: float | None = None) -> RayChannel:
        node = self._routes.get(key)
        if node is None:
            t = self._home._timeout_of(timeout)
            node = self._home._call(
                "route", (key, self._node if produce else None, t), self._home._wait_of(t)
            )
            self._routes[key] = node
        return self._replica(node)

    async def _aroute(self, key: Hashable, produce: bool, timeout: float | None = None) -> RayChannel:
        node = self._routes.get(key)
        if node is None:
            t = self._home._timeout_of(timeout)
            node = await self._home._acall(
                "route", (key, self._node if produce else None, t), key, self._home._wait_of(t)
            )
            self._routes[key] = node
        return self._replica(node)

    def _peek(self, key: Hashable) -> RayChannel | None:
        node = self._routes.get(key) or self._home._call("route_peek", (key,))
        if node is None:
            return None
        self._routes[key] = node
        return self._replica(node)

    def node_of(self, key: Hashable) -> str | None:
        """The node id whose replica holds ``key`` (``None``: no producer claimed it yet)."""
        return self._routes.get(key) or self._home._call("route_peek", (key,))

    def put(
        self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1, timeout: float | None = None
    ) -> None:
        self._route(key, True).put(item, key, weight=weight, timeout=timeout)

    def put_nowait(self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1) -> None:
        self._route(key, True).put_nowait(item, key, weight=weight)

    def put_many(self, items: Iterable[Any], key: Hashable = DEFAULT_KEY, **kw: Any) -> None:
        """See :meth:`RayChannel.put_many`."""
        self._route(key, True).put_many(items, key, **kw)

    def get(self, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None) -> Any:
        start = time.monotonic()
        rep = self._route(key, False, timeout)
        return rep.get(key, timeout=_left(rep, timeout, start))

    def get_nowait(self, key: Hashable = DEFAULT_KEY) -> Any:
        rep = self._peek(key)
        if rep is None:
            raise ChannelEmpty(f"key {key!r} of channel {self.name!r} is empty (no producer yet)")
        return rep.get_nowait(key)

    def get_batch(
        self, target_weight: float, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None
    ) -> list[Any]:
        _check_target(target_weight)
        start = time.monotonic()
        rep = self._route(key, False, timeout)
        return rep.get_batch(target_weight, key, timeout=_left(rep, timeout, start))

    def qsize(self, key: Hashable = DEFAULT_KEY) -> int:
        rep = self._peek(key)
        return 0 if rep is None else rep.qsize(key)

    def full(self, key: Hashable = DEFAULT_KEY) -> bool:
        rep = self._peek(key)
        return False if rep is None else rep.full(key)

    def nodes(self) -> list[str]:
        """Node ids that hold a replica with at least one claimed key."""
        return self._home._call("route_nodes", ())

    def close(self) -> None:
        for node in self.nodes():
            if node != self._home.node_id:
                with contextlib.suppress(ChannelError):
                    self._replica(node).close()
        self._home.close()

    @property
    def closed(self) -> bool:
        return self._home.closed

    def disconnect(self) -> None:
        """Drop this handle's connections to every replica (the channel stays)."""
        for rep in list(self._replicas.values()):
            rep.disconnect()

    async def aput(
        self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1, timeout: float | None = None
    ) -> None:
        rep = await self._aroute(key, True)
        await rep.aput(item, key, weight=weight, timeout=timeout)

    async def aget(self, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None) -> Any:
        start = time.monotonic()
        rep = await self._aroute(key, False, timeout)
        return await rep.aget(key, timeout=_left(rep, timeout, start))

    async def aget_batch(
        self, target_weight: float, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None
    ) -> list[Any]:
        _check_target(target_weight)
        start = time.monotonic()
        rep = await self._aroute(key, False, timeout)
        return await rep.aget_batch(target_weight, key, timeout=_left(rep, timeout, start))


def _left(rep: RayChannel, timeout: float | None, start: float) -> float:
    t = rep._timeout_of(timeout)
    return t if math.isinf(t) else max(0.0, t - (time.monotonic() - start))


def _reconnect_distributed(
    name: str, namespace: str | None, options: dict[str, Any]
) -> DistributedRayChannel:
    chan = DistributedRayChannel.connect(name, namespace=namespace)
    chan._options = dict(options, detached=options.get("detached", False))
    return chan


@atexit.register
def _goodbye_all() -> None:
    for client in list(_CLIENTS):
        with contextlib.suppress(Exception):
            client.disconnect()

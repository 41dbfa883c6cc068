"""The channel actor: :class:`ChannelCore` (queues, waiters, peers, key routes) and the Ray actor
that runs it with its TCP data plane (:func:`actor_cls`).

The core runs on one asyncio thread and takes no locks. It serves the frames of
:mod:`~rlinf_scheduler.channel.wire` on a TCP port; each request names an ``op_*`` method (a plain
return is replied at once, a coroutine may wait). It never unpickles a payload: queue entries carry
pickled bytes or object-store slot ids. Usable as a plain asyncio server in tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import math
import pickle
import secrets
import time
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

from rlinf_core.errors import ChannelClosed, ChannelEmpty, ChannelError, ChannelFull, ChannelTimeout
from rlinf_scheduler.channel.peer import node_address
from rlinf_scheduler.channel.wire import HDR, SLOT_WAIT, TOKEN_BYTES, ChannelPeerDied, frame, keepalive

__all__ = ["ACTOR_PREFIX", "ChannelCore", "actor_cls"]

ACTOR_PREFIX = "rlinf-channel:"
"""Channel actors are named ``rlinf-channel:<name>`` in their Ray namespace."""


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
            keepalive(sock)
        peer_id = ""
        control = False
        said_bye = False
        tasks: dict[int, asyncio.Task[None]] = {}
        cancelled: set[int] = set()
        try:
            # The token comes first, as raw bytes: nothing from the network is unpickled before
            # the peer proved it got the token through Ray's authenticated RPC.
            token = await asyncio.wait_for(reader.readexactly(TOKEN_BYTES), 10.0)
            if not hmac.compare_digest(token, self.token.encode()):
                return
            n = HDR.unpack(await reader.readexactly(4))[0]
            if n > 4096:
                return
            peer_id, desc, control = pickle.loads(await reader.readexactly(n))
            self._hello(peer_id, desc, control)
            writer.write(frame((0, True, None)))
            while True:
                n = HDR.unpack(await reader.readexactly(4))[0]
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
                writer.write(frame((rid, ok, value)))

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
                refs.append(await asyncio.wait_for(asyncio.shield(fut), SLOT_WAIT))
            except TimeoutError:
                raise ChannelPeerDied(
                    f"the payload of an item of channel {self.name!r} from producer {producer} never "
                    f"reached the channel within {SLOT_WAIT:g} s (did the producer die?)",
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
            host = self.host or node_address()
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


def actor_cls() -> Any:
    """The Ray actor class of a channel (defined once, on first use: it needs Ray)."""
    global _ACTOR_CLS
    if _ACTOR_CLS is None:
        _ACTOR_CLS = _channel_actor_class()
    return _ACTOR_CLS

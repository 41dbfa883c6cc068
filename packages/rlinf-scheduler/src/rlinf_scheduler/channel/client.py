"""The client side of the data plane: connections to a channel actor and Ray calls.

:class:`SyncConn` is one blocking connection (a request is a write, then a read of the reply);
:class:`AsyncConn` multiplexes many requests over one asyncio connection per event loop.
:func:`ray_get` turns Ray's errors into the channel errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import socket
from collections.abc import Hashable
from typing import Any

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_scheduler.channel.peer import PEER_ID, peer_desc
from rlinf_scheduler.channel.wire import HDR, ChannelPeerDied, frame, hello, keepalive, raise_remote

__all__ = ["AsyncConn", "SyncConn", "pinned_actor_options", "ray_get"]


class SyncConn:
    """One blocking connection; a request is a write then a read of the reply."""

    def __init__(self, address: tuple[str, int], token: str, control: bool, connect_timeout: float) -> None:
        self.sock = socket.create_connection(address, timeout=connect_timeout)
        keepalive(self.sock)
        self.file = self.sock.makefile("rb", buffering=1 << 16)
        self.sock.sendall(hello(token, PEER_ID, peer_desc(), control))
        self._read(connect_timeout)

    def _read(self, timeout: float | None) -> Any:
        self.sock.settimeout(timeout)
        hdr = self.file.read(4)
        if len(hdr) < 4:
            raise ConnectionError("connection closed")
        n = HDR.unpack(hdr)[0]
        body = self.file.read(n)
        if len(body) < n:
            raise ConnectionError("connection closed")
        _rid, ok, value = pickle.loads(body)
        if not ok:
            raise_remote(value)
        return value

    def call(self, op: str, args: tuple[Any, ...], wait: float | None) -> Any:
        self.sock.sendall(frame((0, op, args)))
        return self._read(wait)

    def bye(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(frame((0, "bye", ())))
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
            self.sock.close()


class AsyncConn:
    """One multiplexed asyncio connection per event loop: many requests in flight, replies by id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, tuple[asyncio.Future[Any], str, Hashable]] = {}
        self.next_id = 1
        self.error: BaseException | None = None
        self.task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, address: tuple[str, int], token: str, timeout: float) -> AsyncConn:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*address, limit=1 << 20), timeout)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            keepalive(sock)
        writer.write(hello(token, PEER_ID, peer_desc(), False))
        n = HDR.unpack(await asyncio.wait_for(reader.readexactly(4), timeout))[0]
        _, ok, value = pickle.loads(await reader.readexactly(n))
        if not ok:
            raise_remote(value)
        return cls(reader, writer)

    async def _read_loop(self) -> None:
        try:
            while True:
                n = HDR.unpack(await self.reader.readexactly(4))[0]
                rid, ok, value = pickle.loads(await self.reader.readexactly(n))
                item = self.pending.pop(rid, None)
                if item is None:
                    continue
                fut, op, key = item
                if fut.cancelled():
                    # The reply of a get the caller cancelled was already on its way.
                    if ok:
                        self._give_back(op, key, value)
                    continue
                if ok:
                    fut.set_result(value)
                else:
                    try:
                        raise_remote(value)
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
        self.writer.write(frame((rid, op, args)))
        try:
            return await asyncio.wait_for(asyncio.shield(fut), wait)
        except (asyncio.CancelledError, TimeoutError) as exc:
            if fut.cancel():
                # No reply yet: stop the server-side wait of a caller that gave up (a timed-out
                # wait ends there on its own); an item already on its way is put back at the
                # head by the read loop.
                if isinstance(exc, asyncio.CancelledError) and not self.writer.is_closing():
                    self.writer.write(frame((0, "cancel", rid)))
            elif not fut.cancelled() and fut.exception() is None:
                # The reply came in the same loop turn as the cancellation or the timeout:
                # asyncio.wait_for gives up although the result is set, so its items go back.
                self._give_back(op, key, fut.result())
            raise

    def _give_back(self, op: str, key: Hashable, value: Any) -> None:
        """Put the item(s) of a get nobody will receive back at the head of the queue, in order."""
        if op in ("get", "get_batch") and not self.writer.is_closing():
            entries = [value] if op == "get" else value
            self.writer.write(frame((0, "unget", (key, entries))))

    def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(Exception):
            self.writer.close()


def ray_get(ref: Any, timeout: float, what: str) -> Any:
    """``ray.get(ref)`` within ``timeout``, raising channel errors: :class:`ChannelTimeout`, the
    :class:`ChannelError` the remote call raised, or :class:`ChannelPeerDied` for a dead actor."""
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


def pinned_actor_options(name: str, node_id: str, namespace: str | None, detached: bool) -> dict[str, Any]:
    """``actor.options(...)`` of a named actor created on node ``node_id`` only (or the existing
    one of that name): what the channel and the weight registry are."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    options: dict[str, Any] = {
        "name": name,
        "get_if_exists": True,
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
    }
    if namespace is not None:
        options["namespace"] = namespace
    if detached:
        options["lifetime"] = "detached"
    return options

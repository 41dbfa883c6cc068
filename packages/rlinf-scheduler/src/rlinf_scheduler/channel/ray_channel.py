""":class:`RayChannel`: a channel shared by every process of a Ray cluster, served by one actor.

A handle talks to its channel actor (:mod:`~rlinf_scheduler.channel.server`) over the TCP data
plane (:mod:`~rlinf_scheduler.channel.client`); items of at least ``inline_limit`` payload bytes
go through Ray's object store once, and only a slot id travels through the queue. Handles that
are still connected at interpreter exit say goodbye, so the actor does not take their process for
dead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import math
import pickle
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Hashable, Iterable
from typing import Any

from rlinf_core.channel import DEFAULT_KEY, DEFAULT_TIMEOUT, Channel
from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_scheduler.channel.client import AsyncConn, SyncConn, pinned_actor_options, ray_get
from rlinf_scheduler.channel.peer import peer_desc
from rlinf_scheduler.channel.server import ACTOR_PREFIX, actor_cls
from rlinf_scheduler.channel.wire import (
    PICKLE_PROTOCOL,
    SCALARS,
    SLOT_WAIT,
    ChannelPeerDied,
    frame,
    pack_payload,
    unpack_payload,
)

__all__ = ["INLINE_LIMIT", "RayChannel", "check_target"]

INLINE_LIMIT = 256 * 1024
"""Items whose arrays/tensors/bytes add up to this many bytes or more go through the object store."""

_REPLY_SLACK = 30.0  # seconds a client waits beyond an operation's own timeout for the actor's reply

_CLIENTS: weakref.WeakSet[RayChannel] = weakref.WeakSet()


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
        self._pool: list[SyncConn] = []
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._closed_local = False
        self._disconnected = False
        self._desc = peer_desc()
        self._control = SyncConn(self._address, self._token, True, 30.0)
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

        _check_name(name)
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0, got {maxsize}")
        if not default_timeout >= 0:
            raise ValueError(f"default_timeout must be >= 0, got {default_timeout}")
        node = node_id or ray.get_runtime_context().get_node_id()
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if node not in alive:
            raise ValueError(f"node_id {node!r} of channel {name!r} is not an alive Ray node")
        options = pinned_actor_options(ACTOR_PREFIX + name, node, namespace, detached)
        actor = actor_cls().options(**options).remote(name, maxsize, default_timeout, None)
        info = ray_get(actor.connect_info.remote(), timeout, f"channel actor {name!r} to start")
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
        info = ray_get(
            actor.connect_info.remote(), max(deadline - time.monotonic(), 1.0), f"channel {name!r}"
        )
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
                conn = SyncConn(self._address, self._token, False, _REPLY_SLACK)
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
            conn = await AsyncConn.open(self._address, self._token, _REPLY_SLACK)
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
        if type(item) in SCALARS:  # the fast path of small control items
            return ("b", pickle.dumps(item, PICKLE_PROTOCOL), weight, self._desc), None
        packed, nbytes, has_torch = pack_payload(item)
        if nbytes >= self.inline_limit:
            import ray

            ref = ray.put(packed)
            return ("rt" if has_torch else "r", uuid.uuid4().bytes, weight, self._desc), ref
        return ("t" if has_torch else "b", pickle.dumps(packed, PICKLE_PROTOCOL), weight, self._desc), None

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

            refs = ray_get(
                self._actor.take.remote([e[1] for e in slots], [e[3] for e in slots]),
                SLOT_WAIT + _REPLY_SLACK,
                f"item references of channel {self.name!r}",
            )
            try:
                values = ray.get(refs, timeout=self._fetch_wait())
            except ray.exceptions.GetTimeoutError:
                raise self._payload_late(slots) from None
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
                refs = await asyncio.wait_for(
                    self._actor.take.remote([e[1] for e in slots], [e[3] for e in slots]),
                    SLOT_WAIT + _REPLY_SLACK,
                )
                values = await asyncio.wait_for(asyncio.gather(*refs), self._fetch_wait())
            except TimeoutError:
                raise self._payload_late(slots) from None
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(getattr(exc, "cause", None), ChannelError) else None
                if cause is not None:
                    raise cause from None
                raise
            except ray.exceptions.ObjectLostError as exc:
                raise self._payload_lost(slots, exc) from exc
            fetched = {e[1]: v for e, v in zip(slots, values, strict=True)}
        return [self._value(e, fetched) for e in entries]

    def _fetch_wait(self) -> float:
        """How long fetching items' object-store payloads may take: the channel's default
        timeout (at least :data:`SLOT_WAIT`)."""
        t = self.default_timeout
        return SLOT_WAIT if math.isinf(t) or t < SLOT_WAIT else t

    def _payload_late(self, slots: list[tuple[Any, ...]]) -> ChannelTimeout:
        producers = sorted({str(e[3]) for e in slots})
        return ChannelTimeout(
            f"timed out after {self._fetch_wait():g} s fetching the object-store payload of {len(slots)} "
            f"item(s) of channel {self.name!r} from {', '.join(producers)} (is its node overloaded or gone?)"
        )

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

    def _entries(self, items: Iterable[Any], weights: Iterable[float] | None) -> list[Any]:
        """The encoded entries of a ``put_many`` (each held until the server has it)."""
        items = list(items)
        ws = [1.0] * len(items) if weights is None else list(weights)
        if len(ws) != len(items):
            raise ValueError(f"put_many got {len(items)} items but {len(ws)} weights")
        entries = []
        for item, w in zip(items, ws, strict=True):
            entry, ref = self._encode(item, w)
            self._hold(entry, ref)
            entries.append(entry)
        return entries

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
        entries = self._entries(items, weights)
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
        check_target(target_weight)
        t = self._timeout_of(timeout)
        return self._decode(self._call("get_batch", (key, float(target_weight), t, False), self._wait_of(t)))

    def get_batch_nowait(self, target_weight: float, key: Hashable = DEFAULT_KEY) -> list[Any]:
        """Like :meth:`get_batch`, but raise :class:`ChannelEmpty` unless the weight is there now."""
        check_target(target_weight)
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
            if isinstance(conn, AsyncConn):
                with contextlib.suppress(Exception):
                    conn.writer.write(frame((0, "bye", ())))
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
        check_target(target_weight)
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
        entries = self._entries(items, weights)
        if entries:
            await self._acall("put_many", (key, entries, t), key, self._wait_of(t))


def _reconnect(name: str, namespace: str | None, inline_limit: int) -> RayChannel:
    return RayChannel.connect(name, namespace=namespace, inline_limit=inline_limit)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"channel name must be a non-empty string without '/', got {name!r}")


def _check_weight(weight: float) -> None:
    if not weight > 0:
        raise ValueError(f"weight must be > 0, got {weight!r}")


def check_target(target: float) -> None:
    """Raise ``ValueError`` unless ``target`` (a ``get_batch`` target weight) is > 0."""
    if not target > 0:
        raise ValueError(f"target_weight must be > 0, got {target!r}")


@atexit.register
def _goodbye_all() -> None:
    for client in list(_CLIENTS):
        with contextlib.suppress(Exception):
            client.disconnect()

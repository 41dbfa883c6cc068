"""Channels: named, keyed FIFO queues between components.

A :class:`Channel` is the only way components exchange data (besides weight broadcast). Every
key is an independent FIFO queue with its own ``maxsize`` bound, every item carries a weight
(default 1) so a consumer can ask for "items worth at least N" with :meth:`Channel.get_batch`,
and :meth:`Channel.close` wakes every waiter with :class:`~rlinf_core.errors.ChannelClosed`.

:class:`LocalChannel` implements the interface for threads and asyncio tasks of one process; it
moves payloads by reference (no copy, no pickling). The Ray-backed channel in ``rlinf-scheduler``
implements the same interface across processes and nodes.

Every blocking call takes a ``timeout`` in seconds. ``None`` means the channel's
``default_timeout`` (300 s unless set); pass ``math.inf`` to wait without limit on purpose.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Hashable
from typing import Any

from rlinf_core.errors import ChannelClosed, ChannelEmpty, ChannelFull, ChannelTimeout

__all__ = ["DEFAULT_KEY", "Channel", "LocalChannel"]

DEFAULT_KEY: str = "default"
"""The key used when a call names none."""

DEFAULT_TIMEOUT: float = 300.0


class Channel(ABC):
    """Interface of a named channel of keyed FIFO queues.

    Implementations must be safe to call from several threads (and, for distributed ones, from
    several processes). Items of one key come out in the order they went in.
    """

    name: str

    # -- sync API -------------------------------------------------------------------------------
    @abstractmethod
    def put(
        self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1, timeout: float | None = None
    ) -> None:
        """Append ``item`` to queue ``key``; block while the queue is full.

        Raises :class:`ChannelTimeout` if no room appears within ``timeout`` and
        :class:`ChannelClosed` if the channel is (or gets) closed.
        """

    @abstractmethod
    def put_nowait(self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1) -> None:
        """Like :meth:`put`, but raise :class:`ChannelFull` instead of waiting."""

    @abstractmethod
    def get(self, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None) -> Any:
        """Remove and return the oldest item of queue ``key``, waiting for one."""

    @abstractmethod
    def get_nowait(self, key: Hashable = DEFAULT_KEY) -> Any:
        """Like :meth:`get`, but raise :class:`ChannelEmpty` instead of waiting."""

    @abstractmethod
    def get_batch(
        self, target_weight: float, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None
    ) -> list[Any]:
        """Remove and return the oldest items of ``key`` whose weights add up to at least ``target_weight``.

        Items are taken in order until their summed weight reaches the target: with weights
        1, 2, 3 and a target of 3 the first two items are returned. On timeout nothing is taken.
        """

    @abstractmethod
    def qsize(self, key: Hashable = DEFAULT_KEY) -> int:
        """Number of items waiting in queue ``key``."""

    def empty(self, key: Hashable = DEFAULT_KEY) -> bool:
        """Whether queue ``key`` holds no item."""
        return self.qsize(key) == 0

    @abstractmethod
    def full(self, key: Hashable = DEFAULT_KEY) -> bool:
        """Whether queue ``key`` is at its ``maxsize`` (never true for an unbounded channel)."""

    @abstractmethod
    def close(self) -> None:
        """Close the channel: every current and future waiter gets :class:`ChannelClosed`.

        Items still queued stay readable with the ``*_nowait`` calls. Closing twice is harmless.
        """

    @property
    @abstractmethod
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""

    # -- asyncio API ----------------------------------------------------------------------------
    @abstractmethod
    async def aput(
        self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1, timeout: float | None = None
    ) -> None:
        """Async :meth:`put`."""

    @abstractmethod
    async def aget(self, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None) -> Any:
        """Async :meth:`get`."""

    @abstractmethod
    async def aget_batch(
        self, target_weight: float, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None
    ) -> list[Any]:
        """Async :meth:`get_batch`."""


class _Queue:
    __slots__ = ("items", "weight")

    def __init__(self) -> None:
        self.items: deque[tuple[Any, float]] = deque()
        self.weight = 0.0


class LocalChannel(Channel):
    """In-process channel for threads and asyncio tasks; payloads pass by reference.

    Parameters:
        name: the channel's name, used in error messages.
        maxsize: bound on the number of items of each key (``0``: unbounded).
        default_timeout: seconds a blocking call waits when its ``timeout`` is ``None``.
    """

    def __init__(
        self, name: str = "channel", *, maxsize: int = 0, default_timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0, got {maxsize}")
        self.name = name
        self.maxsize = maxsize
        self.default_timeout = default_timeout
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queues: dict[Hashable, _Queue] = {}
        self._async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"LocalChannel({self.name!r}, maxsize={self.maxsize}, keys={len(self._queues)})"

    # -- internals (call with the lock held) ----------------------------------------------------
    def _queue(self, key: Hashable) -> _Queue:
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _Queue()
        return q

    def _is_full(self, q: _Queue) -> bool:
        return self.maxsize > 0 and len(q.items) >= self.maxsize

    def _check_open(self) -> None:
        if self._closed:
            raise ChannelClosed(f"channel {self.name!r} is closed")

    def _notify(self) -> None:
        self._cond.notify_all()
        for loop, fut in list(self._async_waiters):
            if not fut.done():
                try:
                    loop.call_soon_threadsafe(_wake, fut)
                except RuntimeError:  # that loop is closed; its waiter is gone
                    self._async_waiters.discard((loop, fut))

    def _try_put(self, item: Any, key: Hashable, weight: float) -> bool:
        self._check_open()
        q = self._queue(key)
        if self._is_full(q):
            return False
        q.items.append((item, weight))
        q.weight += weight
        self._notify()
        return True

    def _try_get(self, key: Hashable) -> tuple[bool, Any]:
        q = self._queues.get(key)
        if q is not None and q.items:
            item, weight = q.items.popleft()
            q.weight -= weight
            self._notify()
            return True, item
        self._check_open()
        return False, None

    def _drain_into(self, taken: list[tuple[Any, float]], got: float, target: float, key: Hashable) -> float:
        q = self._queues.get(key)
        while q is not None and q.items and got < target:
            item, weight = q.items.popleft()
            q.weight -= weight
            taken.append((item, weight))
            got += weight
        if taken:
            self._notify()
        return got

    def _give_back(self, taken: list[tuple[Any, float]], key: Hashable) -> None:
        q = self._queue(key)
        for item, weight in reversed(taken):
            q.items.appendleft((item, weight))
            q.weight += weight
        taken.clear()
        self._notify()

    def _deadline(self, timeout: float | None) -> tuple[float, float]:
        t = self.default_timeout if timeout is None else timeout
        if t < 0:
            raise ValueError(f"timeout must be >= 0, got {t}")
        return t, time.monotonic() + t

    def _timeout(self, what: str, key: Hashable, t: float) -> ChannelTimeout:
        return ChannelTimeout(
            f"timed out after {t:g} s waiting {what} on key {key!r} of channel {self.name!r}"
        )

    def _wait(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self._cond.wait(None if math.isinf(remaining) else remaining)
        return True

    # -- sync API -------------------------------------------------------------------------------
    def put(
        self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1, timeout: float | None = None
    ) -> None:
        _check_weight(weight)
        t, deadline = self._deadline(timeout)
        with self._lock:
            while not self._try_put(item, key, weight):
                if not self._wait(deadline):
                    raise self._timeout("for room (the queue is full)", key, t)

    def put_nowait(self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1) -> None:
        _check_weight(weight)
        with self._lock:
            if not self._try_put(item, key, weight):
                raise ChannelFull(f"key {key!r} of channel {self.name!r} is full ({self.maxsize} items)")

    def get(self, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None) -> Any:
        t, deadline = self._deadline(timeout)
        with self._lock:
            while True:
                ok, item = self._try_get(key)
                if ok:
                    return item
                if not self._wait(deadline):
                    raise self._timeout("for an item", key, t)

    def get_nowait(self, key: Hashable = DEFAULT_KEY) -> Any:
        with self._lock:
            ok, item = self._try_get(key)
            if not ok:
                raise ChannelEmpty(f"key {key!r} of channel {self.name!r} is empty")
            return item

    def get_batch(
        self, target_weight: float, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None
    ) -> list[Any]:
        _check_target(target_weight)
        t, deadline = self._deadline(timeout)
        taken: list[tuple[Any, float]] = []
        got = 0.0
        with self._lock:
            while True:
                got = self._drain_into(taken, got, target_weight, key)
                if got >= target_weight:
                    return [item for item, _ in taken]
                if self._closed:
                    self._give_back(taken, key)
                    self._check_open()
                if not self._wait(deadline):
                    self._give_back(taken, key)
                    raise self._timeout(f"for items of weight {target_weight:g} (have {got:g})", key, t)

    def qsize(self, key: Hashable = DEFAULT_KEY) -> int:
        with self._lock:
            q = self._queues.get(key)
            return len(q.items) if q else 0

    def weight(self, key: Hashable = DEFAULT_KEY) -> float:
        """Summed weight of the items waiting in queue ``key``."""
        with self._lock:
            q = self._queues.get(key)
            return q.weight if q else 0.0

    def full(self, key: Hashable = DEFAULT_KEY) -> bool:
        with self._lock:
            q = self._queues.get(key)
            return q is not None and self._is_full(q)

    def keys(self) -> list[Hashable]:
        """Keys that currently hold at least one item."""
        with self._lock:
            return [k for k, q in self._queues.items() if q.items]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._notify()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- asyncio API ----------------------------------------------------------------------------
    async def _async_wait(self, fut: asyncio.Future[None], deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                return False
            await asyncio.wait_for(fut, None if math.isinf(remaining) else remaining)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._async_waiters.discard((asyncio.get_running_loop(), fut))

    def _register(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._async_waiters.add((loop, fut))
        return fut

    async def aput(
        self, item: Any, key: Hashable = DEFAULT_KEY, *, weight: float = 1, timeout: float | None = None
    ) -> None:
        _check_weight(weight)
        t, deadline = self._deadline(timeout)
        while True:
            with self._lock:
                if self._try_put(item, key, weight):
                    return
                fut = self._register()
            if not await self._async_wait(fut, deadline):
                raise self._timeout("for room (the queue is full)", key, t)

    async def aget(self, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None) -> Any:
        t, deadline = self._deadline(timeout)
        while True:
            with self._lock:
                ok, item = self._try_get(key)
                if ok:
                    return item
                fut = self._register()
            if not await self._async_wait(fut, deadline):
                raise self._timeout("for an item", key, t)

    async def aget_batch(
        self, target_weight: float, key: Hashable = DEFAULT_KEY, *, timeout: float | None = None
    ) -> list[Any]:
        _check_target(target_weight)
        t, deadline = self._deadline(timeout)
        taken: list[tuple[Any, float]] = []
        got = 0.0
        try:
            while True:
                with self._lock:
                    got = self._drain_into(taken, got, target_weight, key)
                    if got >= target_weight:
                        result = [item for item, _ in taken]
                        taken.clear()
                        return result
                    self._check_open()
                    fut = self._register()
                if not await self._async_wait(fut, deadline):
                    raise self._timeout(f"for items of weight {target_weight:g} (have {got:g})", key, t)
        finally:
            # Timeout, close or cancellation: nothing taken is lost.
            if taken:
                with self._lock:
                    self._give_back(taken, key)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _check_weight(weight: float) -> None:
    if not weight > 0:
        raise ValueError(f"weight must be > 0, got {weight!r}")


def _check_target(target: float) -> None:
    if not target > 0:
        raise ValueError(f"target_weight must be > 0, got {target!r}")

"""Links: direct point-to-point connections between two workers, beside the channels.

A link is for a pair of workers that exchange a steady stream of small messages (an env worker's
observations and its rollout worker's actions, every step): a channel routes each item through
a queue; a link carries it to the one peer, in order, with nothing in between.

The driver gets a :class:`Links` factory from :meth:`rlinf_core.Scheduler.links` with the run's
secret and hands it to both sides as a call argument. The listening side calls
:meth:`Links.listen` and publishes :attr:`LinkListener.address` (through the driver); the
connecting side calls :meth:`Links.connect` with that address, its generation and its rank, and
the listener's :meth:`LinkListener.accept` takes the links of one generation from the ranks it
expects, refusing connections that do not present the secret (before anything they send is
unpickled) or belong to another generation.

:class:`LocalLinks` implements the interface for the threads of one process.
"""

from __future__ import annotations

import hmac
import itertools
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Collection, Hashable
from typing import Any

from rlinf_core.errors import ChannelError, ChannelTimeout

__all__ = ["Link", "LinkListener", "Links", "LocalLinks"]


class Link(ABC):
    """One connection between two workers: messages both ways, in order, no replies.

    Every wait is bounded by :attr:`timeout` (:class:`~rlinf_core.errors.ChannelTimeout` naming
    what was awaited and from whom); a broken or closed connection raises
    :class:`~rlinf_core.errors.ChannelError` naming :attr:`peer`.
    """

    peer: str
    """Who is at the other end, for messages (``"env rank 3"``)."""
    timeout: float
    """Seconds a :meth:`send` or :meth:`recv` may wait."""

    @abstractmethod
    def send(self, obj: Any) -> None:
        """Send ``obj`` to the peer."""

    @abstractmethod
    def recv(self, what: str = "a message") -> Any:
        """The next message from the peer; ``what`` names it in a timeout's message."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection; the peer's waits fail at once."""


class LinkListener(ABC):
    """The listening side's end: where peers connect, and the links it accepted."""

    @property
    @abstractmethod
    def address(self) -> Hashable:
        """Where peers connect (picklable; pass it to :meth:`Links.connect`)."""

    @abstractmethod
    def accept(
        self, gen: int, ranks: Collection[int], *, timeout: float, peer: str = "rank"
    ) -> dict[int, Link]:
        """Take one link of generation ``gen`` from each of ``ranks`` (the connecting side's
        ranks). Connections without the run's secret, of another generation or from a rank not
        in ``ranks`` are closed. Each link's :attr:`Link.peer` is ``f"{peer} rank {r}"`` and its
        timeout ``timeout``. Raises :class:`~rlinf_core.errors.ChannelTimeout` naming the ranks
        that did not connect within ``timeout`` seconds."""

    @abstractmethod
    def close(self) -> None:
        """Stop listening (accepted links stay open)."""


class Links(ABC):
    """Factory of a run's links, created by the driver (:meth:`rlinf_core.Scheduler.links`) and
    passed to the workers. It carries the run's secret: never print or log it."""

    @abstractmethod
    def listen(self, *, name: str = "this worker", backlog: int = 16) -> LinkListener:
        """Listen for links on this process's node; ``name`` is this side in messages."""

    @abstractmethod
    def connect(
        self, address: Hashable, *, gen: int, rank: int, timeout: float, peer: str, name: str | None = None
    ) -> Link:
        """Connect to the listener at ``address`` as ``rank`` of generation ``gen``; ``peer``
        names the listener in messages, ``name`` this side (default ``f"rank {rank}"``).
        Raises :class:`~rlinf_core.errors.ChannelError` naming both when it cannot."""

    @abstractmethod
    def node_address(self) -> str:
        """The address this process's node is reached at by the other nodes (an overlay's
        address when the cluster runs on one)."""


# -- in-process implementation --------------------------------------------------------------------

_CLOSED = object()


class _Endpoint(Link):
    def __init__(self, inbox: queue.Queue[Any], outbox: queue.Queue[Any], peer: str, timeout: float) -> None:
        self.inbox, self.outbox, self.peer, self.timeout = inbox, outbox, peer, timeout
        self.closed = False

    def send(self, obj: Any) -> None:
        if self.closed:
            raise ChannelError(f"the link to {self.peer} broke: it is closed")
        self.outbox.put(obj)

    def recv(self, what: str = "a message") -> Any:
        if self.closed:
            raise ChannelError(f"the link to {self.peer} broke: it is closed")
        try:
            obj = self.inbox.get(timeout=self.timeout)
        except queue.Empty:
            raise ChannelTimeout(f"waited {self.timeout:g} s for {what} from {self.peer}") from None
        if obj is _CLOSED:
            self.inbox.put(_CLOSED)  # every later recv fails the same way
            raise ChannelError(f"{self.peer} closed the link (it died or ended the iteration)")
        return obj

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.outbox.put(_CLOSED)


class _LocalListener(LinkListener):
    def __init__(self, owner: LocalLinks, key: int, name: str) -> None:
        self.owner, self.key, self.name = owner, key, name
        self.pending: queue.Queue[tuple[str, int, int, _Endpoint]] = queue.Queue()

    @property
    def address(self) -> Hashable:
        return ("local", self.key)

    def accept(
        self, gen: int, ranks: Collection[int], *, timeout: float, peer: str = "rank"
    ) -> dict[int, Link]:
        need = set(ranks)
        links: dict[int, Link] = {}
        deadline = time.monotonic() + timeout
        while need - links.keys():
            left = deadline - time.monotonic()
            try:
                secret, g, rank, end = self.pending.get(timeout=max(left, 0.0))
            except queue.Empty:
                missing = sorted(need - links.keys())
                raise ChannelTimeout(
                    f"{self.name} waited {timeout:.0f} s for {peer} rank(s) {missing} to connect"
                ) from None
            if not hmac.compare_digest(secret, self.owner._secret) or g != gen or rank not in need:
                end.close()  # a stranger's connection, or another generation's
                continue
            end.peer, end.timeout = f"{peer} rank {rank}", timeout
            links[rank] = end
        return links

    def close(self) -> None:
        with _LISTENERS_LOCK:
            _LISTENERS.pop(self.key, None)


_LISTENERS: dict[int, _LocalListener] = {}
_LISTENERS_LOCK = threading.Lock()
_KEYS = itertools.count(1)


class LocalLinks(Links):
    """:class:`Links` between the threads of one process (in-memory queues; messages pass by
    reference, nothing is pickled). The secret is checked as the socket links check it."""

    def __init__(self, secret: str) -> None:
        if not isinstance(secret, str) or not secret:
            raise ValueError("links need a non-empty secret")
        self._secret = secret

    def __repr__(self) -> str:
        return "LocalLinks(<secret>)"

    def listen(self, *, name: str = "this worker", backlog: int = 16) -> LinkListener:
        listener = _LocalListener(self, next(_KEYS), name)
        with _LISTENERS_LOCK:
            _LISTENERS[listener.key] = listener
        return listener

    def connect(
        self, address: Hashable, *, gen: int, rank: int, timeout: float, peer: str, name: str | None = None
    ) -> Link:
        key = address[1] if isinstance(address, tuple) and len(address) == 2 else None
        with _LISTENERS_LOCK:
            listener = _LISTENERS.get(key) if isinstance(key, int) else None
        if listener is None:
            raise ChannelError(
                f"{name or f'rank {rank}'} could not connect to {peer} at {address!r}: nobody listens there"
            )
        a: queue.Queue[Any] = queue.Queue()
        b: queue.Queue[Any] = queue.Queue()
        listener.pending.put((self._secret, gen, rank, _Endpoint(b, a, "?", timeout)))
        return _Endpoint(a, b, peer, timeout)

    def node_address(self) -> str:
        return "127.0.0.1"

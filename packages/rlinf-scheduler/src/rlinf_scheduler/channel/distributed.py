""":class:`DistributedRayChannel`: one :class:`~rlinf_scheduler.channel.ray_channel.RayChannel`
replica per node, each key on the replica of its first producer's node.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Hashable, Iterable
from typing import Any

from rlinf_core.channel import DEFAULT_KEY, DEFAULT_TIMEOUT, Channel
from rlinf_core.errors import ChannelEmpty, ChannelError
from rlinf_scheduler.channel.ray_channel import INLINE_LIMIT, RayChannel, check_target

__all__ = ["DistributedRayChannel"]


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
        check_target(target_weight)
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
        check_target(target_weight)
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

"""The ``object_store`` mode: one copy of each version in Ray's object store.

:meth:`WeightBroadcast.publish` puts the ``state_dict`` in the object store once (torch tensors
as zero-copy numpy views, so neither side pickles the data; a CUDA tensor is copied to the host
first) and returns only after the registry (:mod:`~rlinf_scheduler.weights.registry`) has
recorded the new version: from then on no :meth:`~WeightBroadcast.fetch` anywhere can see an
older one. Each fetch is one small actor call plus one object-store get (zero-copy on the
publisher's node, one transfer to another node); N consumers make N gets of the same object.

The registry drops its reference to a version when a newer one arrives; consumers still holding
the old one keep it alive until they drop it. Fetched tensors share memory with the object store:
treat them as read-only (``model.load_state_dict`` copies them into the model).

The published object is owned by the publishing process (Ray no longer lets another process own
it): if the publisher dies, the registry keeps the version number but fetches fail with
:class:`~rlinf_scheduler.channel.ChannelPeerDied` naming it until the next publish.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_core.weights import WeightSync, WeightSyncStats
from rlinf_scheduler.channel.client import ray_get
from rlinf_scheduler.channel.peer import peer_desc
from rlinf_scheduler.channel.wire import ChannelPeerDied, pack_payload, unpack_payload
from rlinf_scheduler.weights.registry import connect_registry, create_registry

__all__ = ["WeightBroadcast", "load_entry", "put_state"]


def put_state(state_dict: Any) -> tuple[list[Any], bool, int]:
    """``([ref], has_torch, bytes)``: ``state_dict`` put in the object store once."""
    import ray

    packed, nbytes, has_torch = pack_payload(state_dict)
    return [ray.put(packed)], has_torch, nbytes


def load_entry(name: str, reply: tuple[int, list[Any], bool, str], timeout: float) -> tuple[int, Any]:
    """``(version, state_dict)`` of a registry reply, read from the object store within
    ``timeout`` seconds (:class:`~rlinf_core.errors.ChannelTimeout` naming the weights, the
    version, the publisher and the seconds otherwise)."""
    import ray

    version, refs, has_torch, publisher = reply
    if not refs:
        raise ChannelError(
            f"weights {name!r} version {version} has no object-store copy: they are synced over a "
            "collective; use the handle the driver created for them"
        )
    try:
        value = ray.get(refs[0], timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise ChannelTimeout(
            f"timed out after {timeout:g} s fetching weights {name!r} version {version} from the object "
            f"store (published by {publisher}; is its node overloaded or unreachable?)"
        ) from None
    except ray.exceptions.ObjectLostError as exc:
        raise ChannelPeerDied(
            f"weights {name!r}: the publisher {publisher} died and its published object went "
            f"with it ({type(exc).__name__}); publish again from a live trainer",
            publisher,
        ) from exc
    return version, unpack_payload(value) if has_torch else value


class WeightBroadcast(WeightSync):
    """The ``object_store`` :class:`~rlinf_core.weights.WeightSync`; a handle pickles to its name.

    Create with :meth:`create` (the driver, or the scheduler's ``weight_sync``; ``node_id``
    places the registry, default this process's node), connect with :meth:`connect` from any
    worker (an unpickled handle connects by itself).
    """

    mode: ClassVar[str] = "object_store"

    def __init__(self, name: str, actor: Any, namespace: str | None, default_timeout: float) -> None:
        self.name = name
        self.namespace = namespace
        self.default_timeout = default_timeout
        self._actor = actor
        self._cache: tuple[int, Any] | None = None
        self._stats = WeightSyncStats(self.mode)

    @classmethod
    def create(
        cls,
        name: str,
        *,
        node_id: str | None = None,
        namespace: str | None = None,
        detached: bool = False,
        default_timeout: float = 300.0,
    ) -> WeightBroadcast:
        actor = create_registry(name, node_id=node_id, namespace=namespace, detached=detached)
        return cls(name, actor, namespace, default_timeout)

    @classmethod
    def connect(
        cls, name: str, *, namespace: str | None = None, timeout: float = 60.0, default_timeout: float = 300.0
    ) -> WeightBroadcast:
        actor = connect_registry(name, namespace=namespace, timeout=timeout)
        return cls(name, actor, namespace, default_timeout)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reconnect, (self.name, self.namespace, self.default_timeout))

    def __repr__(self) -> str:
        return f"WeightBroadcast({self.name!r})"

    def publish(self, state_dict: Any, version: int | None = None, *, timeout: float | None = None) -> int:
        """Put ``state_dict`` in the object store once and make it the newest version.

        ``version`` defaults to the previous one plus 1 (0 first); an explicit one must be newer.
        Returns the version; once this returns, every fetch sees it or a newer one.
        """
        t0 = time.perf_counter()
        refs, has_torch, nbytes = put_state(state_dict)
        t = self.default_timeout if timeout is None else timeout
        version = ray_get(
            self._actor.publish.remote(version, refs, has_torch, peer_desc()),
            t,
            f"weight registry {self.name!r}",
        )
        self._stats.publishes += 1
        self._stats.bytes_published += nbytes
        self._stats.publish_s += time.perf_counter() - t0
        return version

    def version(self) -> int | None:
        """The newest published version (``None``: nothing published yet)."""
        return ray_get(self._actor.version_.remote(), self.default_timeout, f"weight registry {self.name!r}")

    def fetch(self, *, min_version: int | None = None, timeout: float | None = None) -> tuple[int, Any]:
        """``(version, state_dict)`` of the newest version, waiting for one >= ``min_version``.

        A version this handle already fetched is returned from its cache without a transfer.
        """
        t = self.default_timeout if timeout is None else timeout
        have = self._cache[0] if self._cache else None
        reply = ray_get(
            self._actor.latest.remote(have, min_version, t, False),
            t + 30.0,
            f"weights {self.name!r}",
        )
        if reply is None:
            assert self._cache is not None
            return self._cache
        return self._store(reply)

    def fetch_if_newer(self, have_version: int | None) -> tuple[int, Any] | None:
        """The newest ``(version, state_dict)`` if it is newer than ``have_version`` (``None``:
        anything published), else ``None`` right away (one small actor call, no transfer)."""
        reply = ray_get(
            self._actor.latest.remote(have_version, None, 0.0, True),
            self.default_timeout,
            f"weights {self.name!r}",
        )
        if reply is None or (have_version is not None and reply[0] <= have_version):
            return None
        return self._store(reply)

    def _store(self, reply: tuple[int, list[Any], bool, str]) -> tuple[int, Any]:
        t0 = time.perf_counter()
        self._cache = load_entry(self.name, reply, self.default_timeout)
        self._stats.fetches += 1
        self._stats.bytes_fetched += pack_payload(self._cache[1])[1]
        self._stats.fetch_s += time.perf_counter() - t0
        return self._cache

    def stats(self) -> WeightSyncStats:
        return WeightSyncStats(**self._stats.to_dict())

    def close(self) -> None:
        """Drop this handle's cached version (the weights stay)."""
        self._cache = None

    def destroy(self) -> None:
        """Kill the registry actor."""
        import ray

        ray.kill(self._actor, no_restart=True)


def _reconnect(name: str, namespace: str | None, default_timeout: float) -> WeightBroadcast:
    return WeightBroadcast.connect(name, namespace=namespace, default_timeout=default_timeout)

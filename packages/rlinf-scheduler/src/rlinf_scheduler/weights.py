"""Versioned weight broadcast: trainer rank 0 publishes, every rollout worker fetches the newest.

A small named *registry actor* (``rlinf-weights:<name>``) holds the newest ``(version,
ObjectRef)``. :meth:`WeightBroadcast.publish` puts the ``state_dict`` in Ray's object store
once (torch tensors as zero-copy numpy views, so neither side pickles the data) and returns only
after the registry has recorded the new version: from then on no :meth:`~WeightBroadcast.fetch`
anywhere can see an older one. Each fetch is one small actor call plus one object-store get
(zero-copy on the publisher's node, one transfer to another node); N workers make N gets of the
same object.

The registry drops its reference to a version when a newer one arrives; workers still holding the
old one keep it alive until they drop it. Fetched tensors share memory with the object store:
treat them as read-only (``model.load_state_dict`` copies them into the model).

The published object is owned by the publishing process (Ray no longer lets another process own
it): if the publisher dies, the registry keeps the version number but fetches fail with
:class:`~rlinf_scheduler.channel.ChannelPeerDied` naming it until the next publish.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_scheduler.channel.client import pinned_actor_options, ray_get
from rlinf_scheduler.channel.peer import peer_desc
from rlinf_scheduler.channel.wire import ChannelPeerDied, pack_payload, unpack_payload

__all__ = ["WeightBroadcast"]

ACTOR_PREFIX = "rlinf-weights:"


def _registry_class() -> Any:
    import ray

    @ray.remote(num_cpus=0, max_concurrency=1000, max_restarts=0)
    class RlinfWeightRegistry:
        """Newest ``(version, [ObjectRef], has_torch, publisher)`` and the fetchers waiting for it."""

        def __init__(self, name: str) -> None:
            self.name = name
            self.version: int | None = None
            self.entry: tuple[list[Any], bool, str] | None = None
            self.changed = asyncio.Event()

        async def publish(self, version: int | None, refs: list[Any], has_torch: bool, publisher: str) -> int:
            if version is None:
                version = 0 if self.version is None else self.version + 1
            elif self.version is not None and version <= self.version:
                raise ChannelError(
                    f"weights {self.name!r}: version {version} is not newer than the published {self.version}; "
                    "versions must increase"
                )
            self.version = version
            self.entry = (refs, has_torch, publisher)
            self.changed.set()
            self.changed = asyncio.Event()
            return version

        async def latest(
            self, have: int | None, min_version: int | None, timeout: float, nowait: bool = False
        ) -> Any:
            """``None`` if ``have`` is the newest (or, with ``nowait``, if nothing is published),
            else ``(version, [ref], has_torch, publisher)``; waits up to ``timeout`` s for a
            version >= ``min_version``."""
            if nowait and self.version is None:
                return None
            deadline = time.monotonic() + timeout
            while self.version is None or (min_version is not None and self.version < min_version):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ChannelTimeout(
                        f"timed out after {timeout:g} s waiting for weights {self.name!r} "
                        f"version >= {0 if min_version is None else min_version} "
                        f"(newest published: {self.version})"
                    )
                try:
                    await asyncio.wait_for(self.changed.wait(), None if math.isinf(remaining) else remaining)
                except TimeoutError:
                    pass
            if have is not None and have == self.version:
                return None
            assert self.entry is not None
            refs, has_torch, publisher = self.entry
            return self.version, refs, has_torch, publisher

        async def version_(self) -> int | None:
            return self.version

    return RlinfWeightRegistry


_REGISTRY_CLS: Any = None


def _registry_cls() -> Any:
    global _REGISTRY_CLS
    if _REGISTRY_CLS is None:
        _REGISTRY_CLS = _registry_class()
    return _REGISTRY_CLS


class WeightBroadcast:
    """Publish and fetch versioned weights by name; a handle pickles to its name.

    Create with :meth:`create` (the driver or trainer rank 0; ``node_id`` places the registry,
    default this process's node), connect with :meth:`connect` from any worker.
    """

    def __init__(self, name: str, actor: Any, namespace: str | None, default_timeout: float) -> None:
        self.name = name
        self.namespace = namespace
        self.default_timeout = default_timeout
        self._actor = actor
        self._cache: tuple[int, Any] | None = None

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
        import ray

        if not isinstance(name, str) or not name:
            raise ValueError(f"weight broadcast name must be a non-empty string, got {name!r}")
        node = node_id or ray.get_runtime_context().get_node_id()
        options = pinned_actor_options(ACTOR_PREFIX + name, node, namespace, detached)
        actor = _registry_cls().options(**options).remote(name)
        ray_get(actor.version_.remote(), 60.0, f"weight registry {name!r} to start")
        return cls(name, actor, namespace, default_timeout)

    @classmethod
    def connect(
        cls, name: str, *, namespace: str | None = None, timeout: float = 60.0, default_timeout: float = 300.0
    ) -> WeightBroadcast:
        import ray

        deadline = time.monotonic() + timeout
        while True:
            try:
                actor = ray.get_actor(ACTOR_PREFIX + name, namespace=namespace)
                return cls(name, actor, namespace, default_timeout)
            except ValueError:
                if time.monotonic() >= deadline:
                    raise ChannelTimeout(
                        f"timed out after {timeout:g} s waiting for weight broadcast {name!r} to be created"
                    ) from None
                time.sleep(0.05)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reconnect, (self.name, self.namespace, self.default_timeout))

    def __repr__(self) -> str:
        return f"WeightBroadcast({self.name!r})"

    def publish(self, state_dict: Any, version: int | None = None, *, timeout: float | None = None) -> int:
        """Put ``state_dict`` in the object store once and make it the newest version.

        ``version`` defaults to the previous one plus 1 (0 first); an explicit one must be newer.
        Returns the version; once this returns, every fetch sees it or a newer one.
        """
        import ray

        packed, _, has_torch = pack_payload(state_dict)
        ref = ray.put(packed)
        t = self.default_timeout if timeout is None else timeout
        return ray_get(
            self._actor.publish.remote(version, [ref], has_torch, peer_desc()),
            t,
            f"weight registry {self.name!r}",
        )

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
        version, refs, has_torch, publisher = reply
        value = self._load(refs[0], publisher)
        self._cache = (version, unpack_payload(value) if has_torch else value)
        return self._cache

    def _load(self, ref: Any, publisher: str) -> Any:
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.ObjectLostError as exc:
            raise ChannelPeerDied(
                f"weights {self.name!r}: the publisher {publisher} died and its published object went "
                f"with it ({type(exc).__name__}); publish again from a live trainer",
                publisher,
            ) from exc

    def destroy(self) -> None:
        """Kill the registry actor."""
        import ray

        ray.kill(self._actor, no_restart=True)


def _reconnect(name: str, namespace: str | None, default_timeout: float) -> WeightBroadcast:
    return WeightBroadcast.connect(name, namespace=namespace, default_timeout=default_timeout)

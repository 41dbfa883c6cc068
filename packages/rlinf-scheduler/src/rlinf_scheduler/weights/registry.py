"""The registry of one run's weights: a small named Ray actor (``rlinf-weights:<name>``).

It holds what every mode needs to agree on: the newest version and the process that published
it, an object-store copy of that version when there is one (``ObjectRef`` list), the mode and
collective backend the driver chose, the secret of the collective's control connections, and
where the collective's publisher listens for them. Fetchers wait in it (asyncio events, no
polling) for a version ``>= min_version``, up to a timeout that names what they waited for.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from typing import Any

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_scheduler.channel.client import pinned_actor_options, ray_get

__all__ = ["ACTOR_PREFIX", "connect_registry", "create_registry"]

ACTOR_PREFIX = "rlinf-weights:"


def _registry_class() -> Any:
    import ray

    @ray.remote(num_cpus=0, max_concurrency=1000, max_restarts=0)
    class RlinfWeightRegistry:
        """Newest ``(version, [ObjectRef], has_torch, publisher)``, the collective's control
        address, and the fetchers waiting for them."""

        def __init__(self, name: str, mode: str = "object_store", backend: str | None = None) -> None:
            self.name, self.mode, self.backend = name, mode, backend
            self.token = secrets.token_hex(16)
            self.version: int | None = None
            self.entry: tuple[list[Any], bool, str] | None = None
            self.changed = asyncio.Event()
            self.control: tuple[Any, str, str] | None = None  # (address, publisher id, description)

        def _notify(self) -> None:
            self.changed.set()
            self.changed = asyncio.Event()

        async def _until(self, done: Any, timeout: float, what: Any) -> None:
            """Wait until ``done()``; :class:`ChannelTimeout` naming ``what()`` after ``timeout`` s."""
            deadline = time.monotonic() + timeout
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ChannelTimeout(
                        f"timed out after {timeout:g} s waiting for {what()} (newest published: {self.version})"
                    )
                try:
                    await asyncio.wait_for(self.changed.wait(), None if math.isinf(remaining) else remaining)
                except TimeoutError:
                    pass

        def _resolve(self, version: int | None) -> int:
            if version is None:
                return 0 if self.version is None else self.version + 1
            if self.version is not None and version <= self.version:
                raise ChannelError(
                    f"weights {self.name!r}: version {version} is not newer than the published {self.version}; "
                    "versions must increase"
                )
            return int(version)

        async def info(self) -> tuple[str, str | None, str]:
            """``(mode, backend, secret of the control connections)``."""
            return self.mode, self.backend, self.token

        async def check(self, version: int | None) -> int:
            """The version a publish of ``version`` would get (raises if it is not newer)."""
            return self._resolve(version)

        async def publish(self, version: int | None, refs: list[Any], has_torch: bool, publisher: str) -> int:
            """Record ``version`` as the newest; ``refs``: its object-store copy (``[]``: none)."""
            version = self._resolve(version)
            self.version = version
            self.entry = (refs, has_torch, publisher)
            self._notify()
            return version

        async def attach(self, version: int, refs: list[Any], has_torch: bool, publisher: str) -> bool:
            """Add an object-store copy of the newest version (collective mode: for consumers that
            could not take it over the collective). ``False`` when ``version`` is not the newest."""
            if version != self.version:
                return False
            self.entry = (refs, has_torch, publisher)
            self._notify()
            return True

        async def latest(
            self,
            have: int | None,
            min_version: int | None,
            timeout: float,
            nowait: bool = False,
            need_object: bool = False,
        ) -> Any:
            """``None`` if ``have`` is the newest (or, with ``nowait``, if nothing is published),
            else ``(version, [ref], has_torch, publisher)``; waits up to ``timeout`` s for a
            version >= ``min_version``. ``need_object``: the newest must have an object-store copy
            (:class:`ChannelError` otherwise)."""

            if nowait and self.version is None:
                return None
            await self._until(
                lambda: self.version is not None and (min_version is None or self.version >= min_version),
                timeout,
                lambda: f"weights {self.name!r} version >= {0 if min_version is None else min_version}",
            )
            if have is not None and have == self.version:
                return None
            assert self.entry is not None
            refs, has_torch, publisher = self.entry
            if need_object and not refs:
                raise ChannelError(
                    f"weights {self.name!r} version {self.version} has no object-store copy "
                    f"(it superseded version {min_version} before that one was read)"
                )
            return self.version, refs, has_torch, publisher

        async def version_(self) -> int | None:
            return self.version

        async def set_control(self, address: Any, publisher_id: str, desc: str) -> None:
            """The collective's publisher listens at ``address`` (one publisher per name)."""
            if self.control is not None and self.control[1] != publisher_id:
                raise ChannelError(
                    f"weights {self.name!r} are already published by {self.control[2]}; a second "
                    "publisher needs weights of its own name (a restarted learner gets a new one)"
                )
            self.control = (address, publisher_id, desc)
            self._notify()

        async def clear_control(self, publisher_id: str) -> None:
            if self.control is not None and self.control[1] == publisher_id:
                self.control = None

        async def control_(self, timeout: float) -> tuple[Any, str, str]:
            """Where the publisher listens, waiting up to ``timeout`` s for it to start."""
            await self._until(
                lambda: self.control is not None,
                timeout,
                lambda: f"the publisher of weights {self.name!r} to start",
            )
            assert self.control is not None
            return self.control

    return RlinfWeightRegistry


_REGISTRY_CLS: Any = None


def _registry_cls() -> Any:
    global _REGISTRY_CLS
    if _REGISTRY_CLS is None:
        _REGISTRY_CLS = _registry_class()
    return _REGISTRY_CLS


def create_registry(
    name: str,
    *,
    mode: str = "object_store",
    backend: str | None = None,
    node_id: str | None = None,
    namespace: str | None = None,
    detached: bool = False,
) -> Any:
    """Create (or find) the registry actor of ``name`` on ``node_id`` (default: this node)."""
    import ray

    if not isinstance(name, str) or not name:
        raise ValueError(f"weight sync name must be a non-empty string, got {name!r}")
    node = node_id or ray.get_runtime_context().get_node_id()
    options = pinned_actor_options(ACTOR_PREFIX + name, node, namespace, detached)
    actor = _registry_cls().options(**options).remote(name, mode, backend)
    ray_get(actor.version_.remote(), 60.0, f"weight registry {name!r} to start")
    return actor


def connect_registry(name: str, *, namespace: str | None = None, timeout: float = 60.0) -> Any:
    """The registry actor of ``name``, waiting up to ``timeout`` s for the driver to create it."""
    import ray

    deadline = time.monotonic() + timeout
    while True:
        try:
            return ray.get_actor(ACTOR_PREFIX + name, namespace=namespace)
        except ValueError:
            if time.monotonic() >= deadline:
                raise ChannelTimeout(
                    f"timed out after {timeout:g} s waiting for weight broadcast {name!r} to be created"
                ) from None
            time.sleep(0.05)

"""The ``collective`` mode: a broadcast group of the publisher and the consumers.

A :class:`CollectiveWeightSync` handle works in any process: the first :meth:`~CollectiveWeightSync.publish`
in a process makes it the publisher (:class:`~.publisher.Publisher`: a control listener and the
group's rank 0), the first :meth:`~CollectiveWeightSync.fetch` (or :meth:`~CollectiveWeightSync.attach`)
makes it a consumer (:class:`Consumer`). Handles of one name in one process share that role.

A consumer keeps one authenticated control connection to the publisher and a thread that takes
part in every broadcast as soon as the publisher starts one, receiving into fresh flat tensors on
its device (:mod:`~.buckets`). So a publish waits only for these threads, never for the
consumers' own work; :meth:`~CollectiveWeightSync.fetch` then returns what the thread holds
(waiting for a version ``>= min_version`` if it holds none yet). Versions still come from the
registry, which also carries the object-store copy that late, restarted or failed consumers get
(see :mod:`~.publisher`). A consumer whose publisher dies keeps the version it holds; a fetch
that needs a newer one fails with :class:`~rlinf_scheduler.channel.ChannelPeerDied`.

Backends: ``nccl`` (CUDA tensors on every member) or ``gloo`` (CPU). The driver picks it from the
members' devices (:func:`rlinf_core.weights.resolve_weight_sync_mode`); a consumer on the other
kind of device is refused when it joins, with a message naming it.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_core.weights import WeightSync, WeightSyncStats
from rlinf_scheduler.channel.client import ray_get
from rlinf_scheduler.channel.peer import node_address, peer_desc
from rlinf_scheduler.channel.wire import ChannelPeerDied, keepalive
from rlinf_scheduler.link import Link
from rlinf_scheduler.weights.buckets import DEFAULT_BUCKET_BYTES, alloc_flats, recv_buckets, views
from rlinf_scheduler.weights.group import (
    GroupBroken,
    broadcaster,
    bury,
    join_store,
    make_group,
    missing_ranks,
    retire,
    wait_work,
)
from rlinf_scheduler.weights.object_store import load_entry
from rlinf_scheduler.weights.publisher import Publisher
from rlinf_scheduler.weights.registry import connect_registry, create_registry

__all__ = ["CollectiveWeightSync", "Consumer"]

BACKENDS = ("gloo", "nccl")
_ROLES: dict[tuple[str | None, str], Any] = {}  # (namespace, name) -> this process's Publisher or Consumer
_ROLES_LOCK = threading.Lock()


class _Aborted(Exception):
    """The publisher abandoned the job in progress."""


class Consumer:
    """A consumer's side: the control connection, the receiving thread and the version held."""

    def __init__(
        self, sync: CollectiveWeightSync, token: str, device: Any, label: str, timeout: float
    ) -> None:
        import torch

        self.sync, self.name, self.token, self.label = sync, sync.name, token, label
        self.id = uuid.uuid4().hex
        if device is None:
            device = f"cuda:{torch.cuda.current_device()}" if sync.backend == "nccl" else "cpu"
        self.device = torch.device(device)
        self.host = node_address()
        self.cond = threading.Condition()
        self.held: tuple[int, dict[str, Any]] | None = None
        self.error: Exception | None = None
        self.note = ""  # what the consumer waits for, for a timeout's message
        self.stats = WeightSyncStats("collective")
        self.closed = False
        self.group: tuple[int, Any, Any] | None = None  # (epoch, pg, store)
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.deferred: collections.deque[Any] = collections.deque()
        self.link = self._connect(timeout)
        threading.Thread(target=self._work_loop, name="rlinf-weights-consumer", daemon=True).start()

    # -- the control connection ---------------------------------------------------------------
    def _connect(self, timeout: float) -> Link:
        address, _, desc = ray_get(
            self.sync._registry.control_.remote(timeout), timeout + 30.0, f"weights {self.name!r}"
        )
        self.publisher = desc
        try:
            sock = socket.create_connection(tuple(address), timeout=timeout)
        except OSError as err:
            raise ChannelPeerDied(
                f"{self.label} could not connect to the publisher of weights {self.name!r}, {desc}: {err}",
                desc,
            ) from None
        keepalive(sock)
        link = Link(sock, timeout, f"the publisher of weights {self.name!r}, {desc}")
        link.send_hello(self.token, 0, 0)
        kind = "cuda" if self.device.type == "cuda" else "cpu"
        link.send(("join", self.id, self.label, kind))
        reply = link.recv("the answer to joining")
        if reply[0] == "refused":
            link.close()
            raise ChannelError(reply[1])
        link.sock.settimeout(None)
        threading.Thread(target=self._read_loop, args=(link,), daemon=True).start()
        return link

    def _read_loop(self, link: Link) -> None:
        while True:
            try:
                msg = link.recv("a message")
            except ChannelError as err:
                self.inbox.put(("eof", link, str(err)))
                return
            self.inbox.put(msg)

    def _next(self, timeout: float | None = None) -> Any:
        if self.deferred:
            return self.deferred.popleft()
        return self.inbox.get(timeout=timeout)

    def _check_abort(self, epoch: int) -> None:
        """Raise :class:`_Aborted` if the publisher gave up ``epoch`` (other messages wait)."""
        while True:
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                return
            if msg[0] == "abort" and msg[1] == epoch:
                raise _Aborted
            if msg[0] in ("eof", "evicted", "bye"):
                self.deferred.append(msg)
                raise _Aborted
            self.deferred.append(msg)

    def _reply(self, msg: Any) -> None:
        with contextlib.suppress(ChannelError):
            self.link.send(msg)

    # -- the work ---------------------------------------------------------------------------------
    def _work_loop(self) -> None:
        while not self.closed:
            msg = self._next()
            kind = msg[0]
            try:
                if kind == "form":
                    self._form(*msg[1:])
                elif kind == "recv":
                    self._receive(*msg[1:])
                elif kind == "object":
                    self._take_object(msg[1])
                elif kind == "wait":
                    self.note = (
                        f"; the publisher's weights changed since version {msg[1]} was published, so this "
                        "consumer gets the next version"
                    )
                elif kind == "abort":
                    self._drop_group(msg[1])
                elif kind == "evicted":
                    self._drop_group(None)
                    self.link.close()
                    self.link = self._connect(self.sync.default_timeout)  # join again, as a new member
                elif kind in ("eof", "bye"):
                    if kind == "eof" and msg[1] is not self.link:
                        continue  # the end of a connection already replaced
                    self._fail(
                        ChannelPeerDied(
                            f"weights {self.name!r}: the publisher {self.publisher} closed its connection "
                            f"({'it closed the weights' if kind == 'bye' else msg[2]}); no newer version "
                            "will come from it",
                            self.publisher,
                        )
                    )
                    return
            except Exception as err:  # reported to the fetching thread
                if kind in ("form", "recv", "object"):
                    answer, key = {
                        "form": ("formed", msg[1]),
                        "recv": ("ack", msg[2]),
                        "object": ("got", msg[1]),
                    }[kind]
                    self._reply((answer, key, False, str(err)))
                if isinstance(err, ChannelError) and kind == "evicted":
                    self._fail(err)
                    return

    def _fail(self, err: Exception) -> None:
        with self.cond:
            self.error = err
            self.cond.notify_all()

    def _drop_group(self, epoch: int | None, in_flight: bool = True) -> None:
        """Leave the group (of ``epoch``, or any): buried when a broadcast may be in flight."""
        if self.group is not None and (epoch is None or self.group[0] == epoch):
            _, pg, store = self.group
            if in_flight:
                bury(pg, store)
            else:
                retire(pg)
            self.group = None

    def _form(self, epoch: int, rank: int, world: int, store_addr: tuple[str, int]) -> None:
        import torch

        self._drop_group(None, in_flight=False)  # the publisher forms a new one after a complete broadcast
        deadline = time.monotonic() + self.sync.default_timeout
        store = join_store(store_addr[0], store_addr[1], self.sync.default_timeout)
        store.set(f"arrived/{rank}", b"1")
        try:
            while missing_ranks(store, world):
                self._check_abort(epoch)
                if time.monotonic() >= deadline:
                    raise ChannelTimeout(f"group {epoch} of weights {self.name!r}: ranks did not arrive")
                time.sleep(0.002)
        except _Aborted:
            bury(store)
            return
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        pg = make_group(self.sync.backend, store, rank, world, self.sync.default_timeout, self.host)
        self.group = (epoch, pg, store)
        self.stats.groups_formed += 1
        self._reply(("formed", epoch, True, None))

    def _receive(self, epoch: int, version: int, layout: Any) -> None:
        t0 = time.perf_counter()
        if self.group is None or self.group[0] != epoch:
            raise GroupBroken(f"{self.label} is not in group {epoch}")
        flats = alloc_flats(layout, self.device)
        works = recv_buckets(layout, flats, broadcaster(self.group[1]))
        deadline = time.monotonic() + self.sync.default_timeout
        what = f"weights {self.name!r} version {version} over group {epoch}"
        try:
            for w in works:
                wait_work(w, deadline, what, lambda: self._check_abort(epoch))
        except _Aborted:
            bury(flats)  # an abandoned broadcast may still write into them
            self._drop_group(epoch)
            self._reply(("ack", version, False, "aborted by the publisher"))
            return
        self._hold(version, views(layout, flats), layout.nbytes, time.perf_counter() - t0)
        self._reply(("ack", version, True, None))

    def _take_object(self, version: int) -> None:
        t0 = time.perf_counter()
        t = self.sync.default_timeout
        reply = ray_get(
            self.sync._registry.latest.remote(None, version, t, False, True),
            t + 30.0,
            f"weights {self.name!r}",
        )
        got_version, state = load_entry(self.name, reply, t)
        state = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in state.items()}
        from rlinf_scheduler.channel.wire import pack_payload

        self._hold(got_version, state, pack_payload(state)[1], time.perf_counter() - t0)
        self.stats.fallbacks += 1
        self._reply(("got", version, True, None))

    def _hold(self, version: int, state: dict[str, Any], nbytes: int, seconds: float) -> None:
        with self.cond:
            if self.held is None or version > self.held[0]:
                self.held = (version, state)
            self.note = ""
            self.stats.fetches += 1
            self.stats.bytes_fetched += nbytes
            self.stats.fetch_s += seconds
            self.cond.notify_all()

    # -- the fetching side ------------------------------------------------------------------------
    def fetch(self, min_version: int | None, timeout: float) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.held is None or (min_version is not None and self.held[0] < min_version):
                if self.error is not None:
                    raise self.error
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            else:
                return self.held
        newest: Any = "unknown"
        with contextlib.suppress(Exception):
            newest = self.sync.version()
        have = None if self.held is None else self.held[0]
        raise ChannelTimeout(
            f"timed out after {timeout:g} s waiting for weights {self.name!r} version >= "
            f"{0 if min_version is None else min_version} ({self.label} holds {have}; newest published: "
            f"{newest}){self.note}"
        )

    def fetch_if_newer(self, have: int | None) -> tuple[int, dict[str, Any]] | None:
        with self.cond:
            if self.error is not None and self.held is None:
                raise self.error
            if self.held is None or (have is not None and self.held[0] <= have):
                return None
            return self.held

    def close(self) -> None:
        self.closed = True
        self._reply(("bye",))
        self.link.close()
        self.inbox.put(("bye",))
        self._drop_group(None, in_flight=False)


class CollectiveWeightSync(WeightSync):
    """The ``collective`` :class:`~rlinf_core.weights.WeightSync` (see the module docstring).

    Create with :meth:`create` (the driver, or the scheduler's ``weight_sync``), connect with
    :meth:`connect` (an unpickled handle connects by itself).

    Parameters:
        backend: ``gloo`` or ``nccl``.
        bucket_bytes: the size of one broadcast bucket (:mod:`~.buckets`).
    """

    mode: ClassVar[str] = "collective"

    def __init__(
        self,
        name: str,
        actor: Any,
        namespace: str | None,
        default_timeout: float,
        backend: str,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> None:
        self.name, self.namespace, self.default_timeout = name, namespace, default_timeout
        self.backend, self.bucket_bytes = backend, int(bucket_bytes)
        self._registry = actor

    @classmethod
    def create(
        cls,
        name: str,
        *,
        backend: str = "gloo",
        node_id: str | None = None,
        namespace: str | None = None,
        detached: bool = False,
        default_timeout: float = 300.0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> CollectiveWeightSync:
        if backend not in BACKENDS:
            raise ValueError(
                f"collective weight sync backend must be one of {', '.join(BACKENDS)}, got {backend!r}"
            )
        actor = create_registry(
            name, mode="collective", backend=backend, node_id=node_id, namespace=namespace, detached=detached
        )
        return cls(name, actor, namespace, default_timeout, backend, bucket_bytes)

    @classmethod
    def connect(
        cls,
        name: str,
        *,
        namespace: str | None = None,
        timeout: float = 60.0,
        default_timeout: float = 300.0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> CollectiveWeightSync:
        actor = connect_registry(name, namespace=namespace, timeout=timeout)
        mode, backend, _ = ray_get(actor.info.remote(), timeout, f"weight registry {name!r}")
        if mode != "collective":
            raise ChannelError(f"weights {name!r} are synced through the {mode}, not a collective")
        return cls(name, actor, namespace, default_timeout, backend, bucket_bytes)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reconnect, (self.name, self.namespace, self.default_timeout, self.bucket_bytes))

    def __repr__(self) -> str:
        return f"CollectiveWeightSync({self.name!r}, backend={self.backend!r})"

    def _role(self, kind: type, make: Any) -> Any:
        key = (self.namespace, self.name)
        with _ROLES_LOCK:
            role = _ROLES.get(key)
            if role is None:
                _, _, token = ray_get(
                    self._registry.info.remote(), self.default_timeout, f"weight registry {self.name!r}"
                )
                role = _ROLES[key] = make(token)
        if not isinstance(role, kind):
            raise ChannelError(
                f"weights {self.name!r}: this process is their {'consumer' if kind is Publisher else 'publisher'}; "
                "a process either publishes or fetches a collective's weights"
            )
        return role

    def _publisher(self) -> Publisher:
        return self._role(Publisher, lambda token: Publisher(self, token))

    def attach(self, *, device: Any = None, label: str | None = None, timeout: float | None = None) -> None:
        """Join as a consumer now (the first fetch does it otherwise): receive on ``device``
        (default: this process's CUDA device under NCCL, else the CPU), named ``label`` in
        messages (default: this process's actor and pid). Waits up to ``timeout`` for the
        publisher to start."""
        t = self.default_timeout if timeout is None else timeout
        self._role(Consumer, lambda token: Consumer(self, token, device, label or peer_desc(), t))

    def _consumer(self, timeout: float) -> Consumer:
        return self._role(Consumer, lambda token: Consumer(self, token, None, peer_desc(), timeout))

    def publish(
        self, state_dict: Mapping[str, Any], version: int | None = None, *, timeout: float | None = None
    ) -> int:
        """Broadcast ``state_dict`` to every consumer and make it the newest version; returns
        once every consumer holds it (or, for one that failed, has been given the object-store
        copy). Only one process publishes a name."""
        t = self.default_timeout if timeout is None else timeout
        return self._publisher().publish(state_dict, version, t)

    def fetch(
        self, *, min_version: int | None = None, timeout: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        t = self.default_timeout if timeout is None else timeout
        start = time.monotonic()
        consumer = self._consumer(t)
        return consumer.fetch(min_version, max(0.0, t - (time.monotonic() - start)))

    def fetch_if_newer(self, have_version: int | None) -> tuple[int, dict[str, Any]] | None:
        return self._consumer(self.default_timeout).fetch_if_newer(have_version)

    def version(self) -> int | None:
        return ray_get(
            self._registry.version_.remote(), self.default_timeout, f"weight registry {self.name!r}"
        )

    def stats(self) -> WeightSyncStats:
        with _ROLES_LOCK:
            role = _ROLES.get((self.namespace, self.name))
        return WeightSyncStats(**role.stats.to_dict()) if role is not None else WeightSyncStats(self.mode)

    def close(self) -> None:
        """Leave: this process's publisher or consumer stops (the registry and the others stay)."""
        with _ROLES_LOCK:
            role = _ROLES.pop((self.namespace, self.name), None)
        if role is not None:
            role.close()

    def destroy(self) -> None:
        """Close this process's side and kill the registry actor."""
        import ray

        self.close()
        ray.kill(self._registry, no_restart=True)


def _reconnect(
    name: str, namespace: str | None, default_timeout: float, bucket_bytes: int
) -> CollectiveWeightSync:
    return CollectiveWeightSync.connect(
        name, namespace=namespace, default_timeout=default_timeout, bucket_bytes=bucket_bytes
    )

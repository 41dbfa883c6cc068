"""The publisher's side of a collective weight sync (one per process and name).

It listens on its node's address for the consumers' control connections (authenticated with
the registry's secret before anything is unpickled), keeps one reader thread per consumer
(a closed connection is a dead consumer, known at once), and on each :meth:`Publisher.publish`:

1. forms a new group (epoch) when the set of live consumers changed since the last one;
2. tells every member which version comes and its :class:`~.buckets.Layout`, broadcasts the
   buckets, and waits for every member's acknowledgement;
3. records the version in the registry (from then on it is the newest everywhere).

A member that dies during a publish is dropped (the broadcast stops at once, the others abandon
it) and the version goes to the members still alive through the object store; the next publish
forms a group of those that remain. A collective that itself fails (torch raises, e.g. NCCL's
``DistBackendError`` for two members on one GPU, a build without NCCL, a driver error) is given
up for good: that version and every later one go through the object store, and the publisher
logs why once. A consumer that joins between publishes (a late or restarted
worker) gets the newest version through the object store, put by a service thread of this
process, as long as the published tensors are still unchanged (their autograd version counters
are checked before and after the copy); otherwise it waits for the next publish, which includes
it in the group.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlinf_core.errors import ChannelError, ChannelTimeout
from rlinf_core.weights import WeightSyncStats
from rlinf_scheduler.channel.client import ray_get
from rlinf_scheduler.channel.peer import PEER_ID, node_address, peer_desc
from rlinf_scheduler.channel.wire import keepalive
from rlinf_scheduler.link import Link
from rlinf_scheduler.weights.buckets import layout_of, send_buckets
from rlinf_scheduler.weights.group import (
    GroupBroken,
    broadcaster,
    bury,
    host_store,
    make_group,
    missing_ranks,
    retire,
    wait_work,
)
from rlinf_scheduler.weights.object_store import put_state

__all__ = ["Publisher"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Member:
    """One consumer's control connection, as the publisher sees it."""

    id: str
    label: str
    link: Link
    inbox: queue.Queue[Any] = field(default_factory=queue.Queue)
    dead: str | None = None
    held: int | None = None
    waiting: bool = False  # told to wait for the next publish (the newest could not be served)
    refused: tuple[int, str] | None = None  # (version, why) of the newest receive it could not do
    send_lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, msg: Any) -> bool:
        with self.send_lock:
            try:
                self.link.send(msg)
                return True
            except ChannelError as err:
                self.dead = self.dead or str(err)
                return False


@dataclass
class Group:
    epoch: int
    pg: Any
    store: Any
    members: list[Member]


def counters(state_dict: Mapping[str, Any]) -> dict[str, int] | None:
    """The autograd version counter of every tensor (``None`` when one has none, as an
    inference-mode tensor): they change with every in-place write."""
    import torch

    try:
        return {k: v._version for k, v in state_dict.items() if isinstance(v, torch.Tensor)}
    except RuntimeError:
        return None


class Publisher:
    """See the module docstring. ``sync``: the :class:`~.collective.CollectiveWeightSync`."""

    def __init__(self, sync: Any, token: str) -> None:
        self.sync, self.name, self.registry = sync, sync.name, sync._registry
        self.backend, self.token = sync.backend, token
        self.timeout = sync.default_timeout
        self.host = node_address()
        self.listener = socket.create_server((self.host, 0), backlog=64)
        self.address = self.listener.getsockname()[:2]
        self.members: dict[str, Member] = {}
        self.lock = threading.RLock()  # publish and serve: one at a time
        self.cond = threading.Condition()  # members joining, dying, answering
        self.group: Group | None = None
        self.epoch = 0
        self.last: tuple[int, Mapping[str, Any], dict[str, int] | None] | None = None
        self.fallback: tuple[int, list[Any]] | None = None
        self.stats = WeightSyncStats("collective")
        self.closed = False
        self.given_up: str | None = None  # why the collective failed: the object store carries every version
        ray_get(
            self.registry.set_control.remote(self.address, PEER_ID, peer_desc()),
            self.timeout,
            f"weight registry {self.name!r}",
        )
        for target in (self._accept_loop, self._serve_loop):
            threading.Thread(target=target, name=f"rlinf-weights-{target.__name__}", daemon=True).start()

    # -- consumers joining and leaving -----------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self.closed:
            try:
                sock, addr = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._admit, args=(sock, addr), daemon=True).start()

    def _admit(self, sock: socket.socket, addr: Any) -> None:
        keepalive(sock)
        link = Link(sock, 10.0, f"a consumer at {addr[0]}:{addr[1]}")
        if link.recv_hello(self.token) is None:
            link.close()  # not one of ours
            return
        try:
            _, member_id, label, kind = link.recv("the consumer's join")
        except (ChannelError, ValueError, TypeError):
            link.close()
            return
        want = "cuda" if self.backend == "nccl" else "cpu"
        if kind != want:
            with contextlib.suppress(ChannelError):
                link.send(
                    (
                        "refused",
                        f"weights {self.name!r} are synced over {self.backend} ({want} devices), but {label} "
                        f"is on {kind}: a collective needs the publisher and every consumer on one kind of "
                        "device; place them alike, or use object_store (auto picks it for a mixed set)",
                    )
                )
            link.close()
            return
        link.sock.settimeout(None)  # the reader blocks until a message or the end
        link.timeout, link.peer = self.timeout, label
        member = Member(member_id, label, link)
        member.send(("welcome", self.epoch))
        with self.cond:
            old = self.members.get(member_id)
            if old is not None:
                old.dead = old.dead or "it joined again"
            self.members[member_id] = member
            self.cond.notify_all()
        threading.Thread(target=self._read_loop, args=(member,), daemon=True).start()

    def _read_loop(self, member: Member) -> None:
        while True:
            try:
                msg = member.link.recv("a message")
            except ChannelError as err:
                reason = str(err)
                break
            if msg == ("bye",):
                reason = "it left"
                break
            if msg[0] in ("ack", "got") and msg[2]:
                member.held = max(member.held or -1, int(msg[1]))
            elif msg[0] == "ack":
                member.refused = (int(msg[1]), str(msg[3]))
            member.inbox.put(msg)
            with self.cond:
                self.cond.notify_all()
        member.link.close()
        with self.cond:
            member.dead = member.dead or reason
            if self.members.get(member.id) is member:
                del self.members[member.id]
            self.cond.notify_all()

    def _live(self) -> list[Member]:
        with self.cond:
            return [m for m in self.members.values() if m.dead is None]

    def _drop(self, members: Iterable[Member], reason: str) -> None:
        """Evict ``members``: they reconnect as new consumers if they are alive."""
        for m in members:
            if m.dead is None:
                m.send(("evicted", reason))
                m.dead = reason
                m.link.close()

    # -- publishing ------------------------------------------------------------------------------
    def publish(self, state_dict: Mapping[str, Any], version: int | None, timeout: float) -> int:
        t0 = time.perf_counter()
        deadline = time.monotonic() + timeout
        with self.lock:
            version = ray_get(self.registry.check.remote(version), timeout, f"weight registry {self.name!r}")
            layout = layout_of(state_dict, self.sync.bucket_bytes)
            behind: list[Member] = []
            members = self._live()
            if members and self.given_up is None:
                if self.group is None or {m.id for m in self.group.members} != {m.id for m in members}:
                    self._form(members, deadline)
                if self.group is not None:
                    behind = self._broadcast(self.group, version, layout, state_dict, deadline)
                else:  # no group could be formed: the object store carries this version
                    behind = self._live()
            elif members:  # the collective failed before: the object store carries every version
                behind = members
            ray_get(
                self.registry.publish.remote(version, [], False, peer_desc()),
                max(1.0, deadline - time.monotonic()),
                f"weight registry {self.name!r}",
            )
            self.last, self.fallback = (version, state_dict, counters(state_dict)), None
            for m in self._live():
                m.waiting = False
            if behind:
                self._send_object(behind, deadline)
        self.stats.publishes += 1
        self.stats.bytes_published += layout.nbytes
        self.stats.publish_s += time.perf_counter() - t0
        return version

    def _await(self, members: list[Member], kind: str, key: int, deadline: float) -> list[Member]:
        """Wait for each member's ``(kind, key, ok, error)``; returns those that failed (said
        no, died, or did not answer by ``deadline``), dropping the silent ones."""
        failed: list[Member] = []
        waiting = list(members)
        while waiting:
            for m in list(waiting):
                try:
                    msg = m.inbox.get_nowait()
                except queue.Empty:
                    if m.dead is not None:
                        waiting.remove(m)
                    continue
                if msg[0] == kind and msg[1] == key:
                    waiting.remove(m)
                    if not msg[2]:
                        failed.append(m)
            if not waiting:
                break
            if time.monotonic() >= deadline:
                self._drop(waiting, f"no {kind} for {key} from it within the publish's timeout")
                failed.extend(waiting)
                break
            with self.cond:
                self.cond.wait(0.05)
        return failed

    def _form(self, members: list[Member], deadline: float) -> None:
        """Form a group of this process (rank 0) and ``members``; members that do not arrive are
        dropped and the group is formed without them."""
        if self.group is not None:  # its last broadcast completed
            retire(self.group.pg)
            self.group = None
        while members:
            self.epoch += 1
            store = host_store(self.host, max(1.0, deadline - time.monotonic()))
            world = len(members) + 1
            for rank, m in enumerate(members, 1):
                m.send(("form", self.epoch, rank, world, (self.host, store.port)))
            store.set("arrived/0", b"1")
            while True:
                missing = [members[r - 1] for r in missing_ranks(store, world) if r > 0]
                gone = [m for m in missing if m.dead is not None]
                if not missing or gone or time.monotonic() >= deadline:
                    break
                time.sleep(0.002)
            if missing:
                self._drop(missing, f"it did not join group {self.epoch} of weights {self.name!r}")
                for m in members:
                    m.send(("abort", self.epoch))
                bury(store)
                members = [m for m in members if m not in missing and m.dead is None]
                continue
            try:
                pg = make_group(self.backend, store, 0, world, self.timeout, self.host)
            except RuntimeError:  # a member died while the group was built
                for m in members:
                    m.send(("abort", self.epoch))
                bury(store)
                return
            failed = self._await(members, "formed", self.epoch, deadline)
            if failed:
                self._drop(failed, f"it could not form group {self.epoch}")
                bury(pg, store)
                members = [m for m in members if m not in failed and m.dead is None]
                continue
            self.group = Group(self.epoch, pg, store, members)
            self.stats.groups_formed += 1
            return

    def _broadcast(
        self, group: Group, version: int, layout: Any, state_dict: Mapping[str, Any], deadline: float
    ) -> list[Member]:
        """Broadcast ``version`` to ``group``; returns the live members that do not hold it."""
        import torch

        for m in group.members:
            m.send(("recv", group.epoch, version, layout))

        def check() -> None:
            for m in group.members:
                if m.dead is not None:
                    raise GroupBroken(f"{m.label} left group {group.epoch} ({m.dead})")
                if m.refused is not None and m.refused[0] == version:
                    raise GroupBroken(f"{m.label} could not receive version {version}: {m.refused[1]}")

        what = f"the broadcast of weights {self.name!r} version {version} to group {group.epoch}"
        device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else "cpu"
        bcast = broadcaster(group.pg)
        try:
            send_buckets(layout, state_dict, device, bcast, lambda w: wait_work(w, deadline, what, check))
        except (GroupBroken, ChannelTimeout) as err:
            bury(group.pg, group.store)
            self.group = None
            live = [m for m in group.members if m.dead is None]
            for m in live:
                m.send(("abort", group.epoch))
            failed = self._await(live, "ack", version, min(deadline, time.monotonic() + 10.0))
            if isinstance(err, ChannelTimeout):
                self._drop(failed, str(err))
                return []
            return [m for m in failed if m.dead is None]  # those that got it all acknowledged it
        except RuntimeError as err:  # the collective itself failed (torch's DistBackendError...)
            self._give_up(group, err, version, deadline)
            return [m for m in group.members if m.dead is None]
        failed = self._await(group.members, "ack", version, deadline)
        if failed:
            bury(group.pg, group.store)
            self.group = None
        return [m for m in failed if m.dead is None]

    def _give_up(self, group: Group, err: BaseException, version: int, deadline: float) -> None:
        """Stop using collectives after ``err`` from one (not a member's death): abort ``group``,
        wait for its members to leave it, and say once that the object store takes over."""
        bury(group.pg, group.store)
        self.group = None
        live = [m for m in group.members if m.dead is None]
        for m in live:
            m.send(("abort", group.epoch))
        self._await(live, "ack", version, min(deadline, time.monotonic() + 10.0))
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        self.given_up = f"{type(err).__name__}: {first}"
        log.warning(
            "weights %r: the %s collective failed (%s); this version and every later one go to the "
            "consumers through the object store (rollout.weight_sync: object_store avoids the attempt)",
            self.name,
            self.backend,
            self.given_up,
        )

    # -- the object-store path for members that lack the newest version ---------------------------
    def _send_object(self, members: list[Member], deadline: float) -> bool:
        """Give ``members`` the newest version through the object store; ``False`` when its
        tensors changed since it was published (the members then wait for the next publish)."""
        assert self.last is not None
        version, state_dict, before = self.last
        if self.fallback is None or self.fallback[0] != version:
            if before is None:
                return False
            refs, has_torch, _ = put_state(state_dict)
            if counters(state_dict) != before:
                return False  # the publisher wrote into them meanwhile: a torn copy
            attached = ray_get(
                self.registry.attach.remote(version, refs, has_torch, peer_desc()),
                max(1.0, deadline - time.monotonic()),
                f"weight registry {self.name!r}",
            )
            if not attached:
                return False
            self.fallback = (version, refs)
        for m in members:
            m.send(("object", version))
        self._await(members, "got", version, deadline)
        self.stats.fallbacks += len(members)
        return True

    def _serve_loop(self) -> None:
        """Give consumers that joined after the newest publish that version (see the module
        docstring); runs between publishes."""
        while not self.closed:
            with self.cond:
                self.cond.wait(0.5)
            if self.last is None:
                continue
            with self.lock:
                if self.last is None or self.closed:
                    continue
                in_group = {m.id for m in self.group.members} if self.group is not None else set()
                version = self.last[0]
                late = [
                    m
                    for m in self._live()
                    if m.id not in in_group and not m.waiting and (m.held is None or m.held < version)
                ]
                if late and not self._send_object(late, time.monotonic() + self.timeout):
                    for m in late:
                        m.waiting = True  # until the next publish, which brings it into the group
                        m.send(("wait", version))

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        with contextlib.suppress(OSError):
            self.listener.close()
        for m in self._live():
            m.send(("bye",))
            m.link.close()
        with contextlib.suppress(Exception):
            ray_get(self.registry.clear_control.remote(PEER_ID), 10.0, f"weight registry {self.name!r}")
        if self.group is not None:
            retire(self.group.pg)
            self.group = None

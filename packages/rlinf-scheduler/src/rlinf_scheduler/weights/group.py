"""The process group of one collective epoch, built beside (never as) torch's default group.

The publisher hosts a ``TCPStore`` on its node's address (a free port); every member writes
``arrived/<rank>`` there, and once all have (:func:`missing_ranks`), each builds a Gloo or NCCL
process group object directly on the store (``ProcessGroupGloo`` / ``ProcessGroupNCCL``). A
learner's own ``torch.distributed`` group, if it has one, is untouched, and a group can be
dropped and formed again as members come and go, which ``init_process_group`` cannot do.

:func:`wait_work` waits for one collective without blocking in torch, so that the wait can end
early when the caller learns that the group broke (a member died, the publisher aborted).
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

from rlinf_core.errors import ChannelError, ChannelTimeout

__all__ = [
    "GroupBroken",
    "broadcaster",
    "bury",
    "host_store",
    "join_store",
    "make_group",
    "missing_ranks",
    "retire",
    "wait_work",
]

KEEP_BURIED = 12
"""Abandoned objects (Gloo groups, stores, receive buffers) kept before the oldest is released."""
_BURIED: collections.deque[Any] = collections.deque()
_BURIED_LOCK = threading.Lock()


class GroupBroken(ChannelError):
    """The collective group of an epoch broke (a member died or the publisher aborted it)."""


def host_store(host: str, timeout: float) -> Any:
    """A ``TCPStore`` server on ``host`` and a free port (``store.port``)."""
    from torch.distributed import TCPStore

    return TCPStore(
        host,
        0,
        world_size=None,
        is_master=True,
        timeout=datetime.timedelta(seconds=timeout),
        wait_for_workers=False,
        use_libuv=True,
    )


def join_store(host: str, port: int, timeout: float) -> Any:
    """A client of the publisher's store at ``host:port``."""
    from torch.distributed import TCPStore

    return TCPStore(
        host,
        int(port),
        world_size=None,
        is_master=False,
        timeout=datetime.timedelta(seconds=timeout),
        use_libuv=True,
    )


def missing_ranks(store: Any, world: int) -> list[int]:
    """Ranks that have not written ``arrived/<rank>`` yet."""
    return [r for r in range(world) if not store.check([f"arrived/{r}"])]


def make_group(backend: str, store: Any, rank: int, world: int, timeout: float, host: str) -> Any:
    """A ``ProcessGroupGloo`` (bound to ``host``) or ``ProcessGroupNCCL`` on ``store``; blocks
    until every rank built its own."""
    import torch.distributed as dist

    td = datetime.timedelta(seconds=timeout)
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = td
        return dist.ProcessGroupNCCL(store, rank, world, opts)
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = td
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
    return dist.ProcessGroupGloo(store, rank, world, opts)


def broadcaster(pg: Any) -> Callable[[Any], Any]:
    """``f(tensor) -> work``: an asynchronous broadcast from rank 0 of ``pg``."""
    import torch.distributed as dist

    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    opts.rootTensor = 0
    return lambda tensor: pg.broadcast([tensor], opts)


def wait_work(work: Any, deadline: float, what: str, check: Callable[[], None] | None = None) -> None:
    """Wait for ``work`` until the monotonic ``deadline``; ``check()`` runs between polls and may
    raise to give up (:class:`GroupBroken`). A failed collective raises :class:`GroupBroken`,
    a late one :class:`~rlinf_core.errors.ChannelTimeout` naming ``what``."""
    pause = 2e-5
    while not work.is_completed():
        if check is not None:
            check()
        if time.monotonic() >= deadline:
            raise ChannelTimeout(f"timed out waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 2e-3)
    try:
        work.wait()
    except RuntimeError as err:
        raise GroupBroken(f"{what} failed: {str(err).splitlines()[0][:300]}") from None


def _is_nccl(obj: Any) -> bool:
    return type(obj).__name__ == "ProcessGroupNCCL"


def retire(pg: Any) -> None:
    """Drop a group with no collective in flight (its last broadcast completed)."""
    if _is_nccl(pg):
        with contextlib.suppress(Exception):
            pg.shutdown()


def _release(objs: list[Any]) -> None:
    objs.clear()  # the destructors run here, off the caller's thread


def bury(*objs: Any) -> None:
    """Let go of a group, its store or the buffers of a broadcast that may still be in flight.

    An NCCL group is aborted at once (its watchdog would end the process when the abandoned
    collective times out). Anything else is kept until :data:`KEEP_BURIED` newer ones were
    buried, then released in a background thread: a Gloo group's destructor waits for its
    pending work (at most its timeout), and a buffer must outlive the receive writing into it."""
    for obj in objs:
        if _is_nccl(obj):
            with contextlib.suppress(Exception):
                obj.abort()
            continue
        with _BURIED_LOCK:
            _BURIED.append(obj)
            old = [_BURIED.popleft() for _ in range(max(0, len(_BURIED) - KEEP_BURIED))]
        if old:
            threading.Thread(target=_release, args=(old,), name="rlinf-weights-release", daemon=True).start()

"""Weight sync: the learner's rank 0 publishes versioned weights, the consumers fetch them.

A :class:`WeightSync` handle is created by the driver through
:meth:`rlinf_core.Scheduler.weight_sync`, handed to the workers as a call argument (it pickles to
what reconnects it; it never carries weights) and used there:

* the publisher (the learner's rank 0) calls :meth:`WeightSync.publish` after each update;
* the consumers (rollout workers, optionally the reference) call :meth:`WeightSync.fetch` with
  the oldest version they may use, or :meth:`WeightSync.fetch_if_newer` to take a newer one if
  there is one, without waiting;
* the driver calls :meth:`WeightSync.destroy` at the end of the run.

Versions are integers that only increase; once :meth:`~WeightSync.publish` returned, no fetch
anywhere sees an older version. How the bytes move is the implementation's business (a
scheduler's modes, see :data:`WEIGHT_SYNC_MODES`); :class:`LocalWeightSync` is the in-process one.
"""

from __future__ import annotations

import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from rlinf_core.errors import ChannelError, ChannelTimeout, ConfigError

__all__ = [
    "WEIGHT_SYNC_MODES",
    "LocalWeightSync",
    "WeightSync",
    "WeightSyncStats",
    "device_kind",
    "resolve_weight_sync_mode",
    "shared_gpus",
]

WEIGHT_SYNC_MODES: tuple[str, ...] = ("auto", "collective", "object_store")
"""What ``rollout.weight_sync`` may say: ``collective`` (a broadcast group of the publisher and
the consumers: NCCL on GPUs, Gloo on CPUs), ``object_store`` (one copy in the cluster's object
store that every consumer reads) or ``auto`` (``collective`` when the publisher and every consumer
are on CUDA devices, each on its own GPU, else ``object_store``)."""

DEFAULT_TIMEOUT: float = 300.0


@dataclass
class WeightSyncStats:
    """What one process's handle moved since it was created (:meth:`WeightSync.stats`).

    Attributes:
        mode: ``collective``, ``object_store`` or ``local``.
        publishes: versions this process published.
        bytes_published: bytes of those versions (tensor and array data).
        publish_s: seconds spent in :meth:`WeightSync.publish` (until every consumer had it,
            where the mode waits for that).
        fetches: versions this process received (a version already held is not counted).
        bytes_fetched: bytes of those versions.
        fetch_s: seconds spent receiving them.
        groups_formed: collective groups this process took part in forming.
        fallbacks: versions that went through the object store instead of the collective
            (a late or restarted consumer's first version, a consumer whose broadcast failed).
    """

    mode: str
    publishes: int = 0
    bytes_published: int = 0
    publish_s: float = 0.0
    fetches: int = 0
    bytes_fetched: int = 0
    fetch_s: float = 0.0
    groups_formed: int = 0
    fallbacks: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class WeightSync(ABC):
    """Interface of a run's versioned weights (see the module docstring).

    Implementations are safe to call from several threads of a process. Every blocking call takes
    a ``timeout`` in seconds (``None``: the handle's default, 300 s unless set) and raises
    :class:`~rlinf_core.errors.ChannelTimeout` naming the weights and the version it waited for.
    """

    name: str
    mode: ClassVar[str]

    @abstractmethod
    def publish(
        self, state_dict: Mapping[str, Any], version: int | None = None, *, timeout: float | None = None
    ) -> int:
        """Make ``state_dict`` the newest version; returns the version.

        Called by the publisher (the learner's rank 0) only. ``version`` defaults to the previous
        one plus 1 (0 first); an explicit one must be newer than every published version
        (:class:`~rlinf_core.errors.ChannelError` otherwise). Once this returns, every fetch
        sees this version or a newer one. The tensors are read during the call; the caller may
        change them afterwards.
        """

    @abstractmethod
    def fetch(
        self, *, min_version: int | None = None, timeout: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        """``(version, state_dict)`` of the newest version this process can have, waiting for
        one ``>= min_version`` (``None``: any). A version already held is returned again without
        a transfer. Treat the returned tensors as read-only (``load_state_dict`` copies them).
        """

    @abstractmethod
    def fetch_if_newer(self, have_version: int | None) -> tuple[int, dict[str, Any]] | None:
        """The newest ``(version, state_dict)`` if it is newer than ``have_version`` (``None``:
        anything published), else ``None`` at once; never waits for a publish."""

    @abstractmethod
    def version(self) -> int | None:
        """The newest published version (``None``: nothing published yet)."""

    def stats(self) -> WeightSyncStats:
        """What this process's handle moved (see :class:`WeightSyncStats`)."""
        return WeightSyncStats(self.mode)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Stop taking part from this process (a consumer leaves its group); the weights stay."""

    @abstractmethod
    def destroy(self) -> None:
        """Remove the weights for every process (the driver, at the end of the run)."""


def device_kind(device: str) -> str:
    """``cuda`` for ``cuda``, ``cuda:1`` or ``cuda:1@node 0`` (the form a placement's device
    table writes); the part before ``:`` or ``@`` otherwise (``cpu``)."""
    return str(device).strip().split("@", 1)[0].split(":", 1)[0].strip().lower() or "cpu"


def _gpu_slot(device: str) -> tuple[str, str]:
    """``(node, index)`` of a CUDA device string: ``cuda:1@node 0`` is ``("0", "1")``; a device
    without ``@node`` is on node ``""`` (one node), a bare ``cuda`` has index ``""`` (unknown,
    taken as the same GPU as another bare ``cuda`` on its node)."""
    text = str(device).strip().lower()
    where, _, node = text.partition("@")
    node = node.strip()
    node = node[4:].strip() if node.startswith("node") else node
    _, _, index = where.partition(":")
    return node, index.strip()


def shared_gpus(devices: Mapping[str, str] | None) -> list[list[str]]:
    """The members of ``devices`` (member label -> device) that share one GPU: one list of
    labels per (node, GPU) pair held by two or more CUDA members, in the order met. NCCL refuses
    two ranks of one communicator on one GPU (``ncclInvalidUsage``, "Duplicate GPU detected"),
    so such a set cannot form a collective."""
    slots: dict[tuple[str, str], list[str]] = {}
    for label, dev in (devices or {}).items():
        if device_kind(dev) == "cuda":
            slots.setdefault(_gpu_slot(dev), []).append(label)
    return [labels for labels in slots.values() if len(labels) > 1]


def resolve_weight_sync_mode(
    mode: str, devices: Mapping[str, str] | None = None, *, path: str = "rollout.weight_sync"
) -> str:
    """``collective`` or ``object_store`` for ``mode`` and the members' ``devices``.

    ``devices`` maps each member of the sync (``"actor rank 0"``, ``"rollout rank 1"``...) to
    its device (``cpu``, ``cuda:0``, ``cuda:0@node 1``...); the publisher is one of them.
    ``auto`` is ``collective`` when every member is on a CUDA device and no two share a GPU
    (one (node, GPU) pair each, :func:`shared_gpus`), else ``object_store``. ``collective``
    needs every member on one kind of device (one NCCL or one Gloo group) and, on CUDA, each on
    its own GPU. Raises :class:`~rlinf_core.errors.ConfigError` at ``path`` for an unknown mode,
    a mixed device set, or a collective over a shared GPU.
    """
    if mode not in WEIGHT_SYNC_MODES:
        raise ConfigError(
            f"unknown weight sync mode {mode!r}; choose one of {', '.join(WEIGHT_SYNC_MODES)}", path
        )
    kinds = {label: device_kind(dev) for label, dev in (devices or {}).items()}
    shared = shared_gpus(devices)
    if mode == "auto":
        all_cuda = kinds and all(k == "cuda" for k in kinds.values())
        return "collective" if all_cuda and not shared else "object_store"
    if mode == "collective" and len(set(kinds.values())) > 1:
        listing = ", ".join(f"{label} on {devices[label]}" for label in kinds)  # type: ignore[index]
        raise ConfigError(
            f"collective weight sync needs the publisher and every consumer on one kind of device "
            f"(all CUDA for NCCL, all CPU for Gloo), got {listing}; place them alike, or use "
            f"object_store (or auto, which picks it for a mixed set)",
            path,
        )
    if mode == "collective" and shared:
        labels = shared[0]
        gpu = (devices or {})[labels[0]]
        raise ConfigError(
            f"collective weight sync needs each member on its own GPU (NCCL refuses two ranks of one "
            f"group on one GPU), but {', '.join(labels[:-1])} and {labels[-1]} share {gpu}; use "
            "object_store (or auto, which picks it here), or place the rollout and reference on GPUs "
            "of their own",
            path,
        )
    return mode


def _snapshot(value: Any) -> Any:
    """A copy of ``value`` that later in-place changes of the original do not reach (tensors are
    detached and cloned, numpy arrays copied, mappings and sequences walked)."""
    if hasattr(value, "detach") and hasattr(value, "clone"):  # a torch tensor, without importing torch
        return value.detach().clone()
    if type(value).__module__ == "numpy" and hasattr(value, "copy"):
        return value.copy()
    if isinstance(value, Mapping):
        return {k: _snapshot(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_snapshot(v) for v in value)
    return value


def _nbytes(value: Any) -> int:
    if hasattr(value, "element_size") and hasattr(value, "nelement"):
        return int(value.element_size() * value.nelement())
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    if isinstance(value, Mapping):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_nbytes(v) for v in value)
    return 0


class _LocalState:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.version: int | None = None
        self.state: dict[str, Any] | None = None


_LOCAL: dict[str, _LocalState] = {}
_LOCAL_LOCK = threading.Lock()


class LocalWeightSync(WeightSync):
    """:class:`WeightSync` for the threads of one process (an in-process scheduler, the local
    runtime, tests): no Ray, no torch import.

    Handles of one ``name`` in a process share their weights (a pickled copy finds them again
    by name). ``copy=True`` (the default) snapshots the state dict at :meth:`publish`, so the
    publisher may go on changing its tensors; ``copy=False`` hands the very objects to the
    consumers, for a caller that publishes a fresh state dict each time or does not need the
    snapshot.
    """

    mode: ClassVar[str] = "local"

    def __init__(self, name: str, *, copy: bool = True, default_timeout: float = DEFAULT_TIMEOUT) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"weight sync name must be a non-empty string, got {name!r}")
        self.name, self.copy, self.default_timeout = name, copy, default_timeout
        with _LOCAL_LOCK:
            self._state = _LOCAL.setdefault(name, _LocalState())
        self._stats = WeightSyncStats(self.mode)
        self._held: int | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_local_sync, (self.name, self.copy, self.default_timeout))

    def __repr__(self) -> str:
        return f"LocalWeightSync({self.name!r})"

    def publish(
        self, state_dict: Mapping[str, Any], version: int | None = None, *, timeout: float | None = None
    ) -> int:
        t0 = time.perf_counter()
        value = _snapshot(state_dict) if self.copy else dict(state_dict)
        st = self._state
        with st.cond:
            if version is None:
                version = 0 if st.version is None else st.version + 1
            elif st.version is not None and version <= st.version:
                raise ChannelError(
                    f"weights {self.name!r}: version {version} is not newer than the published "
                    f"{st.version}; versions must increase"
                )
            st.version, st.state = int(version), value
            st.cond.notify_all()
        self._stats.publishes += 1
        self._stats.bytes_published += _nbytes(value)
        self._stats.publish_s += time.perf_counter() - t0
        return int(version)

    def fetch(
        self, *, min_version: int | None = None, timeout: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        t = self.default_timeout if timeout is None else timeout
        st = self._state
        deadline = time.monotonic() + t
        with st.cond:
            while st.version is None or (min_version is not None and st.version < min_version):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChannelTimeout(
                        f"timed out after {t:g} s waiting for weights {self.name!r} version >= "
                        f"{0 if min_version is None else min_version} (newest published: {st.version})"
                    )
                st.cond.wait(None if math.isinf(left) else left)
            assert st.state is not None
            got = st.version, st.state
        self._count(got)
        return got

    def fetch_if_newer(self, have_version: int | None) -> tuple[int, dict[str, Any]] | None:
        st = self._state
        with st.cond:
            if (
                st.version is None
                or st.state is None
                or (have_version is not None and st.version <= have_version)
            ):
                return None
            got = st.version, st.state
        self._count(got)
        return got

    def _count(self, got: tuple[int, dict[str, Any]]) -> None:
        if got[0] != self._held:
            self._held = got[0]
            self._stats.fetches += 1
            self._stats.bytes_fetched += _nbytes(got[1])

    def version(self) -> int | None:
        with self._state.cond:
            return self._state.version

    def stats(self) -> WeightSyncStats:
        return WeightSyncStats(**self._stats.to_dict())

    def destroy(self) -> None:
        with _LOCAL_LOCK:
            if _LOCAL.get(self.name) is self._state:
                del _LOCAL[self.name]


def _local_sync(name: str, copy: bool, default_timeout: float) -> LocalWeightSync:
    return LocalWeightSync(name, copy=copy, default_timeout=default_timeout)

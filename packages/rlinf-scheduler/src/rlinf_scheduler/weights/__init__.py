"""Versioned weights of a run: the learner's rank 0 publishes, rollout (and reference) workers fetch.

Two implementations of :class:`rlinf_core.weights.WeightSync`, chosen per run by
``rollout.weight_sync`` through :meth:`RayScheduler.weight_sync
<rlinf_scheduler.runtime.scheduler.RayScheduler.weight_sync>` (:func:`make_weight_sync`):

* ``object_store`` (:class:`WeightBroadcast`): one copy of each version in Ray's object store,
  read by every consumer (:mod:`~rlinf_scheduler.weights.object_store`);
* ``collective`` (:class:`CollectiveWeightSync`): a broadcast group of the publisher and the
  consumers, NCCL on GPUs and Gloo on CPUs, in fixed-size dtype-grouped buckets
  (:mod:`~rlinf_scheduler.weights.collective`, :mod:`~rlinf_scheduler.weights.publisher`,
  :mod:`~rlinf_scheduler.weights.buckets`, :mod:`~rlinf_scheduler.weights.group`).

Both keep the versions in one registry actor per name (:mod:`~rlinf_scheduler.weights.registry`).
``docs/design/scheduler.md`` says how they work and why.
"""

from __future__ import annotations

from collections.abc import Mapping

from rlinf_core.weights import WeightSync, device_kind, resolve_weight_sync_mode
from rlinf_scheduler.weights.buckets import DEFAULT_BUCKET_BYTES
from rlinf_scheduler.weights.collective import CollectiveWeightSync
from rlinf_scheduler.weights.object_store import WeightBroadcast

__all__ = ["DEFAULT_BUCKET_BYTES", "CollectiveWeightSync", "WeightBroadcast", "make_weight_sync"]


def make_weight_sync(
    name: str,
    *,
    mode: str = "auto",
    devices: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    node_id: str | None = None,
    namespace: str | None = None,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    path: str = "rollout.weight_sync",
) -> WeightSync:
    """Create the weights ``name`` in ``mode`` (``auto``: see
    :func:`~rlinf_core.weights.resolve_weight_sync_mode`) and return the handle; the collective's
    backend is NCCL when every member in ``devices`` is on CUDA, else Gloo."""
    resolved = resolve_weight_sync_mode(mode, devices, path=path)
    if resolved == "object_store":
        return WeightBroadcast.create(name, node_id=node_id, namespace=namespace, default_timeout=timeout)
    backend = "nccl" if {device_kind(d) for d in (devices or {}).values()} == {"cuda"} else "gloo"
    return CollectiveWeightSync.create(
        name,
        backend=backend,
        node_id=node_id,
        namespace=namespace,
        default_timeout=timeout,
        bucket_bytes=bucket_bytes,
    )

"""The Ray runtime of rlinf: cluster bring-up, node ranks, worker groups, code sync.

Importing this package does not import Ray; its classes are loaded on first use:

- :class:`~rlinf_scheduler.runtime.cluster.Cluster`: connect (or start an embedded Ray), probe nodes,
  order them by ``RLINF_NODE_RANK``, plan and launch;
- :class:`~rlinf_scheduler.runtime.worker_group.RayWorkerGroup`: one actor per planned process;
- :class:`~rlinf_scheduler.runtime.scheduler.RayScheduler`: the ``ray`` scheduler plugin;
- :mod:`~rlinf_scheduler.runtime.node_info`: :class:`NodeInfo` and the node-rank rules (no Ray);
- :mod:`~rlinf_scheduler.runtime.embedded`: the embedded single-node Ray;
- :mod:`~rlinf_scheduler.runtime.code_sync`, :mod:`~rlinf_scheduler.runtime.versions`,
  :mod:`~rlinf_scheduler.runtime.node` (``rlinf node start/stop``).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Cluster", "NodeInfo", "RayGroupCall", "RayScheduler", "RayWorkerGroup", "WorkerError"]

_WHERE = {
    "Cluster": "cluster",
    "NodeInfo": "node_info",
    "RayGroupCall": "worker_group",
    "RayWorkerGroup": "worker_group",
    "WorkerError": "worker_group",
    "RayScheduler": "scheduler",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

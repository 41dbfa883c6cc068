"""Compatibility with RLinf's own YAML files: the ``cluster`` keys RLinf reads and rlinf does not.

RLinf builds its ``ClusterConfig`` with ``no_check_unknown=True`` and reads more keys from the
``cluster`` section elsewhere (profiling, the tracer, network emulation, its auto scheduler and
Megatron switches). A config written for RLinf must load here, so those keys are accepted and
dropped with one warning naming each; a key that is neither rlinf's nor RLinf's stays an error,
with the closest valid key as a suggestion (``component_placment`` is a typo, not RLinf).

:func:`split_rlinf_cluster_keys` does this for one ``cluster`` mapping; the validation of the
section (:func:`rlinf_core.cluster.resolve_cluster`) then sees only the keys rlinf implements.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from rlinf_core.cluster.models import ClusterConfig
from rlinf_core.errors import ConfigProblem, join_path

__all__ = [
    "CLUSTER_KEYS",
    "RLINF_CLUSTER_KEYS",
    "RLINF_NODE_GROUP_KEYS",
    "ignored_keys_warning",
    "split_rlinf_cluster_keys",
]

CLUSTER_KEYS: tuple[str, ...] = tuple(ClusterConfig.model_fields)
"""The keys of the ``cluster`` section rlinf implements."""

RLINF_CLUSTER_KEYS: Mapping[str, str] = {
    "profiling": "per-worker profiling (RLinf's profiler backends)",
    "tracer": "RLinf's trace-event recorder",
    "net_emulation": "RLinf's emulated network links",
    "auto_scheduler": "RLinf's dynamic scheduler",
    "use_pre_process_policy": "an RLinf dynamic-scheduler policy",
    "use_wait_before_last_iter_policy": "an RLinf dynamic-scheduler policy",
    "recreate_nccl_groups": "RLinf's Megatron process-group switch",
}
"""``cluster`` keys RLinf reads that rlinf accepts and ignores (RLinf's ``rlinf/config.py``,
``rlinf/scheduler/cluster``, ``rlinf/utils/placement.py``)."""

RLINF_NODE_GROUP_KEYS: Mapping[str, str] = {
    "hardware_type": "RLinf's hardware type of a group without hardware configs",
    "ignore_hardware": "RLinf's switch to treat a group's nodes as CPU-only (place on node group 'node')",
}
"""Keys of a ``cluster.node_groups`` entry RLinf's ``NodeGroupConfig`` has and rlinf ignores."""


def split_rlinf_cluster_keys(
    cluster: Any, prefix: str = "cluster", *, keep_unknown: bool = False
) -> tuple[Any, list[str], list[ConfigProblem]]:
    """``(cleaned, ignored, problems)`` for a ``cluster`` section.

    ``cleaned`` is a copy without RLinf-only keys (:data:`RLINF_CLUSTER_KEYS` at the top,
    :data:`RLINF_NODE_GROUP_KEYS` in node groups) and, unless ``keep_unknown``, without unknown
    keys; ``ignored`` the YAML paths of the RLinf-only keys dropped; ``problems`` one per unknown
    key, with a did-you-mean. A value that is not a mapping comes back as it is (its validation
    reports it).
    """
    if not isinstance(cluster, Mapping):
        return cluster, [], []
    cleaned: dict[Any, Any] = {}
    ignored: list[str] = []
    problems: list[ConfigProblem] = []
    for key, value in cluster.items():
        path = join_path(prefix, str(key))
        if key in CLUSTER_KEYS:
            cleaned[key] = value
        elif key in RLINF_CLUSTER_KEYS:
            ignored.append(path)
        else:
            if keep_unknown:
                cleaned[key] = value
            close = difflib.get_close_matches(str(key), CLUSTER_KEYS, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append(
                ConfigProblem(
                    path,
                    f"unknown key ({hint}rlinf's keys: {', '.join(CLUSTER_KEYS)}; RLinf's "
                    f"{', '.join(RLINF_CLUSTER_KEYS)} are accepted and ignored)",
                )
            )
    groups = cleaned.get("node_groups")
    if isinstance(groups, list):
        out = []
        for i, group in enumerate(groups):
            if isinstance(group, Mapping) and any(k in RLINF_NODE_GROUP_KEYS for k in group):
                ignored.extend(
                    join_path(prefix, f"node_groups[{i}].{k}") for k in group if k in RLINF_NODE_GROUP_KEYS
                )
                group = {k: v for k, v in group.items() if k not in RLINF_NODE_GROUP_KEYS}
            out.append(group)
        cleaned["node_groups"] = out
    return cleaned, ignored, problems


def ignored_keys_warning(ignored: list[str]) -> str:
    """The one warning line for the RLinf-only keys a config sets."""
    return (
        f"ignoring RLinf settings rlinf does not implement: {', '.join(ignored)} "
        "(accepted so that RLinf's YAML files load; they have no effect here)"
    )

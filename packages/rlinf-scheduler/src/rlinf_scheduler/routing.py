"""Moved to :mod:`rlinf_core.routing` (pure Python, no scheduler needed); these names stay
importable from here for existing callers."""

from __future__ import annotations

from rlinf_core.routing import (
    Shard,
    batch_length,
    merge_shards,
    receive_shards,
    route_plan,
    send_shards,
    shard_key,
    slice_batch,
    split_batch,
)

__all__ = [
    "Shard",
    "batch_length",
    "merge_shards",
    "receive_shards",
    "route_plan",
    "send_shards",
    "shard_key",
    "slice_batch",
    "split_batch",
]

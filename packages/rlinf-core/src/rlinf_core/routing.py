"""Routing batches between groups of different sizes (M senders -> N receivers).

A global batch of ``batch_size`` items is held by ``src_size`` sender ranks in contiguous,
equal slices (rank ``m`` holds global items ``[m*B/M, (m+1)*B/M)``) and is wanted by
``dst_size`` receiver ranks in contiguous, equal slices (rank ``n`` wants ``[n*B/N, (n+1)*B/N)``).
Every sender sends each receiver the overlap of the two slices, so shards are contiguous, never
reordered, and named by a stable key (:func:`shard_key`). The receiver concatenates its shards in
sender order.

Example, batch 12 from 2 env ranks to 3 rollout ranks::

    env0 holds 0-5:  4 items (0-3) -> rollout0, 2 items (4-5) -> rollout1
    env1 holds 6-11: 2 items (6-7) -> rollout1, 4 items (8-11) -> rollout2

and the reverse direction (3 -> 2) mirrors it: rollout1 sends 2 items to env0 and 2 to env1.

Payloads: a *batch* is a numpy array, a torch tensor or a list (sliced along its first axis), or a
dict / tuple / namedtuple / dataclass of batches, nested to any depth. Every leaf must have the
same length. Pure Python: numpy and torch are used only if the payload holds them; no Ray.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

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


@dataclasses.dataclass(frozen=True)
class Shard:
    """One contiguous piece of the global batch going from ``src`` to ``dst``.

    ``start``/``stop`` are global item indices; ``src_offset`` and ``dst_offset`` are where the
    piece begins inside the sender's and the receiver's local batch.
    """

    src: int
    dst: int
    start: int
    stop: int
    src_offset: int
    dst_offset: int

    @property
    def size(self) -> int:
        return self.stop - self.start


def _check_sizes(batch_size: int, src_size: int, dst_size: int) -> None:
    for name, value in (("batch_size", batch_size), ("src_size", src_size), ("dst_size", dst_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    bad = [
        f"{side} group size {n}"
        for side, n in (("sender", src_size), ("receiver", dst_size))
        if batch_size % n
    ]
    if bad:
        raise ValueError(
            f"batch_size {batch_size} is not divisible by the {' and the '.join(bad)}; "
            f"use a multiple of lcm({src_size}, {dst_size})"
        )


def route_plan(batch_size: int, src_size: int, dst_size: int) -> list[Shard]:
    """Every shard of a ``src_size`` -> ``dst_size`` routing of a global batch, by sender then receiver.

    Raises ``ValueError`` unless ``batch_size`` is divisible by both group sizes.
    """
    _check_sizes(batch_size, src_size, dst_size)
    per_src = batch_size // src_size
    per_dst = batch_size // dst_size
    shards = []
    for src in range(src_size):
        lo, hi = src * per_src, (src + 1) * per_src
        for dst in range(lo // per_dst, (hi - 1) // per_dst + 1):
            start = max(lo, dst * per_dst)
            stop = min(hi, (dst + 1) * per_dst)
            if stop > start:
                shards.append(Shard(src, dst, start, stop, start - lo, start - dst * per_dst))
    return shards


def shard_key(tag: str, src: int, dst: int) -> str:
    """The channel key of the shards from sender ``src`` to receiver ``dst`` (``"obs:0->1"``)."""
    return f"{tag}:{src}->{dst}"


# -- batches ----------------------------------------------------------------------------------------


def _is_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _is_array(x: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def _leaves(batch: Any, path: str) -> list[tuple[str, Any]]:
    if isinstance(batch, Mapping):
        out = []
        for k, v in batch.items():
            out += _leaves(v, f"{path}.{k}" if path else str(k))
        return out
    if isinstance(batch, tuple):
        out = []
        for i, v in enumerate(batch):
            out += _leaves(v, f"{path}[{i}]")
        return out
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        out = []
        for f in dataclasses.fields(batch):
            out += _leaves(getattr(batch, f.name), f"{path}.{f.name}" if path else f.name)
        return out
    return [(path or "<batch>", batch)]


def _leaf_len(path: str, leaf: Any) -> int:
    if _is_array(leaf) or _is_tensor(leaf):
        if leaf.ndim == 0:
            raise ValueError(f"batch leaf {path} is a 0-d array/tensor; it has no batch axis to split")
        return int(leaf.shape[0])
    if isinstance(leaf, list):
        return len(leaf)
    raise ValueError(
        f"batch leaf {path} is a {type(leaf).__name__}; leaves must be numpy arrays, torch tensors or lists "
        "(inside dicts, tuples or dataclasses)"
    )


def batch_length(batch: Any) -> int:
    """The number of items of ``batch`` (the common first-axis length of its leaves)."""
    leaves = _leaves(batch, "")
    if not leaves:
        raise ValueError("the batch holds no arrays, tensors or lists")
    lengths = {path: _leaf_len(path, leaf) for path, leaf in leaves}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{p}={n}" for p, n in lengths.items())
        raise ValueError(
            f"batch leaves have different lengths ({detail}); every leaf must hold one row per item"
        )
    return next(iter(lengths.values()))


def _map(batch: Any, fn: Any) -> Any:
    if isinstance(batch, Mapping):
        mapped = {k: _map(v, fn) for k, v in batch.items()}
        return mapped if type(batch) is dict else type(batch)(mapped)
    if isinstance(batch, tuple):
        items = [_map(v, fn) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(
            batch, **{f.name: _map(getattr(batch, f.name), fn) for f in dataclasses.fields(batch) if f.init}
        )
    return fn(batch)


def slice_batch(batch: Any, start: int, stop: int) -> Any:
    """Items ``start:stop`` of every leaf (views for arrays and tensors, no copy)."""
    return _map(batch, lambda leaf: leaf[start:stop])


def split_batch(batch: Any, src_rank: int, src_size: int, dst_size: int) -> dict[int, Any]:
    """Split sender ``src_rank``'s local batch into ``{receiver rank: shard}`` (contiguous views).

    The global batch is ``batch_length(batch) * src_size`` items; it must be divisible by
    ``dst_size``.
    """
    if not 0 <= src_rank < src_size:
        raise ValueError(f"src_rank {src_rank} is outside the sender group 0..{src_size - 1}")
    local = batch_length(batch)
    out = {}
    for shard in route_plan(local * src_size, src_size, dst_size):
        if shard.src == src_rank:
            out[shard.dst] = slice_batch(batch, shard.src_offset, shard.src_offset + shard.size)
    return out


def _concat(parts: list[Any]) -> Any:
    first = parts[0]
    if _is_tensor(first):
        import torch

        return torch.cat(parts, dim=0)
    if _is_array(first):
        import numpy as np

        return np.concatenate(parts, axis=0)
    if isinstance(first, list):
        return [x for p in parts for x in p]
    raise ValueError(f"cannot merge leaves of type {type(first).__name__}")


def _merge(parts: list[Any], path: str) -> Any:
    first = parts[0]
    for p in parts[1:]:
        if type(p) is not type(first):
            raise ValueError(
                f"shards disagree at {path or '<batch>'}: {type(first).__name__} vs {type(p).__name__}"
            )
    if isinstance(first, Mapping):
        keys = list(first.keys())
        for p in parts[1:]:
            if list(p.keys()) != keys:
                raise ValueError(f"shards disagree at {path or '<batch>'}: keys {keys} vs {list(p.keys())}")
        merged = {k: _merge([p[k] for p in parts], f"{path}.{k}" if path else str(k)) for k in keys}
        return merged if type(first) is dict else type(first)(merged)
    if isinstance(first, tuple):
        items = [_merge([p[i] for p in parts], f"{path}[{i}]") for i in range(len(first))]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        fields = [f.name for f in dataclasses.fields(first) if f.init]
        return dataclasses.replace(
            first, **{n: _merge([getattr(p, n) for p in parts], f"{path}.{n}" if path else n) for n in fields}
        )
    return _concat(parts)


def merge_shards(shards: Mapping[int, Any] | Sequence[Any]) -> Any:
    """Concatenate received shards in sender order (a ``{src rank: shard}`` mapping or a list
    already in sender order), recursing into dicts, tuples and dataclasses."""
    parts = [shards[k] for k in sorted(shards)] if isinstance(shards, Mapping) else list(shards)
    if not parts:
        raise ValueError("no shards to merge")
    return _merge(parts, "")


# -- over a channel ------------------------------------------------------------------------------


def send_shards(
    channel: Any,
    batch: Any,
    src_rank: int,
    src_size: int,
    dst_size: int,
    *,
    tag: str = "batch",
    **put_kw: Any,
) -> dict[int, Hashable]:
    """Split ``batch`` and ``put`` each shard on ``channel`` under :func:`shard_key`; returns
    ``{receiver rank: key}``. ``put_kw`` (``timeout``...) goes to every ``put``."""
    keys = {}
    for dst, shard in split_batch(batch, src_rank, src_size, dst_size).items():
        key = shard_key(tag, src_rank, dst)
        channel.put(shard, key, **put_kw)
        keys[dst] = key
    return keys


def receive_shards(
    channel: Any,
    dst_rank: int,
    src_size: int,
    dst_size: int,
    batch_size: int,
    *,
    tag: str = "batch",
    timeout: float | None = None,
) -> Any:
    """``get`` receiver ``dst_rank``'s shards of a global batch of ``batch_size`` from every
    sender that holds part of its slice, and merge them in sender order."""
    if not 0 <= dst_rank < dst_size:
        raise ValueError(f"dst_rank {dst_rank} is outside the receiver group 0..{dst_size - 1}")
    parts = {}
    for shard in route_plan(batch_size, src_size, dst_size):
        if shard.dst == dst_rank:
            parts[shard.src] = channel.get(shard_key(tag, shard.src, dst_rank), timeout=timeout)
    return merge_shards(parts)

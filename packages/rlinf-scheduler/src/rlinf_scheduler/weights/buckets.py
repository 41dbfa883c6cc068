"""Flat, dtype-grouped buckets: how a state dict crosses a collective without a full extra copy.

:func:`layout_of` lays the tensors of a state dict out in one flat space per dtype, in the state
dict's order (a tensor's elements at ``[offset, offset + numel)`` of its dtype's space), and cuts
each space into buckets of at most ``bucket_bytes``. A tensor may straddle two buckets.

* The publisher (:func:`send_buckets`) sends a bucket that lies inside one contiguous tensor on
  the collective's device straight from that tensor (no copy). Any other bucket it fills into a
  bucket-sized staging buffer on that device (a CUDA tensor is copied to the host one bucket at
  a time for Gloo; a host tensor to the GPU for NCCL), broadcasts it and reuses the buffer: two
  staging buffers alternate, so the copy of one bucket overlaps the broadcast of the previous.
  Extra memory: at most two buckets, whatever the model's size.
* A consumer (:func:`alloc_flats`, :func:`recv_buckets`) allocates one flat tensor per dtype on
  its device and receives every bucket straight into its slice of it; the state dict it gets
  (:func:`views`) is views into those flats, so receiving copies nothing either.

Buckets travel as ``uint8`` views, so every dtype (bf16, fp8, bool...) goes through Gloo and
NCCL alike. Values of the state dict that are not tensors travel in the layout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "Layout",
    "alloc_flats",
    "layout_of",
    "recv_buckets",
    "send_buckets",
    "views",
]

DEFAULT_BUCKET_BYTES = 64 << 20
"""64 MiB: large enough that a broadcast's fixed cost is small, small enough to stage twice."""


@dataclass(frozen=True)
class Entry:
    """One tensor: its name, dtype (``torch.float32``...), shape and offset in its dtype's space."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    numel: int


@dataclass(frozen=True)
class Layout:
    """Where every tensor of a state dict lies in the flat spaces, and the buckets.

    ``groups``: ``(dtype, numel, itemsize)`` per flat space, in order; ``extras``: the values
    that are not tensors (sent as they are)."""

    entries: tuple[Entry, ...]
    groups: tuple[tuple[str, int, int], ...]
    bucket_bytes: int
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(numel * size for _, numel, size in self.groups)

    def buckets(self) -> Iterator[tuple[int, int, int]]:
        """``(group index, start, stop)`` element ranges of every bucket, in send order."""
        for g, (_, numel, size) in enumerate(self.groups):
            step = max(1, self.bucket_bytes // size)
            for start in range(0, numel, step):
                yield g, start, min(numel, start + step)


def _dtype(torch: Any, name: str) -> Any:
    return getattr(torch, name.removeprefix("torch."))


def layout_of(state_dict: Mapping[str, Any], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> Layout:
    """The :class:`Layout` of ``state_dict`` (tensors grouped by dtype, in the dict's order)."""
    import torch

    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    totals: dict[str, int] = {}
    sizes: dict[str, int] = {}
    entries: list[Entry] = []
    extras: dict[str, Any] = {}
    for name, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            extras[name] = value
            continue
        dtype = str(value.dtype)
        offset = totals.get(dtype, 0)
        entries.append(Entry(name, dtype, tuple(value.shape), offset, value.numel()))
        totals[dtype] = offset + value.numel()
        sizes[dtype] = value.element_size()
    groups = tuple((d, n, sizes[d]) for d, n in totals.items())
    return Layout(tuple(entries), groups, int(bucket_bytes), extras)


def _chunks(layout: Layout, g: int, start: int, stop: int) -> Iterator[tuple[Entry, int, int]]:
    """``(entry, first element, last element + 1)`` of every tensor part in a bucket."""
    dtype = layout.groups[g][0]
    for e in layout.entries:
        if e.dtype != dtype or e.offset + e.numel <= start or e.offset >= stop:
            continue
        yield e, max(start, e.offset) - e.offset, min(stop, e.offset + e.numel) - e.offset


def send_buckets(
    layout: Layout,
    state_dict: Mapping[str, Any],
    device: Any,
    broadcast: Callable[[Any], Any],
    wait: Callable[[Any], None],
) -> None:
    """Broadcast every bucket of ``state_dict`` (the publisher's side).

    ``broadcast(uint8 tensor)`` starts a broadcast and returns its handle; ``wait(handle)``
    waits for it (and may raise). Staging buffers live on ``device``."""
    import torch

    if not layout.groups:
        return
    device = torch.device(device)
    largest = max(numel * size for _, numel, size in layout.groups)
    staging: list[Any] = [None, None]  # allocated when first needed
    pending: list[Any] = [None, None]
    direct: list[Any] = []
    slot = 0
    for g, start, stop in layout.buckets():
        dtype_name, _, size = layout.groups[g]
        chunks = list(_chunks(layout, g, start, stop))
        if len(chunks) == 1:  # one tensor fills the bucket: send from it if it is where the collective runs
            e, a, b = chunks[0]
            src = state_dict[e.name].detach()
            if src.is_contiguous() and src.device == device:
                direct.append(broadcast(src.reshape(-1)[a:b].view(torch.uint8)))
                continue
        if pending[slot] is not None:
            wait(pending[slot])  # this buffer's previous broadcast must be done before refilling it
            pending[slot] = None
        if staging[slot] is None:
            staging[slot] = torch.empty(min(layout.bucket_bytes, largest), dtype=torch.uint8, device=device)
        buf = staging[slot][: (stop - start) * size].view(_dtype(torch, dtype_name))
        for e, a, b in chunks:
            src = state_dict[e.name].detach().reshape(-1)[a:b]
            buf[e.offset + a - start : e.offset + b - start].copy_(src, non_blocking=False)
        pending[slot] = broadcast(buf.view(torch.uint8))
        slot = 1 - slot
    for handle in [*direct, *pending]:
        if handle is not None:
            wait(handle)


def alloc_flats(layout: Layout, device: Any) -> list[Any]:
    """One flat tensor per dtype group, on ``device`` (uninitialised: every byte is received)."""
    import torch

    return [torch.empty(numel, dtype=_dtype(torch, d), device=device) for d, numel, _ in layout.groups]


def recv_buckets(layout: Layout, flats: list[Any], broadcast: Callable[[Any], Any]) -> list[Any]:
    """Start receiving every bucket into its slice of ``flats``; returns the handles, in order."""
    import torch

    return [broadcast(flats[g][start:stop].view(torch.uint8)) for g, start, stop in layout.buckets()]


def views(layout: Layout, flats: list[Any]) -> dict[str, Any]:
    """The state dict: each tensor a view into its dtype's flat tensor, plus the extras, in the
    publisher's order of names."""
    index = {d: i for i, (d, _, _) in enumerate(layout.groups)}
    out: dict[str, Any] = {}
    for e in layout.entries:
        flat = flats[index[e.dtype]]
        out[e.name] = flat[e.offset : e.offset + e.numel].view(e.shape)
    out.update(layout.extras)
    return out

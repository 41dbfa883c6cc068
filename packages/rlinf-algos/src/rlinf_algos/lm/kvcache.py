"""A key/value cache that writes each generated token in place.

transformers' ``DynamicLayer`` concatenates every step's keys and values onto the cache, which
copies the whole cache for every token: on the CPU that was 12% of :func:`rlinf_algos.lm.hf.generate`
for the examples' models (128 rows, 43-token prompts, 40 new tokens, one thread). A rollout knows
its longest sequence before it starts, so :class:`PreallocatedLayer` allocates that once and
hands attention a view of the filled part. Shapes follow transformers: ``[B, H, T, D]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers.cache_utils import DynamicCache, DynamicLayer

__all__ = ["PreallocatedLayer", "preallocated_cache"]


class PreallocatedLayer(DynamicLayer):
    """A full-attention layer's cache in buffers of ``capacity`` positions.

    ``update`` copies the new positions into the buffers and returns views of the first
    ``length`` positions (``keys`` / ``values``, as ``DynamicLayer`` exposes them). A sequence
    that outgrows ``capacity`` doubles the buffers (one copy), so a wrong estimate costs time,
    never correctness.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.length = 0
        self._k: Tensor | None = None
        self._v: Tensor | None = None

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, h, _, d = key_states.shape
        self._k = key_states.new_empty(b, h, self.capacity, d)
        self._v = value_states.new_empty(b, h, self.capacity, value_states.shape[-1])
        self.length = 0
        self.is_initialized = True

    def _views(self) -> None:
        assert self._k is not None and self._v is not None
        self.keys = self._k[:, :, : self.length]
        self.values = self._v[:, :, : self.length]

    def update(
        self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any
    ) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self._k is not None and self._v is not None
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            self.capacity = max(end, 2 * self.capacity)
            k, v = self._k, self._v
            self._k = k.new_empty(*k.shape[:2], self.capacity, k.shape[-1])
            self._v = v.new_empty(*v.shape[:2], self.capacity, v.shape[-1])
            self._k[:, :, : self.length] = k[:, :, : self.length]
            self._v[:, :, : self.length] = v[:, :, : self.length]
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.length = end
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def reset(self) -> None:
        self._k = self._v = None
        self.length = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of tokens to remove, got {tokens_to_remove}")
        if self.is_initialized and tokens_to_remove:
            self.length = max(0, self.length + tokens_to_remove)
            self._views()

    def batch_select_indices(self, indices: Tensor) -> None:
        if self.is_initialized:
            assert self._k is not None and self._v is not None
            self._k, self._v = self._k[indices], self._v[indices]
            self._views()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.is_initialized:
            self.batch_select_indices(beam_idx.to(self.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            assert self._k is not None and self._v is not None
            self._k = self._k.repeat_interleave(repeats, dim=0)
            self._v = self._v.repeat_interleave(repeats, dim=0)
            self._views()


def preallocated_cache(model: Any, capacity: int) -> DynamicCache:
    """A ``DynamicCache`` for ``model`` whose full-attention layers are
    :class:`PreallocatedLayer` s of ``capacity`` positions (sliding-window and other special
    layers stay as transformers builds them)."""
    cache = DynamicCache(config=getattr(model, "config", None))
    layers = getattr(cache, "layers", None)
    if layers:
        cache.layers = [
            PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in layers
        ]
    return cache

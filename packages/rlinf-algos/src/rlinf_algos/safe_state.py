"""Nested state (checkpoints, policies, optimizer and RNG state) in one safetensors file, no pickle.

A run directory is shared: a colleague's checkpoint, a policy from a paper's release, a run copied
from a cluster. Loading a pickle (``torch.save`` / ``torch.load(weights_only=False)``) runs whatever
code the file names, so rlinf writes and reads state only as safetensors: the tensors are stored as
the format's tensors, everything else (numbers, strings, lists, the shape of the tree) as JSON in
the file's metadata. Reading either can build only tensors and plain data.

The tree may hold:

- ``torch.Tensor`` (any dtype safetensors knows, bfloat16 included; CUDA tensors are copied to the
  CPU, so a CPU-only machine reads a checkpoint a GPU learner wrote) and ``numpy.ndarray``
  (restored as ``numpy``);
- ``dict`` with any JSON-scalar keys (an optimizer's ``state`` is keyed by ints), ``list`` and
  ``tuple`` (restored as tuples: RNG states are tuples), ``str``, ``int``, ``float`` (NaN and
  infinities included), ``bool``, ``None``; numpy scalars are stored as Python scalars.

Anything else is refused when saving, naming the path in the tree.

Example::

    save_state({"model": model.state_dict(), "optim": opt.state_dict(), "step": 7}, path)
    state = load_state(path)   # the same tree; tensors on the CPU
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlinf_core.errors import RlinfError
from rlinf_core.io import atomic_path

__all__ = ["FORMAT", "StateFileError", "is_state_file", "load_state", "save_state"]

FORMAT = "rlinf-state/1"
"""The ``format`` entry of the safetensors metadata of every file :func:`save_state` writes."""

_TREE_KEY = "rlinf_tree"
_MAGIC_KEYS = ("__t__", "__np__", "__tuple__", "__dict__")


class StateFileError(RlinfError):
    """A state file that cannot be read: damaged, cut short, or not written by :func:`save_state`."""


def _encode(obj: Any, where: str, tensors: dict[str, Any]) -> Any:
    import numpy as np
    import torch

    if isinstance(obj, torch.Tensor):
        key = str(len(tensors))
        tensors[key] = obj.detach().to("cpu")
        return {"__t__": key}
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError(f"{where}: a numpy array of Python objects cannot be stored without pickle")
        key = str(len(tensors))
        array = np.ascontiguousarray(obj)
        if not array.flags.writeable:  # a read-only view (an env's buffer): torch would warn
            array = array.copy()
        tensors[key] = torch.from_numpy(array)
        return {"__np__": key}
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, f"{where}[{i}]", tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, f"{where}[{i}]", tensors) for i, v in enumerate(obj)]
    if isinstance(obj, Mapping):
        plain = all(isinstance(k, str) and k not in _MAGIC_KEYS for k in obj)
        if plain:
            return {k: _encode(v, f"{where}.{k}", tensors) for k, v in obj.items()}
        items = []
        for k, v in obj.items():
            if not (k is None or isinstance(k, (bool, int, float, str))):
                raise TypeError(f"{where}: a dict key of type {type(k).__name__} cannot be stored")
            items.append([k, _encode(v, f"{where}[{k!r}]", tensors)])
        return {"__dict__": items}
    raise TypeError(
        f"{where}: a {type(obj).__module__}.{type(obj).__name__} cannot be stored without pickle "
        "(tensors, numpy arrays, dicts, lists, tuples, str, int, float, bool and None can)"
    )


def _decode(obj: Any, tensors: Mapping[str, Any]) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if isinstance(obj, dict):
        if len(obj) == 1:
            ((tag, val),) = obj.items()
            if tag == "__t__":
                return tensors[val]
            if tag == "__np__":
                return tensors[val].numpy()
            if tag == "__tuple__":
                return tuple(_decode(v, tensors) for v in val)
            if tag == "__dict__":
                return {k: _decode(v, tensors) for k, v in val}
        return {k: _decode(v, tensors) for k, v in obj.items()}
    return obj


def _dedupe_storage(tensors: dict[str, Any]) -> dict[str, Any]:
    """Contiguous tensors that share no memory (safetensors refuses views of one storage)."""
    seen: set[int] = set()
    out = {}
    for key, t in tensors.items():
        t = t.contiguous()
        ptr = t.untyped_storage().data_ptr() if t.numel() else None
        if ptr is not None and ptr in seen:
            t = t.clone()
        elif ptr is not None:
            seen.add(ptr)
        if t.numel() and (t.storage_offset() or t.untyped_storage().nbytes() != t.numel() * t.element_size()):
            t = t.clone()  # a slice of a bigger storage: store just its own bytes
        out[key] = t
    return out


def save_state(
    state: Mapping[str, Any], path: str | os.PathLike[str], *, meta: Mapping[str, str] | None = None
) -> Path:
    """Write ``state`` to ``path`` as one safetensors file, atomically (temp file, fsync, rename).

    Parameters:
        state: the tree to store (see the module docstring for what it may hold).
        path: the target file; missing parent folders are created.
        meta: extra string entries for the safetensors metadata (readable without loading).

    Raises:
        TypeError: a value that cannot be stored without pickle, naming where it is in the tree.
    """
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {}
    tree = _encode(dict(state), "state", tensors)
    metadata = {"format": FORMAT, _TREE_KEY: json.dumps(tree, allow_nan=True), **dict(meta or {})}
    target = Path(path)
    with atomic_path(target) as tmp:
        save_file(_dedupe_storage(tensors), tmp, metadata=metadata)
    return target


def is_state_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a safetensors file written by :func:`save_state` (reads the header only)."""
    try:
        return _metadata(Path(path)).get("format") == FORMAT
    except (StateFileError, OSError):
        return False


def _metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except FileNotFoundError:
        raise
    except Exception as err:  # safetensors raises its own error types for a bad header
        raise StateFileError(f"{path} is not a readable safetensors file ({str(err)[:160]})") from None


def load_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tree :func:`save_state` wrote to ``path``, tensors on the CPU.

    Raises:
        FileNotFoundError: no file at ``path``.
        StateFileError: a damaged file, one cut short, or a safetensors file not written by rlinf.
    """
    from safetensors.torch import load_file

    p = Path(path)
    meta = _metadata(p)
    if meta.get("format") != FORMAT or _TREE_KEY not in meta:
        raise StateFileError(
            f"{p} is a safetensors file but not an rlinf state file (no {FORMAT!r} metadata)"
        )
    try:
        tensors = load_file(str(p), device="cpu")
        tree = json.loads(meta[_TREE_KEY])
        return _decode(tree, tensors)
    except Exception as err:
        raise StateFileError(f"{p} is damaged ({type(err).__name__}: {str(err)[:160]})") from None

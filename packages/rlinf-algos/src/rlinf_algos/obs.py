"""Observations as trees: one array, or a flat dict of arrays (``image``, ``state``, ``instruction``).

Every stage of an embodied run (env workers, links, rollout workers, channels, learners, the
replay buffer) moves observations as a *tree*: either a single array (a flat state vector, the
MLP policies' input) or a ``dict`` of arrays sharing their leading (batch) dimensions. Images stay
``uint8`` all the way to the policy, which converts them when it needs floats; an instruction is
a string array until the policy tokenises it (:meth:`prepare` of the VLA policy), after which
every leaf is numeric.

The helpers here apply one operation to every leaf, so the code that moves observations is the
same for both forms: :func:`tree_map`, :func:`take` (index the leading dimensions),
:func:`alloc` (buffers with extra leading dimensions), :func:`put`, :func:`concat`,
:func:`flatten_lead`, :func:`to_torch`, :func:`to_device`, :func:`batch_size`; :func:`describe_space` records a
gymnasium observation space as plain data for a policy spec; :func:`vector_part` is the float
vector whose running moments normalise a policy's input (the whole array, or ``state``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "Tree",
    "alloc",
    "batch_size",
    "concat",
    "describe_space",
    "flatten_lead",
    "is_dict",
    "put",
    "take",
    "to_device",
    "to_numpy",
    "to_torch",
    "tree_map",
    "vector_part",
]

Tree = Any
"""An array (``numpy`` or ``torch``) or a ``dict`` of them."""


def is_dict(tree: Tree) -> bool:
    return isinstance(tree, Mapping)


def tree_map(fn: Callable[..., Any], tree: Tree, *rest: Tree) -> Tree:
    """``fn`` applied leaf by leaf (over ``tree`` and the same keys of ``rest``)."""
    if is_dict(tree):
        return {k: fn(v, *(r[k] for r in rest)) for k, v in tree.items()}
    return fn(tree, *rest)


def take(tree: Tree, idx: Any) -> Tree:
    """``tree[idx]`` on every leaf (``idx`` indexes the leading dimensions)."""
    return tree_map(lambda x: x[idx], tree)


def put(buf: Tree, idx: Any, value: Tree) -> None:
    """``buf[idx] = value`` on every leaf."""
    if is_dict(buf):
        for k, v in buf.items():
            v[idx] = value[k]
    else:
        buf[idx] = value


def alloc(example: Tree, lead: Sequence[int], skip: int = 1) -> Tree:
    """Numpy buffers shaped ``(*lead, *leaf.shape[skip:])`` with each leaf's dtype: ``example``
    is one batch (``skip=1`` drops its batch dimension)."""

    def make(x: Any) -> np.ndarray:
        x = np.asarray(x)
        return np.empty((*lead, *x.shape[skip:]), x.dtype)

    return tree_map(make, example)


def concat(trees: Sequence[Tree], axis: int = 0) -> Tree:
    """Leaves of ``trees`` concatenated along ``axis`` (numpy)."""
    first = trees[0]
    if is_dict(first):
        return {k: np.concatenate([t[k] for t in trees], axis) for k in first}
    return np.concatenate(trees, axis)


def flatten_lead(tree: Tree, n: int) -> Tree:
    """Merge the first ``n`` dimensions of every leaf into one (numpy or torch)."""

    def flat(x: Any) -> Any:
        return x.reshape(-1, *x.shape[n:])

    return tree_map(flat, tree)


def batch_size(tree: Tree) -> int:
    """The leading dimension of the leaves."""
    leaf = next(iter(tree.values())) if is_dict(tree) else tree
    return int(leaf.shape[0])


def to_torch(tree: Tree) -> Tree:
    """Numpy leaves as torch tensors sharing their memory (numeric leaves only)."""
    import torch

    return tree_map(
        lambda x: x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x)), tree
    )


def to_device(tree: Tree, device: Any) -> Tree:
    """Torch leaves on ``device`` (the same tensors where they are there already, so on the CPU
    this costs nothing); other leaves as they are. How observations cross from the host buffers
    of a collection loop or a batch to a policy on a GPU."""
    import torch

    dev = torch.device(device)

    def move(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.device == dev:
            return x
        return x.to(dev, non_blocking=dev.type != "cpu")  # to the host: wait for the copy

    return tree_map(move, tree)


def to_numpy(tree: Tree) -> Tree:
    """Torch leaves as numpy arrays (detached, on the CPU)."""

    def conv(x: Any) -> Any:
        return x.detach().cpu().numpy() if hasattr(x, "detach") else x

    return tree_map(conv, tree)


def vector_part(tree: Tree) -> np.ndarray | None:
    """The float vector whose running moments normalise a policy's input: the array itself, or
    the ``state`` leaf of a dict (``None`` when it has none)."""
    if is_dict(tree):
        return tree.get("state")
    return tree


def describe_space(space: Any) -> dict[str, Any]:
    """A gymnasium observation space as plain data (a policy spec carries it to every worker):
    ``{"kind": "box", "shape", "dtype"}`` for a ``Box``, ``{"kind": "text", "max_length"}`` for
    ``Text``, and ``{"kind": "dict", "keys": {name: ...}}`` for a flat ``Dict`` of those.

    Raises ``ValueError`` naming the part that is neither (a nested dict, a discrete space)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return {"kind": "box", "shape": [int(d) for d in space.shape], "dtype": np.dtype(space.dtype).name}
    if isinstance(space, spaces.Text):
        return {"kind": "text", "max_length": int(space.max_length)}
    if isinstance(space, spaces.Dict):
        keys: dict[str, Any] = {}
        for name, sub in space.spaces.items():
            if isinstance(sub, spaces.Dict):
                raise ValueError(
                    f"observation {name!r} is a nested Dict; rlinf takes a flat dict of Box and Text"
                )
            keys[name] = describe_space(sub)
        return {"kind": "dict", "keys": keys}
    raise ValueError(f"observation space {space} is not a Box, Text or a flat Dict of them")

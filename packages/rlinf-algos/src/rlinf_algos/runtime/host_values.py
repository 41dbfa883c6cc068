"""What a worker returns crosses a process boundary as CPU data (issue 52, item 3).

A CUDA tensor in a worker's return value is pickled with its device: a CPU-only head node
cannot unpickle it, and on one machine the driver makes a CUDA context and a second copy of
(say) the Adam state on the actor's GPU. The role workers pass every return value through
:func:`to_cpu`; tests check return values with :func:`off_host_tensors`, which names any tensor
not on the CPU (CUDA or any other device, ``meta`` included).

No torch import at module level: a worker without torch (a reward or tool role) returns plain
data, which both functions walk without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["off_host_tensors", "to_cpu"]


def _is_tensor(value: Any) -> bool:
    return (
        type(value).__module__.startswith("torch") and hasattr(value, "device") and hasattr(value, "detach")
    )


def to_cpu(value: Any) -> Any:
    """``value`` with every tensor not on the CPU copied there (detached), walking dicts, lists
    and tuples (their types kept, a named tuple's too); CPU tensors and everything else are
    returned as they are (no copy)."""
    if _is_tensor(value):
        return value if value.device.type == "cpu" else value.detach().to("cpu")
    if isinstance(value, Mapping):
        items = {k: to_cpu(v) for k, v in value.items()}
        if all(items[k] is value[k] for k in items):
            return value
        try:
            return type(value)(items)
        except TypeError:
            return items
    if isinstance(value, list | tuple):
        items_l = [to_cpu(v) for v in value]
        if all(a is b for a, b in zip(items_l, value, strict=True)):
            return value
        if isinstance(value, list):
            return items_l
        return type(value)(*items_l) if hasattr(value, "_fields") else type(value)(items_l)
    return value


def off_host_tensors(value: Any, path: str = "result") -> list[str]:
    """``"PATH on DEVICE"`` for every tensor in ``value`` that is not on the CPU (dicts, lists
    and tuples walked; ``path`` names the root): empty when ``value`` may cross a process
    boundary to a machine without a GPU."""
    if _is_tensor(value):
        return [] if value.device.type == "cpu" else [f"{path} on {value.device}"]
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            out += off_host_tensors(v, f"{path}[{k!r}]")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            out += off_host_tensors(v, f"{path}[{i}]")
    return out

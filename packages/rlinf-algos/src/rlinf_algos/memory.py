"""What one role of a run needs in memory per process, and the plans that cannot fit refused
(``rlinf train --dry-run``).

An algorithm class estimates its roles with a class method ``plan_memory(run, devices,
gpu_memory_gib)`` returning a list of :class:`RoleMemory` (or ``None`` when it has no estimate);
config preparation asks the chosen algorithm's class, so this module knows no family. The
language-model estimate is :mod:`rlinf_algos.lm.memory`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlinf_core.errors import ConfigError

__all__ = [
    "GIB",
    "RoleMemory",
    "check_fits",
    "format_memory",
    "gib",
    "place_roles",
    "planned_memory",
    "this_gpu_memory",
]

GIB = 1024**3
ACTIVATION_HEADROOM = 1.1
"""Allocator fragmentation and CUDA context: the sum is multiplied by this before comparing."""
CUDA_CONTEXT_BYTES = 512 * 1024**2
"""What the CUDA context and kernels take on a GPU before the first tensor."""


@dataclass
class RoleMemory:
    """One role's estimate per process (bytes). ``available``: what its placement gives a
    process (``None``: unknown); ``knobs``: what to change when it does not fit."""

    role: str
    ranks: int = 1
    weights: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0
    available: int | None = None
    where: str = ""
    knobs: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def needed(self) -> int:
        """The total with headroom and, on a GPU, the CUDA context."""
        ctx = CUDA_CONTEXT_BYTES if self.where.startswith("GPU") else 0
        return int(self.total * ACTIVATION_HEADROOM) + ctx

    @property
    def fits(self) -> bool | None:
        return None if self.available is None else self.needed <= self.available


# -- against the placement -----------------------------------------------------------------------
def this_gpu_memory() -> int | None:
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return int(torch.cuda.get_device_properties(0).total_memory)
    except Exception:  # a broken driver: unknown, as without a GPU
        return None
    return None


def place_roles(
    roles: list[RoleMemory], devices: Mapping[str, Sequence[str]], gpu_memory_gib: float | None
) -> list[RoleMemory]:
    """``roles`` each with what its placement gives a process: ``gpu_memory_gib`` (else this
    machine's GPU) for a role whose processes are on GPUs (``devices``:
    :func:`rlinf_algos.devices.plan_devices`), unknown otherwise."""
    gpu = int(gpu_memory_gib * GIB) if gpu_memory_gib is not None else None
    for role in roles:
        placed = devices.get(role.role) or ()
        on_gpu = bool(placed) and all(d != "cpu" for d in placed)
        if on_gpu:
            role.available = gpu if gpu is not None else this_gpu_memory()
            role.where = "GPU" + ("" if role.available is not None else " (memory unknown: --gpu-memory GIB)")
        else:
            role.where = "CPU (host memory, not checked)" if placed else "in process (not checked)"
    return roles


def planned_memory(
    algorithm_class: Any,
    run: Mapping[str, Any],
    devices: Mapping[str, Sequence[str]],
    gpu_memory_gib: float | None,
) -> list[RoleMemory] | None:
    """What ``algorithm_class`` estimates for ``run`` (its ``plan_memory`` class method), or
    ``None`` when it has none."""
    plan = getattr(algorithm_class, "plan_memory", None)
    return plan(run, devices, gpu_memory_gib) if callable(plan) else None


def gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 1024**2:.1f} MiB"


def format_memory(roles: Sequence[RoleMemory]) -> list[str]:
    """The ``# memory`` block of ``--dry-run``, one line per role (and its notes)."""
    lines = ["# memory per process (estimate: weights + gradients + optimizer + activations)"]
    for r in roles:
        avail = (
            f" of {gib(r.available)} ({'fits' if r.fits else 'does NOT fit'})"
            if r.available is not None
            else ""
        )
        lines.append(
            f"#   {r.role} x{r.ranks}: weights {gib(r.weights)}, gradients {gib(r.gradients)}, "
            f"optimizer {gib(r.optimizer)}, activations {gib(r.activations)} = {gib(r.total)}; "
            f"needs ~{gib(r.needed)} on {r.where or '?'}{avail}"
        )
        lines.extend(f"#     {note}" for note in r.notes)
    return lines


def check_fits(roles: Sequence[RoleMemory]) -> None:
    """Raise :class:`ConfigError` (one line) for the first role that cannot fit, naming it and
    the knobs to change."""
    for r in roles:
        if r.fits is False:
            raise ConfigError(
                f"the {r.role} needs about {gib(r.needed)} per process ({gib(r.weights)} weights, "
                f"{gib(r.gradients)} gradients, {gib(r.optimizer)} optimizer, {gib(r.activations)} "
                f"activations) but its placement gives {gib(r.available or 0)}: lower or change "
                f"{', '.join(r.knobs)}",
                f"cluster.component_placement.{r.role}",
            )

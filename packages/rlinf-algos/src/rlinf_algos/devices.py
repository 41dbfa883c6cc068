"""Which device each role computes on: ``runner.device`` resolved in a process (``cpu``,
``cuda``, ``cuda:N``, ``auto``) against the GPUs its placement lets it see, the devices a
placement plan gives each role (``--dry-run`` and ``summary.json``), the roles that may not share
a GPU, and the machine's torch, CUDA and driver versions. The learner group over these devices is
:mod:`rlinf_algos.parallel`."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch

from rlinf_core.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = [
    "CPU_ROLES",
    "configure_precision",
    "device_report",
    "local_devices",
    "nvidia_driver",
    "plan_devices",
    "process_gpu",
    "resolve_device",
    "role_device",
    "shared_gpu_problems",
    "visible_gpus",
]


def visible_gpus() -> int:
    """How many CUDA devices this process can use (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _env_local_rank() -> int:
    try:
        return int(os.environ.get("LOCAL_RANK", "0") or 0)
    except ValueError:
        return 0


def _local_gpu(count: int, local_rank: int, spec: str, where: str) -> int:
    """The GPU index (among the ``count`` this process sees) of the process with ``local_rank``:
    its own GPU when the placement isolated it (``count == 1``), else the ``local_rank``-th."""
    if count == 1:
        return 0
    if local_rank < count:
        return local_rank
    raise ConfigError(
        f"{spec!r}: this process has local rank {local_rank} but sees {count} GPU(s), so it would share "
        "a GPU with another rank of its component (NCCL refuses two ranks of one group on one GPU); "
        "place at most one process per GPU or use device: cpu",
        where,
    )


def _no_cuda_reason() -> str:
    """Why torch sees no GPU although ``CUDA_VISIBLE_DEVICES`` names some (a driver older than
    the torch build needs, usually), with torch's CUDA version."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if not visible or visible == "-1":
        return ""
    return (
        f" (CUDA_VISIBLE_DEVICES={visible} names GPUs but torch {torch.__version__}, built for CUDA "
        f"{torch.version.cuda}, cannot use them: the NVIDIA driver is probably older than that build "
        "needs; install a torch build for your driver, see the README)"
    )


def resolve_device(spec: str, where: str = "runner.device", local_rank: int | None = None) -> torch.device:
    """This process's torch device for ``spec`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``).

    ``auto`` (and a bare ``cuda``) is the GPU of this process's local rank among the GPUs it
    sees (``local_rank``, default ``LOCAL_RANK`` as the scheduler exports it): its own GPU when
    the placement gave it one, the ``local_rank``-th when it sees several (a process placed on
    a node); ``auto`` is the CPU when the process sees none. A CUDA device the process cannot
    see, or a local rank past the GPUs it sees, is a :class:`ConfigError` naming ``where``."""
    spec = (spec or "cpu").strip()
    rank = _env_local_rank() if local_rank is None else local_rank
    count = visible_gpus()
    if spec == "auto":
        if count == 0:
            reason = _no_cuda_reason()
            if reason:
                log.warning("%s: auto trains on the CPU%s", where, reason)
            return torch.device("cpu")
        return torch.device("cuda", _local_gpu(count, rank, spec, where))
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise ConfigError(f"{spec!r} is not a torch device; use cpu, cuda, cuda:N or auto", where) from None
    if dev.type == "cuda":
        if count == 0:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            raise ConfigError(
                f"{spec!r}: this process has no CUDA device{_no_cuda_reason() or ''} (the placement gave it "
                f"{'CUDA_VISIBLE_DEVICES=' + visible if visible else 'no accelerator'}; torch sees 0); "
                "place it on a node group with GPUs or use device: cpu (or auto)",
                where,
            )
        index = dev.index if dev.index is not None else _local_gpu(count, rank, spec, where)
        if index >= count:
            raise ConfigError(f"{spec!r}: the process sees {count} CUDA device(s) (its placement)", where)
        return torch.device("cuda", index)
    return dev


def role_device(spec: str, where: str = "runner.device") -> torch.device:
    """The device of a role that follows its placement whatever ``runner.device`` names (the
    language-model rollout and reference): the CPU when ``spec`` is ``cpu`` or the process sees
    no GPU, else :func:`resolve_device` of ``auto``."""
    if (spec or "cpu").strip() == "cpu" or visible_gpus() == 0:
        return torch.device("cpu")
    return resolve_device("auto", where)


def configure_precision(device: torch.device) -> None:
    """On a CUDA device, let float32 matmuls and convolutions use TF32 (``"high"`` matmul
    precision); nothing on the CPU."""
    if torch.device(device).type == "cuda":
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True


def process_gpu(visible: Sequence[int], local_rank: int) -> int | None:
    """The node GPU index a process with these ``visible`` accelerators and ``local_rank``
    takes under ``auto`` (see :func:`resolve_device`); ``None`` without one."""
    if not visible:
        return None
    if len(visible) == 1:
        return int(visible[0])
    return int(visible[local_rank]) if local_rank < len(visible) else None


def shared_gpu_problems(plan: Any, device: str, components: Sequence[str] = ("actor",)) -> list[str]:
    """One line per learner ``components`` of ``plan`` (a
    :class:`rlinf_core.scheduler.PlacementPlan`) whose ranks would share a GPU, or outnumber the
    GPUs they see, under ``device`` (nothing for ``cpu`` or a group of one): NCCL refuses two
    ranks of one group on one GPU at the first collective."""
    if (device or "cpu").strip() == "cpu":
        return []
    out: list[str] = []
    for name in components:
        if plan is None or name not in plan or len(plan[name]) < 2:
            continue
        comp = plan[name]
        seen: dict[tuple[int, int], int] = {}
        local: dict[int, int] = {}
        for p in comp:
            rank = local.get(p.node_rank, 0)
            local[p.node_rank] = rank + 1
            if not p.visible_accelerators:
                continue  # no GPU: auto takes the CPU (a cuda device is refused where it starts)
            gpu = process_gpu(p.visible_accelerators, rank)
            where = f"placement {comp.placement!r} on node group {'/'.join(comp.node_groups)}"
            if gpu is None:
                out.append(
                    f"{name}: rank {p.rank} is the process {rank} of node {p.node_rank}, which sees only "
                    f"{len(p.visible_accelerators)} GPU(s) ({where}): give each rank its own GPU"
                )
                break
            other = seen.setdefault((p.node_rank, gpu), p.rank)
            if other != p.rank:
                out.append(
                    f"{name}: ranks {other} and {p.rank} would share GPU {gpu} of node {p.node_rank} ({where}); "
                    "NCCL refuses two ranks of one learner on one GPU: give each rank its own GPU "
                    "(placement '0-1' on a GPU node group) or use runner.device: cpu"
                )
                break
    return out


CPU_ROLES = ("env", "reward", "tool", "agent")
"""Components that compute on the CPU whatever ``runner.device`` says."""


def plan_devices(plan: Any, device: str) -> dict[str, list[str]]:
    """Each component's device per rank under ``runner.device`` ``device`` (``cuda:G@node N``:
    the node's GPU ``G``), as :func:`resolve_device` / :func:`role_device` will pick them on the
    planned processes; ``{}`` without a plan (``runner.scheduler: local``)."""
    if plan is None:
        return {}
    out: dict[str, list[str]] = {}
    for comp in plan.components.values():
        local: dict[int, int] = {}
        ranks = []
        for p in comp:
            rank = local.get(p.node_rank, 0)
            local[p.node_rank] = rank + 1
            gpu = process_gpu(p.visible_accelerators, rank)
            cpu = (device or "cpu").strip() == "cpu" or comp.name in CPU_ROLES or gpu is None
            ranks.append("cpu" if cpu else f"cuda:{gpu}@node {p.node_rank}")
        out[comp.name] = ranks
    return out


def local_devices(device: str) -> dict[str, list[str]]:
    """The devices of a ``runner.scheduler: local`` run, where every role computes in this
    process: ``{"local": [device]}``, ``device`` as :func:`resolve_device` picks it here (a
    :class:`ConfigError` for a CUDA device this machine does not have)."""
    return {"local": [str(resolve_device(device))]}


def nvidia_driver() -> str:
    """The NVIDIA driver's version as ``nvidia-smi`` reports it, or ``"none"`` (no driver, no
    ``nvidia-smi``, or it failed within 10 s). Asked even when torch sees no GPU: a driver older
    than torch's CUDA build is there but unusable, and the report should say which it is."""
    import subprocess

    try:
        res = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    return res.stdout.split()[0] if res.returncode == 0 and res.stdout.strip() else "none"


def device_report() -> dict[str, Any]:
    """What a run records of its devices: torch's version and CUDA version (``none`` for a CPU
    build), the GPUs this process sees (with their names and the CUDA version the driver
    supports) and the NVIDIA driver's version (``none`` without one)."""
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda or "none",
        "gpus": visible_gpus(),
    }
    if out["gpus"]:
        out["gpu_names"] = [torch.cuda.get_device_name(i) for i in range(out["gpus"])]
        get = getattr(torch._C, "_cuda_getDriverVersion", None)
        if get is not None:
            v = int(get())
            out["driver_cuda"] = f"{v // 1000}.{(v % 1000) // 10}"  # the CUDA version the driver supports
    out["driver"] = nvidia_driver()
    return out

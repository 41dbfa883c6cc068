"""Which weight sync a run uses (``rollout.weight_sync``), decided the same way by ``rlinf train
--dry-run`` and by the driver that creates it.

The learner's rank 0 publishes; the rollout workers and the reference consume. Their planned
devices (:func:`rlinf_algos.devices.plan_devices`) decide ``auto`` and check ``collective``
(:func:`rlinf_core.weights.resolve_weight_sync_mode`): ``collective`` needs one kind of device
(one NCCL or one Gloo group) and, on CUDA, a GPU per member (NCCL refuses two ranks of one group
on one GPU); ``auto`` picks it only when every member is on a CUDA device of its own, so a run
whose learner, rollout and reference share one GPU syncs through the object store. A run whose
publish carries a LoRA adapter alone (the language-model flows) uses the object store: the
adapter is a few megabytes, which a broadcast group would not pay for, and the consumers load it
into their own base model.

No torch, no Ray: this runs in ``--dry-run``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from rlinf_core.errors import ConfigError
from rlinf_core.weights import resolve_weight_sync_mode

__all__ = [
    "PATH",
    "WEIGHT_ROLES",
    "WeightSyncMode",
    "choose_weight_sync",
    "requested_mode",
    "sync_devices",
    "weight_sync_field",
]

PATH = "rollout.weight_sync"
"""The YAML path of the key."""

WEIGHT_ROLES: tuple[str, ...] = ("actor", "rollout", "reference")
"""The roles a weight sync reaches: the publisher (the learner's rank 0) and its consumers."""

WeightSyncMode = Literal["auto", "collective", "object_store"]
"""What ``rollout.weight_sync`` may say (:data:`rlinf_core.weights.WEIGHT_SYNC_MODES`)."""


def weight_sync_field() -> Any:
    """The ``rollout.weight_sync`` field of the embodied and the language-model ``rollout``
    sections."""
    return Field(
        "auto",
        description="how the learner's weights reach the rollout workers (and the reference): "
        "collective (a broadcast group of the learner's rank 0 and the consumers: NCCL on GPUs, Gloo on "
        "CPUs), object_store (one copy in the cluster's object store that every consumer reads) or auto "
        "(collective when the learner and every consumer are on CUDA devices, each on a GPU of its own, "
        "else object_store). "
        "LoRA adapters always go through the object store. runner.scheduler: local shares one snapshot per "
        "publish in its process",
    )


def sync_devices(devices: Mapping[str, Sequence[str]], roles: Iterable[str] = WEIGHT_ROLES) -> dict[str, str]:
    """The members of a run's weight sync and their devices (``{"actor rank 0": "cpu",
    "rollout rank 1": "cuda:1@node 0", ...}``) from each role's device per rank (``devices``,
    as :func:`~rlinf_algos.devices.plan_devices` gives them): the learner's rank 0 publishes,
    every rank of the other ``roles`` consumes."""
    out: dict[str, str] = {}
    for role in roles:
        ranks = list(devices.get(role) or [])
        if role == "actor":
            ranks = ranks[:1]
        out.update({f"{role} rank {r}": str(dev) for r, dev in enumerate(ranks)})
    return out


def choose_weight_sync(
    mode: str,
    devices: Mapping[str, Sequence[str]] | None,
    *,
    adapter_only: bool = False,
    roles: Iterable[str] = WEIGHT_ROLES,
) -> tuple[str, dict[str, str]]:
    """``(mode, members)``: ``collective`` or ``object_store`` for the requested ``mode``
    (``rollout.weight_sync``) and the members' devices (:func:`sync_devices` of ``devices``;
    none known: ``auto`` is ``object_store``). ``adapter_only``: the publish carries a LoRA
    adapter alone (``object_store``; ``collective`` is refused).

    Raises :class:`~rlinf_core.errors.ConfigError` at ``rollout.weight_sync`` for an unknown
    mode, ``collective`` over a mixed device set, or ``collective`` for an adapter."""
    members = sync_devices(devices or {}, roles)
    if adapter_only:
        resolve_weight_sync_mode(mode, None, path=PATH)  # an unknown name is still an error
        if mode == "collective":
            raise ConfigError(
                "collective weight sync is not for LoRA runs: the learner publishes the adapter alone "
                "(a few MB), which goes through the object store; use auto or object_store, or drop model.lora",
                PATH,
            )
        return "object_store", members
    return resolve_weight_sync_mode(mode, members or None, path=PATH), members


def requested_mode(config: Mapping[str, Any]) -> str:
    """``rollout.weight_sync`` of a run configuration (``auto`` when unset)."""
    rollout = config.get("rollout") if isinstance(config, Mapping) else None
    value = rollout.get("weight_sync") if isinstance(rollout, Mapping) else None
    return str(value) if value is not None else "auto"

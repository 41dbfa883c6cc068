"""Environment registrations that plugins contribute (gymnasium ids).

Core does not import gymnasium: plugins return :class:`EnvSpec` records from
``rlinf_register_envs`` and :func:`register_with_gymnasium` hands them to gymnasium when a
training process actually needs environments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EnvSpec", "register_with_gymnasium"]


@dataclass(frozen=True)
class EnvSpec:
    """A gymnasium registration: ``id`` (``rlinf/FrankaReach-v0``), ``entry_point``
    (``"package.module:Class"``), ``max_episode_steps`` and default ``kwargs``."""

    id: str
    entry_point: str
    max_episode_steps: int | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def register_with_gymnasium(specs: Iterable[EnvSpec]) -> list[str]:
    """Register every spec with gymnasium (imported here, lazily); ids already registered are
    left alone. Returns the ids registered."""
    import gymnasium

    done = []
    for spec in specs:
        if spec.id in gymnasium.registry:
            continue
        gymnasium.register(
            id=spec.id,
            entry_point=spec.entry_point,
            max_episode_steps=spec.max_episode_steps,
            kwargs=dict(spec.kwargs),
        )
        done.append(spec.id)
    return done

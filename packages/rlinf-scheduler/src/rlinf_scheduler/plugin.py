"""rlinf plugin of rlinf-scheduler (entry point ``scheduler``).

Registers the ``rlinf cluster`` and ``rlinf node`` commands and the ``ray`` scheduler. Must
import without ray: command modules are imported inside the hook, and they import ray lazily too.
"""

from __future__ import annotations

from typing import Any

from rlinf_core.plugins import hookimpl


@hookimpl
def rlinf_register_schedulers() -> list[type]:
    from rlinf_scheduler.runtime.scheduler import RayScheduler  # imports ray only when started

    return [RayScheduler]


@hookimpl
def rlinf_register_commands(cli: Any) -> None:
    from rlinf_scheduler.cli import register

    register(cli)

"""rlinf plugin of rlinf-scheduler (entry point ``scheduler``).

Registers the ``ray`` scheduler and the ``rlinf cluster`` / ``rlinf node`` commands once they
exist; until then it registers nothing. Must import without ray.
"""

from __future__ import annotations

from rlinf_core.plugins import hookimpl


@hookimpl
def rlinf_register_schedulers() -> list[type]:
    return []

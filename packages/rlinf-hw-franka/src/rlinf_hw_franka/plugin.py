"""rlinf plugin of rlinf-hw-franka (entry point ``hw-franka``).

Registers the ``Franka`` hardware type and its environments once they exist; until then it
registers nothing. Must import without franky, pylibfranka or mujoco.
"""

from __future__ import annotations

from rlinf_core.plugins import hookimpl


@hookimpl
def rlinf_register_hardware() -> list[type]:
    return []

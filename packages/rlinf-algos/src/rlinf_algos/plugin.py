"""rlinf plugin of rlinf-algos (entry point ``algos``).

Registers the ``ppo``, ``sac`` and ``grpo`` algorithms, the MuJoCo environments and the
``rlinf train|eval|plot`` commands once they exist; until then it registers nothing. Must import
without torch, gymnasium or mujoco.
"""

from __future__ import annotations

from rlinf_core.plugins import hookimpl


@hookimpl
def rlinf_register_algorithms() -> list[type]:
    return []

"""rlinf plugin of rlinf-algos (entry point ``algos``).

Registers the ``ppo``, ``sac``, ``grpo`` and ``grpo_lm`` algorithms and the ``rlinf
train|eval|plot`` commands. Must import without torch, gymnasium or mujoco: the classes live in
:mod:`rlinf_algos.algorithms` and :mod:`rlinf_algos.lm.algorithm`, which import only pydantic and
rlinf_core and load the training code inside ``run()``.
"""

from __future__ import annotations

from typing import Any

from rlinf_core.plugins import hookimpl


@hookimpl
def rlinf_register_algorithms() -> list[type]:
    from rlinf_algos.algorithms import GRPO, PPO, SAC
    from rlinf_algos.lm.algorithm import GRPOLM

    return [PPO, SAC, GRPO, GRPOLM]


@hookimpl
def rlinf_register_commands(cli: Any) -> None:
    from rlinf_algos.cli import register

    register(cli)

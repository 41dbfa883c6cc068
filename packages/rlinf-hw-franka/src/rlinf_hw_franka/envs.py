"""The gymnasium ids this package registers (through ``rlinf_register_envs``).

Records only: nothing here imports gymnasium or MuJoCo. ``rlinf_core.envs.register_with_gymnasium``
hands them to gymnasium in processes that create environments.
"""

from __future__ import annotations

from rlinf_core.envs import EnvSpec

__all__ = ["REACH_MAX_STEPS", "env_specs"]

#: Episode length of the reach task: 5 s at 10 Hz.
REACH_MAX_STEPS = 50


def env_specs() -> list[EnvSpec]:
    """``rlinf/FrankaReach-v0`` (MuJoCo twin), ``rlinf/FrankaReachReal-v0`` (franky; pass
    ``robot_ip=`` or ``hardware=`` to ``gymnasium.make``), ``rlinf/FrankaInstructReach-v0``
    (the twin; reach the cube the instruction names, image + state + instruction observations)
    and ``rlinf/FrankaInstructGrasp-v0`` (the twin; close the gripper on the named cube, a
    hybrid action: continuous arm, discrete gripper)."""
    entry = "rlinf_hw_franka.env:FrankaEnv"
    return [
        EnvSpec("rlinf/FrankaReach-v0", entry, REACH_MAX_STEPS, {"backend": "mujoco"}),
        EnvSpec("rlinf/FrankaReachReal-v0", entry, REACH_MAX_STEPS, {"backend": "franky"}),
        EnvSpec(
            "rlinf/FrankaInstructReach-v0",
            "rlinf_hw_franka.instruct:FrankaInstructReachEnv",
            REACH_MAX_STEPS,
            {},
        ),
        EnvSpec(
            "rlinf/FrankaInstructGrasp-v0",
            "rlinf_hw_franka.grasp:FrankaInstructGraspEnv",
            REACH_MAX_STEPS,
            {},
        ),
    ]

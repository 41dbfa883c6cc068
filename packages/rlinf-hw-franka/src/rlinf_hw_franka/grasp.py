"""``rlinf/FrankaInstructGrasp-v0``: close the gripper on the cube a language instruction names.

The scene of :mod:`rlinf_hw_franka.instruct` (cubes of distinct colours at random places on the
table, an instruction such as ``"grasp the red cube"`` naming one), with solid cubes (free bodies
of ``cube_mass`` that the table carries, the fingers hold and the arm can push) and a hybrid
action: the hand has to get to the named cube (continuous) and close on it (discrete).

* Action: ``Dict(arm=Box(-1, 1, (3,)), gripper=Discrete(2))``: the end-effector position delta
  (times ``max_delta_pos``, 5 cm; with ``rotation=True`` also a rotation vector, ``(6,)``) and
  the gripper command, ``0`` open (fingers apart, 8 cm between the pads), ``1`` close (the
  fingers close until something stops them). The orientation is held: the fingers close along
  the base frame's y axis, across a cube's faces.
* Grasp point: the named cube's centre at ``grasp_height`` above the table (3.5 cm: there the
  pads straddle the lower 2.3 cm of a 5 cm cube while the palm clears its top face). It is the
  floor of the safety box, so a hand that pushes down stops where it grasps.
* Success (``info["success"]`` and ``info["is_success"]``, every step): the gripper is commanded
  closed, both finger pads touch the named cube (MuJoCo contacts of the pad geoms with the
  cube's, within 1 mm) and press it across the gap between the fingers (a contact normal within
  45 degrees of the line through the pads' centres: pads on the cube's top do not count), the
  cube's centre lies between the pads (its projection on that line falls between them: one pad
  against a face from outside does not count), and neither pad touches another cube. ``info["grasped"]`` names the
  colour of the cube the gripper closed on that way (``""`` for none), ``info["distance"]`` is
  the distance (m) from the end effector to the grasp point.
* Reward, per step: ``-distance`` (dense shaping towards the named cube), plus ``success_bonus``
  (1.0) on a step that succeeds, minus ``wrong_cube_penalty`` (1.0) on a step where the gripper
  holds another cube. Holding the named cube to the end of the episode returns the most.
* Observations: those of :class:`~rlinf_hw_franka.instruct.FrankaInstructReachEnv` with the
  gripper's opening in ``state`` (22 values in ``obs_mode="vla"``); the privileged modes
  (``"dict"``, ``"flat"``: 28 values) carry the grasp point of the named cube where they carry
  ``target_pos``, followed as the cube moves.
* Episodes: 50 steps at 10 Hz (the registration's ``max_episode_steps``); nothing ends them
  early.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlinf_core.errors import ConfigError
from rlinf_hw_franka.backends import RobotState
from rlinf_hw_franka.env import DEFAULT_SAFETY_BOX
from rlinf_hw_franka.instruct import FrankaInstructReachEnv
from rlinf_hw_franka.mjcf import CUBE_SIZE

__all__ = ["CLOSE", "OPEN", "FrankaInstructGraspEnv"]

#: The gripper part of the action.
OPEN, CLOSE = 0, 1
#: Height above the grasp point from which the scripted grasp descends (m).
_HOVER = 0.08
#: The scripted grasp closes within this distance of the grasp point (m).
_CLOSE_WITHIN = 0.015
#: A pad holds a cube when a contact's normal is within 45 degrees of the line between the pads.
_ACROSS = float(np.cos(np.pi / 4))


class FrankaInstructGraspEnv(FrankaInstructReachEnv):
    """The instruction-conditioned grasp task on the MuJoCo twin (see the module docstring).

    Parameters:
        cube_size: cube edge (m); at most 7 cm, or the open hand (8.4 cm between the pads)
            cannot take it.
        cube_mass: mass of a cube (kg).
        grasp_height: height of the grasp point above the table (m), also the safety box's floor.
        success_bonus: reward added on a step that succeeds.
        wrong_cube_penalty: reward taken on a step where the gripper holds another cube.
        instruction_template: the instruction, ``{color}`` replaced by the target's colour.
        **kwargs: :class:`~rlinf_hw_franka.instruct.FrankaInstructReachEnv` arguments
            (``num_targets``, ``colors``, ``cube_region``, ``min_separation``, ``obs_mode``,
            ``cameras``, ...; not ``reach_height`` and ``gripper``: the grasp point replaces
            the one, the other is always there).
    """

    def __init__(
        self,
        *,
        cube_size: float = CUBE_SIZE,
        cube_mass: float = 0.1,
        grasp_height: float = 0.035,
        success_bonus: float = 1.0,
        wrong_cube_penalty: float = 1.0,
        instruction_template: str = "grasp the {color} cube",
        **kwargs: Any,
    ) -> None:
        for key in ("reach_height", "gripper"):
            if key in kwargs:
                raise ConfigError(
                    f"FrankaInstructGraspEnv takes no {key!r} (the grasp point is grasp_height above "
                    "the table; the gripper is part of every action)"
                )
        if not 0 < cube_size <= 0.07:
            raise ConfigError(
                f"cube_size must be above 0 and at most 0.07 m (the open hand), got {cube_size!r}"
            )
        if not cube_mass > 0:
            raise ConfigError(f"cube_mass must be positive (kg), got {cube_mass!r}")
        if not 0 < grasp_height < cube_size:
            raise ConfigError(
                f"grasp_height must lie between the table and the cube's top ({cube_size} m), got {grasp_height!r}"
            )
        if not (success_bonus >= 0 and wrong_cube_penalty >= 0):
            raise ConfigError(
                "success_bonus and wrong_cube_penalty must not be negative, got "
                f"{success_bonus!r}, {wrong_cube_penalty!r}"
            )
        self.cube_mass = float(cube_mass)
        self.grasp_height = float(grasp_height)
        self.wrong_cube_penalty = float(wrong_cube_penalty)
        (x0, y0, _), high = DEFAULT_SAFETY_BOX
        kwargs.setdefault("safety_box", ((x0, y0, self.grasp_height), tuple(high)))
        #: The gripper part of the last action (:data:`OPEN` or :data:`CLOSE`).
        self.gripper_command = OPEN
        #: Index of the cube the gripper holds (see the module docstring), -1 for none.
        self.grasped = -1
        super().__init__(
            cube_size=cube_size,
            reach_height=0.0,
            success_bonus=success_bonus,
            instruction_template=instruction_template,
            gripper=True,
            **kwargs,
        )
        arm = 6 if self.rotation else 3
        self.action_space = spaces.Dict(
            {"arm": spaces.Box(-1.0, 1.0, shape=(arm,), dtype=np.float32), "gripper": spaces.Discrete(2)}
        )

    # -- the task ----------------------------------------------------------------------------------
    def _scene_options(self) -> dict[str, Any]:
        return {**super()._scene_options(), "cube_mass": self.cube_mass}

    def _goal(self, centre: np.ndarray) -> np.ndarray:
        """The grasp point of a cube centred at ``centre``: ``grasp_height`` above the table."""
        return np.array([centre[0], centre[1], self.grasp_height])

    def _sample_target(self, options: dict[str, Any]) -> np.ndarray:
        self.gripper_command = OPEN
        return super()._sample_target(options)

    def _on_read(self, st: RobotState) -> None:
        # The cubes are free bodies: follow them (the privileged observations and the reward use
        # the named one's grasp point as it is now), then see what the fingers hold.
        self.cube_positions = self.backend.cube_positions()  # type: ignore[attr-defined]
        self.target = self._goal(self.cube_positions[self.target_index])
        self.grasped = self._holding() if self.gripper_command == CLOSE else -1

    def _holding(self) -> int:
        """The cube both pads press from either side (see the module docstring); -1 for none."""
        left, right = self.backend.finger_contacts()  # type: ignore[attr-defined]
        if len(left) != 1 or set(left) != set(right):  # one cube, touched by both pads, no other
            return -1
        cube = next(iter(left))
        if min(left[cube], right[cube]) < _ACROSS:  # a pad on its top, or along a face
            return -1
        a, b = self.backend.pad_positions()  # type: ignore[attr-defined]
        axis = b - a
        t = float(np.dot(self.cube_positions[cube] - a, axis) / max(float(np.dot(axis, axis)), 1e-12))
        return cube if 0.0 < t < 1.0 else -1

    def _is_success(self, st: RobotState, distance: float) -> bool:
        return self.grasped == self.target_index

    def _reward(self, distance: float, success: bool) -> float:
        wrong = self.grasped >= 0 and self.grasped != self.target_index
        return (
            -distance + (self.success_bonus if success else 0.0) - (self.wrong_cube_penalty if wrong else 0.0)
        )

    def _info(self, st: Any, *, overran: bool, clipped: bool) -> dict[str, Any]:
        info = super()._info(st, overran=overran, clipped=clipped)
        info["grasped"] = self.cube_colors[self.grasped] if self.grasped >= 0 else ""
        return info

    # -- actions -----------------------------------------------------------------------------------
    def _action_vector(self, action: Any) -> np.ndarray:
        if not isinstance(action, Mapping) or set(action) != {"arm", "gripper"}:
            raise ValueError(
                f"action must be a dict with 'arm' (an array of {self.action_space['arm'].shape[0]}) and "
                f"'gripper' (0 open, 1 close), got {action!r}"
            )
        arm = np.asarray(action["arm"], dtype=np.float64).reshape(-1)
        if arm.shape != self.action_space["arm"].shape:
            raise ValueError(
                f"action['arm'] must have shape {self.action_space['arm'].shape}, got {arm.shape}"
            )
        if not np.all(np.isfinite(arm)):
            raise ValueError(f"action['arm'] contains NaN or infinity: {arm.tolist()}")
        grip = action["gripper"]
        if (
            isinstance(grip, (bool, np.bool_))
            or not isinstance(grip, (int, np.integer))
            or int(grip) not in (0, 1)
        ):
            raise ValueError(f"action['gripper'] must be 0 (open) or 1 (close), got {grip!r}")
        self.gripper_command = int(grip)
        # FrankaEnv's gripper value: -1 closed, +1 open (8 cm, 2 * FINGER_TRAVEL).
        return np.concatenate([arm, [-1.0 if self.gripper_command == CLOSE else 1.0]])

    def expert_action(self) -> dict[str, Any]:
        """The scripted grasp (it reads the cube's position, so it is a demonstrator, not a
        policy): over the named cube at ``grasp_height`` plus 8 cm, straight down to the grasp
        point with the gripper open, then close and hold."""
        return self.grasp_action(self.target_index)

    def grasp_action(self, cube: int) -> dict[str, Any]:
        """The scripted grasp of cube ``cube`` (an index into :attr:`cube_colors`), the named one
        or another (see :meth:`expert_action`)."""
        if self._state is None:
            raise gym.error.ResetNeeded("call reset() before grasp_action()")
        goal = self._goal(self.cube_positions[cube])
        ee = self._state.ee_pos
        off = float(np.linalg.norm(goal[:2] - ee[:2]))
        over = off < 0.01 or (off < 0.02 and ee[2] < goal[2] + 0.02)  # over it, or already down
        point = goal if over else goal + np.array([0.0, 0.0, _HOVER])
        close = float(np.linalg.norm(goal - ee)) < _CLOSE_WITHIN
        arm = np.zeros(self.action_space["arm"].shape, np.float32)
        arm[:3] = np.clip((point - ee) / self.max_delta_pos, -1.0, 1.0)
        return {"arm": arm, "gripper": CLOSE if close else OPEN}

    def candidate_actions(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """The scripted grasp's action towards each cube (:meth:`grasp_action`), the named
        one's (:meth:`expert_action`) among them."""
        return [self.grasp_action(i) for i in range(self.num_targets)]

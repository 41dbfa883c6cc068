"""Backends of :class:`rlinf_hw_franka.env.FrankaEnv`: where an end-effector command goes and
where the robot state comes from.

* ``mujoco`` (:mod:`.mujoco_backend`): the MuJoCo twin (this package's Panda MJCF).
* ``franky`` (:mod:`.franky_backend`): a real arm (or franka-sim) through franky-control.

Both import their SDK lazily, inside the backend's constructor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Backend", "RobotState", "quat_mul", "quat_normalize", "rotvec_to_quat"]


@dataclass
class RobotState:
    """One reading of the arm: joints (rad, rad/s), end-effector pose in the base frame
    (position in m, quaternion ``w, x, y, z``), gripper opening (m), camera images."""

    q: np.ndarray
    dq: np.ndarray
    ee_pos: np.ndarray
    ee_quat: np.ndarray
    gripper_width: float = 0.0
    images: dict[str, np.ndarray] = field(default_factory=dict)


class Backend:
    """Interface of a backend (subclasses implement every method)."""

    name: str = "?"
    #: Whether real time passes by itself (a real robot) or only when :meth:`advance` is called.
    physical: bool = False

    def reset(self, home_q: np.ndarray) -> None:
        """Bring the arm to ``home_q`` (blocking, with a timeout) and clear recoverable errors."""
        raise NotImplementedError

    def command(self, ee_pos: np.ndarray, ee_quat: np.ndarray, gripper_width: float | None) -> None:
        """Start moving the end effector towards a pose (non-blocking on a real robot)."""
        raise NotImplementedError

    def advance(self, duration: float) -> None:
        """Let ``duration`` seconds of robot time pass (simulation); a no-op on a real robot."""

    def read(self, cameras: bool = False) -> RobotState:
        """The current state (with images of the configured cameras if ``cameras``)."""
        raise NotImplementedError

    def set_target_marker(self, pos: np.ndarray) -> None:
        """Show the task's target (simulation only)."""

    def close(self) -> None:
        """Release the connection or the simulator."""


def quat_normalize(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    n = np.linalg.norm(q)
    if n == 0:
        return np.array([1.0, 0.0, 0.0, 0.0])
    q = q / n
    return q if q[0] >= 0 else -q


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of two ``w, x, y, z`` quaternions (shape (4,))."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


def rotvec_to_quat(v: np.ndarray) -> np.ndarray:
    """Rotation vector (axis * angle, rad; shape (3,)) to a ``w, x, y, z`` quaternion."""
    v = np.asarray(v, dtype=np.float64)
    angle = float(np.linalg.norm(v))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    axis = v / angle
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])


def quat_to_rotvec(q: np.ndarray) -> np.ndarray:
    """``w, x, y, z`` quaternion to a rotation vector (the shorter way round)."""
    q = quat_normalize(q)
    s = float(np.linalg.norm(q[1:]))
    if s < 1e-12:
        return np.zeros(3)
    angle = 2.0 * np.arctan2(s, q[0])
    return q[1:] / s * angle

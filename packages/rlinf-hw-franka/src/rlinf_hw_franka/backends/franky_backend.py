"""A real Franka arm (or franka-sim) through franky-control (``pip install 'rlinf-hw-franka[robot]'``).

Every env step sends an asynchronous Cartesian motion to the new end-effector target; franky
replaces the running motion seamlessly (its Ruckig trajectory generator plans from the current
state), so the arm follows a stream of targets at the env's control rate. Errors the robot
reports (reflexes, limit violations, a lost connection) surface at the next command or read as a
:class:`HardwareError` that names the robot; :meth:`FrankyBackend.reset` runs franky's automatic
error recovery.

franky and pylibfranka cannot be imported in one process (a pybind11 type clash): a process
that uses this backend must not import pylibfranka.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlinf_core.errors import ConfigError, HardwareError, WaitTimeout
from rlinf_hw_franka.backends import Backend, RobotState, quat_normalize
from rlinf_hw_franka.cameras import Camera

__all__ = ["FrankyBackend", "import_franky"]


def import_franky() -> Any:
    """Import franky lazily, with an actionable error if it is missing or clashes."""
    if "pylibfranka" in sys.modules:
        raise ConfigError(
            "pylibfranka is already imported in this process; franky and pylibfranka cannot be used in one "
            "process (a pybind11 type clash). Run the franky backend in a process that does not import pylibfranka."
        )
    try:
        import franky
    except ImportError as err:
        raise ConfigError(
            f"the franky backend needs franky-control: pip install 'rlinf-hw-franka[robot]' ({err})"
        ) from None
    return franky


class FrankyBackend(Backend):
    """A Franka arm driven by franky.

    Parameters:
        robot_ip: the control box (FCI) address.
        realtime_kernel: ``True`` only on a PREEMPT_RT kernel; otherwise franky connects with
            ``RealtimeConfig.Ignore``.
        dynamics_factor: franky's relative dynamics factor (scales max velocity, acceleration
            and jerk; 0 < f <= 1).
        gripper: drive the Franka Hand (port 1338).
        cameras: camera objects (:class:`rlinf_hw_franka.cameras.Camera`) to read images from.
        motion_timeout: seconds a blocking motion (the reset to home) may take.
        home_attempts: how often :meth:`reset` tries a move home that a transient reflex aborts.
        connect_timeout: seconds the connection handshake (arm, then hand) may take each. A
            robot serves one client at a time and leaves a second one waiting without an answer.
        label: how errors name this robot (default ``Franka robot at <ip>``).
    """

    name = "franky"
    physical = True

    def __init__(
        self,
        robot_ip: str,
        *,
        realtime_kernel: bool = False,
        dynamics_factor: float = 0.2,
        gripper: bool = True,
        cameras: Sequence[Camera] = (),
        motion_timeout: float = 20.0,
        home_attempts: int = 3,
        connect_timeout: float = 30.0,
        label: str | None = None,
    ) -> None:
        if not 0 < dynamics_factor <= 1:
            raise ConfigError(f"dynamics_factor must be in (0, 1], got {dynamics_factor!r}")
        if home_attempts < 1:
            raise ConfigError(f"home_attempts must be at least 1, got {home_attempts!r}")
        self.home_attempts = home_attempts
        #: Moves home that a transient reflex aborted and :meth:`reset` tried again.
        self.home_retries = 0
        self.franky = import_franky()
        self.robot_ip = robot_ip
        self.label = label or f"Franka robot at {robot_ip}"
        self.motion_timeout = motion_timeout
        self.cameras = list(cameras)
        fr = self.franky
        rt = fr.RealtimeConfig.Enforce if realtime_kernel else fr.RealtimeConfig.Ignore
        self.robot = self._connect(
            lambda: fr.Robot(robot_ip, realtime_config=rt), "cannot connect", connect_timeout
        )
        try:
            self.robot.relative_dynamics_factor = dynamics_factor
        except Exception as err:
            raise HardwareError(f"{self.label}: cannot connect: {type(err).__name__}: {err}") from None
        self.gripper = None
        self._last_width: float | None = None
        #: Planner (Ruckig) failures so far; a run of more than ``max_planner_failures`` is an error.
        self.planner_failures = 0
        self.max_planner_failures = 3
        self._consecutive_planner_failures = 0
        if gripper:
            self.gripper = self._connect(
                lambda: fr.Gripper(robot_ip),
                "cannot connect to the Franka Hand (port 1338)",
                connect_timeout,
                hint="; use gripper_type: none if the arm has no hand",
            )

    def _connect(self, open_: Callable[[], Any], what: str, timeout: float, hint: str = "") -> Any:
        """Run a libfranka connection handshake, bounded by ``timeout`` seconds.

        libfranka's handshake waits for the robot's answer without a limit, and a robot that
        already serves a client never answers a second one. The handshake runs on a daemon
        thread; one that is still waiting at the timeout is left behind (it holds no lock and
        ends with the process) and the error says what to check.
        """
        box: dict[str, Any] = {}

        def handshake() -> None:
            try:
                box["ok"] = open_()
            except BaseException as err:
                box["err"] = err

        thread = threading.Thread(target=handshake, name=f"franka-connect-{self.robot_ip}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise HardwareError(
                f"{self.label}: {what}: no answer to the connection handshake within {timeout:g}s. "
                "A Franka robot serves one client at a time: is another program (another env, a franky "
                "or libfranka script, Desk's FCI session) still connected to it?" + hint
            )
        if "err" in box:
            err = box["err"]
            raise HardwareError(f"{self.label}: {what}: {type(err).__name__}: {err}{hint}") from None
        return box["ok"]

    def _fail(self, what: str, err: BaseException) -> HardwareError:
        return HardwareError(
            f"{self.label}: {what}: {type(err).__name__}: {err}. "
            "Reset the env (it runs the robot's automatic error recovery) or clear the error in Desk."
        )

    #: Reflexes that a disturbance or late control cycles can cause on a feasible motion. A move
    #: home aborted by one of these is tried again after error recovery, up to ``home_attempts``
    #: times in all. A position-limit violation is never retried: the target itself is infeasible.
    TRANSIENT_REFLEXES = (
        "velocity_violation",
        "velocity_limits_violation",
        "acceleration_discontinuity",
        "velocity_discontinuity",
        "communication_constraints_violation",
        "power_limit_violation",
        "tau_j_range_violation",
    )

    def reset(self, home_q: np.ndarray) -> None:
        """Let the last motion finish, recover from any error, move to ``home_q`` (blocking) and
        open the hand.

        franky's control loop runs in this process; one that misses cycles (a loaded machine, no
        realtime kernel) makes the robot abort the motion with a reflex such as
        ``joint_velocity_violation``. Such a move home is tried again after error recovery, up to
        ``home_attempts`` times in all (:attr:`home_retries` counts the retries); any other
        failure, or the last attempt's, is a HardwareError.
        """
        self._end_motion()
        failures: list[str] = []
        while True:
            try:
                self._move_home(home_q)
                break
            except WaitTimeout:
                raise
            except Exception as err:
                failures.append(f"{type(err).__name__}: {err}")
                if len(failures) >= self.home_attempts or not self._transient(err):
                    what = "moving to the home pose failed"
                    if len(failures) > 1:
                        what += f" {len(failures)} times (before the last: {'; '.join(failures[:-1])})"
                    raise self._fail(what, err) from None
                self.home_retries += 1
        if self.gripper is not None:
            self._move_gripper(self.gripper.max_width if hasattr(self.gripper, "max_width") else 0.08)

    def _end_motion(self) -> None:
        """Let the running motion (an episode's last Cartesian target) finish, or stop it.

        franky does not start a motion of another type (the joint motion home) over a running one.
        """
        try:
            if self.robot.join_motion(timeout=self.motion_timeout):
                return
            self.robot.stop()
            self.robot.join_motion(timeout=self.motion_timeout)
        except Exception:
            pass  # an error of the last episode's motion: error recovery follows

    def _transient(self, err: BaseException) -> bool:
        """Whether ``err`` is a reflex that trying the same feasible motion again can clear."""
        text = str(err)
        return (
            isinstance(err, self.franky.Exception)
            and "position_limits" not in text
            and any(kind in text for kind in self.TRANSIENT_REFLEXES)
        )

    def _move_home(self, home_q: np.ndarray) -> None:
        """Recover from errors if there are any, then move to ``home_q``; raises what franky raises."""
        if self.robot.has_errors:
            self.robot.recover_from_errors()
        self.robot.move(self.franky.JointMotion([float(x) for x in home_q]), asynchronous=True)
        if not self.robot.join_motion(timeout=self.motion_timeout):
            try:
                self.robot.stop()
            except Exception:
                pass
            raise WaitTimeout(
                f"{self.label}: the move to the home pose did not finish within {self.motion_timeout:g}s"
            )

    def command(self, ee_pos: np.ndarray, ee_quat: np.ndarray, gripper_width: float | None) -> None:
        fr = self.franky
        w, x, y, z = quat_normalize(ee_quat)
        target = fr.Affine(np.asarray(ee_pos, dtype=np.float64), np.array([x, y, z, w]))
        try:
            self.robot.poll_motion()  # raises what went wrong during the previous motion
        except fr.Exception as err:  # libfranka: a reflex, a limit violation, a lost connection
            raise self._fail("the robot reported an error", err) from None
        except RuntimeError as err:
            # franky's trajectory planner (Ruckig) could not replan from the measured state; the
            # robot itself is fine and holds still, and the new target below starts a new
            # motion. Tolerated unless it keeps happening.
            self.planner_failures += 1
            self._consecutive_planner_failures += 1
            if self._consecutive_planner_failures > self.max_planner_failures:
                raise self._fail(
                    f"the motion planner failed {self._consecutive_planner_failures} times in a row", err
                ) from None
        else:
            self._consecutive_planner_failures = 0
        try:
            self.robot.move(fr.CartesianMotion(target, fr.ReferenceType.Absolute), asynchronous=True)
        except Exception as err:
            raise self._fail("the robot rejected the motion", err) from None
        if gripper_width is not None and self.gripper is not None:
            self._move_gripper(gripper_width)

    def _move_gripper(self, width: float) -> None:
        if self._last_width is not None and abs(width - self._last_width) < 0.005:
            return
        try:
            self.gripper.move_async(float(width), 0.1)  # type: ignore[union-attr]
        except Exception as err:
            raise self._fail("the gripper reported an error", err) from None
        self._last_width = float(width)

    def read(self, cameras: bool = False) -> RobotState:
        try:
            js = self.robot.current_joint_state
            pose = self.robot.current_cartesian_state.pose.end_effector_pose
        except Exception as err:
            raise self._fail("reading the robot state failed", err) from None
        qx, qy, qz, qw = np.asarray(pose.quaternion, dtype=np.float64)
        width = 0.0
        if self.gripper is not None:
            try:
                width = float(self.gripper.width)
            except Exception as err:
                raise self._fail("reading the gripper failed", err) from None
        state = RobotState(
            q=np.asarray(js.position, dtype=np.float64),
            dq=np.asarray(js.velocity, dtype=np.float64),
            ee_pos=np.asarray(pose.translation, dtype=np.float64),
            ee_quat=quat_normalize(np.array([qw, qx, qy, qz])),
            gripper_width=width,
        )
        if cameras:
            state.images = {cam.name: cam.read() for cam in self.cameras}
        return state

    def wait_until_still(self, timeout: float) -> bool:
        """Block until the current motion ends (``True``) or ``timeout`` passes (``False``)."""
        try:
            return bool(self.robot.join_motion(timeout=timeout))
        except Exception as err:
            raise self._fail("the robot reported an error", err) from None

    def close(self) -> None:
        """Stop the motion and disconnect (the robot accepts one client at a time)."""
        robot, self.robot = getattr(self, "robot", None), None
        if robot is not None:
            try:
                robot.stop()
            except Exception:
                pass
            del robot  # the connection closes when the last reference goes
        self.gripper = None
        for cam in self.cameras:
            cam.close()
        self.cameras = []

"""``FrankaEnv``: a gymnasium environment of one Franka arm, simulated or real, with a reach task.

Registered ids (see :mod:`rlinf_hw_franka.envs`):

* ``rlinf/FrankaReach-v0``: the MuJoCo twin (``backend="mujoco"``), no real-time pacing.
* ``rlinf/FrankaReachReal-v0``: a real arm through franky (``backend="franky"``, ``robot_ip=``).
* ``rlinf/FrankaInstructReach-v0``: the twin with coloured cubes and an instruction naming one
  (:class:`rlinf_hw_franka.instruct.FrankaInstructReachEnv`, a subclass).

Action (``Box(-1, 1)``): the end-effector position delta ``dx, dy, dz`` (scaled by
``max_delta_pos`` metres), then with ``rotation=True`` a rotation vector (scaled by
``max_delta_rot`` radians), then with a gripper its opening (-1 closed, +1 open). The new target
is the measured end-effector position plus the delta, clipped to ``safety_box``; without
``rotation`` the orientation is held at the one measured after reset.

Observation (``Dict``; ``obs_mode="flat"`` concatenates it into one ``Box``): ``joint_pos`` (7),
``joint_vel`` (7), ``ee_pos`` (3), ``ee_quat`` (4, ``w x y z``), ``gripper_width`` (1, with a
gripper), ``target_pos`` (3), and with ``cameras`` an ``images`` dict of ``(H, W, 3)`` uint8
(simulated cameras are rendered only when asked for).

``obs_mode="vla"`` is the flat dict a vision-language-action policy reads, the same from the twin
and from a real arm: ``image`` (the first camera, ``(H, W, 3)`` uint8), ``image_<name>`` for
each further camera, ``state`` (``float32``: ``joint_pos, joint_vel, ee_pos, ee_quat`` and
``gripper_width`` with a gripper; nothing about the target) and ``instruction``
(:data:`INSTRUCTION_SPACE`, a ``str``; ``instruction=`` or ``reset(options={"instruction":
...})``). Frames of another size than ``image_size`` are resized (nearest neighbour). With
``privileged=True`` it also holds ``privileged`` (``float32`` (6): ``target_pos`` and
``target_pos - ee_pos``), what a training-time critic may read and the policy must not
(asymmetric actor-critic: the policy still acts from the camera, the state and the words).

Reward: ``-distance(ee_pos, target_pos)`` (metres, dense). ``info["is_success"]`` is
``distance < success_threshold``. With ``terminate_on_success`` an episode ends on success.

Control rate: each step is one period of ``control_hz``. With ``realtime`` (the default for a
real robot) the env sleeps until the period's deadline, never a negative time; a step whose work
(including the policy's time between steps) ran past the deadline is an overrun, counted in
``info["overruns"]`` (per episode) and flagged in ``info["step_overrun"]``, next to
``period_s``, ``period_error_s`` and ``work_s`` (``timing_info``, on by default when paced).
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlinf_core.errors import ConfigError
from rlinf_hw_franka.backends import Backend, RobotState, quat_mul, rotvec_to_quat
from rlinf_hw_franka.cameras import Camera
from rlinf_hw_franka.control import RateKeeper
from rlinf_hw_franka.mjcf import FINGER_TRAVEL, HOME_Q

__all__ = [
    "DEFAULT_SAFETY_BOX",
    "DEFAULT_TARGET_BOX",
    "INSTRUCTION_CHARSET",
    "INSTRUCTION_MAX_LENGTH",
    "INSTRUCTION_SPACE",
    "FrankaEnv",
    "resize_nearest",
]

Box3 = tuple[Sequence[float], Sequence[float]]

#: Where the end effector may be commanded (base frame, metres): in front of the robot, above
#: the table.
DEFAULT_SAFETY_BOX: Box3 = ((0.25, -0.40, 0.05), (0.75, 0.40, 0.75))
#: Where reach targets are sampled.
DEFAULT_TARGET_BOX: Box3 = ((0.35, -0.25, 0.15), (0.65, 0.25, 0.45))
#: Instructions: at most this many characters of :data:`INSTRUCTION_CHARSET`.
INSTRUCTION_MAX_LENGTH = 64
#: Letters, digits, space and ASCII punctuation (gymnasium's default ``Text`` charset has no space).
INSTRUCTION_CHARSET = string.ascii_letters + string.digits + " " + string.punctuation
#: The ``instruction`` entry of ``obs_mode="vla"`` observations.
INSTRUCTION_SPACE = spaces.Text(max_length=INSTRUCTION_MAX_LENGTH, charset=INSTRUCTION_CHARSET)


def resize_nearest(img: np.ndarray, height: int, width: int) -> np.ndarray:
    """``img`` (h, w, 3) resized to ``(height, width, 3)`` by nearest-neighbour sampling (numpy
    only; the frame itself when it already has that size)."""
    h, w = img.shape[:2]
    if (h, w) == (height, width):
        return img
    rows = (np.arange(height) * h // height).clip(0, h - 1)
    cols = (np.arange(width) * w // width).clip(0, w - 1)
    return np.ascontiguousarray(img[rows[:, None], cols[None, :]])


def check_instruction(text: Any, what: str = "instruction") -> str:
    """``text`` if it is a str that :data:`INSTRUCTION_SPACE` holds, else a :class:`ConfigError`."""
    if not isinstance(text, str) or not 1 <= len(text) <= INSTRUCTION_MAX_LENGTH:
        raise ConfigError(f"{what} must be a str of 1 to {INSTRUCTION_MAX_LENGTH} characters, got {text!r}")
    bad = sorted(set(text) - set(INSTRUCTION_CHARSET))
    if bad:
        raise ConfigError(
            f"{what} {text!r} has characters outside letters, digits, space and punctuation: {bad}"
        )
    return text


def _box(value: Box3, name: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        lo = np.asarray(value[0], dtype=np.float64).reshape(3)
        hi = np.asarray(value[1], dtype=np.float64).reshape(3)
    except (TypeError, ValueError, IndexError):
        raise ConfigError(
            f"{name} must be [[x_min, y_min, z_min], [x_max, y_max, z_max]] in metres, got {value!r}"
        ) from None
    if not np.all(lo < hi):
        raise ConfigError(
            f"{name}: every minimum must be below its maximum, got low={lo.tolist()} high={hi.tolist()}"
        )
    return lo, hi


class FrankaEnv(gym.Env):
    """One Franka arm as a gymnasium environment (see the module docstring for the spaces).

    Parameters:
        backend: ``"mujoco"`` (the twin) or ``"franky"`` (a real arm / franka-sim), or a
            :class:`~rlinf_hw_franka.backends.Backend` instance.
        robot_ip: the arm's address (franky backend).
        hardware: the ``WorkerInfo.hardware`` mapping of a worker placed on a Franka (robot IP,
            cameras, gripper, control rate); explicit arguments win over it.
        control_hz: control rate (default: the hardware's ``control_hz``, else 10).
        realtime: sleep to hold the rate; default ``True`` for franky, ``False`` for mujoco.
        rotation: include a rotation delta in the action.
        gripper: include the gripper in action and observation (default: the hardware's
            ``gripper_type`` is ``franka``; ``True`` for the twin).
        safety_box, target_box: ``[[x, y, z]_min, [x, y, z]_max]`` in metres, base frame.
        max_delta_pos, max_delta_rot: action scale (m and rad per step).
        success_threshold: distance (m) that counts as reached.
        terminate_on_success: end the episode when reached.
        home_q: joint configuration of reset.
        cameras: sim: MJCF camera names (``front``, ``table``, ``wrist``; ``obs_mode="vla"``
            default ``["table"]``); franky: RealSense serials or
            :class:`~rlinf_hw_franka.cameras.Camera` objects (default: the hardware's
            ``camera_serials`` when its ``camera_type`` is realsense).
        image_size: ``(height, width)`` of images.
        obs_mode: ``"dict"``, ``"flat"`` (no cameras) or ``"vla"`` (``image``, ``state``,
            ``instruction``; at least one camera).
        instruction: the ``instruction`` of ``obs_mode="vla"`` (default ``"reach the target"``).
        privileged: ``obs_mode="vla"``: add the ``privileged`` entry (the target; see the module
            docstring) for an asymmetric critic.
        render_mode: ``"rgb_array"`` renders the ``front`` camera (twin only).
        sim_timestep: physics step of the twin (s).
        fast_render: render the twin's cameras without multisampling, shadows and reflections
            and with coarser meshes: about 1 ms instead of over 100 ms for a 64x64 frame on a
            software renderer (Mesa's llvmpipe through EGL). ``False`` for nicer pictures.
        dynamics_factor, realtime_kernel, motion_timeout: franky settings.
        timing_info: put the control-loop timing (``overruns``, ``step_overrun``, ``period_s``,
            ``period_error_s``, ``work_s``) into ``info``; default: when ``realtime``. (Off for
            unpaced simulation, whose info must be deterministic for a given seed.)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        backend: str | Backend = "mujoco",
        *,
        task: Literal["reach"] = "reach",
        robot_ip: str | None = None,
        hardware: Mapping[str, Any] | None = None,
        control_hz: float | None = None,
        realtime: bool | None = None,
        rotation: bool = False,
        gripper: bool | None = None,
        safety_box: Box3 = DEFAULT_SAFETY_BOX,
        target_box: Box3 = DEFAULT_TARGET_BOX,
        max_delta_pos: float = 0.05,
        max_delta_rot: float = 0.2,
        success_threshold: float = 0.03,
        terminate_on_success: bool = False,
        home_q: Sequence[float] = HOME_Q,
        cameras: Sequence[str] | None = None,
        image_size: tuple[int, int] = (128, 128),
        obs_mode: Literal["dict", "flat", "vla"] = "dict",
        instruction: str | None = None,
        privileged: bool = False,
        render_mode: str | None = None,
        sim_timestep: float = 0.002,
        fast_render: bool = True,
        dynamics_factor: float = 0.2,
        realtime_kernel: bool = False,
        motion_timeout: float = 20.0,
        timing_info: bool | None = None,
    ) -> None:
        super().__init__()
        hw = dict(hardware or {})
        if task != "reach":
            raise ConfigError(f"unknown task {task!r}; FrankaEnv implements: reach")
        if obs_mode not in ("dict", "flat", "vla"):
            raise ConfigError(f"obs_mode must be 'dict', 'flat' or 'vla', got {obs_mode!r}")
        self.instruction = check_instruction(instruction if instruction is not None else "reach the target")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        self.render_mode = render_mode
        hz = control_hz if control_hz is not None else float(hw.get("control_hz", 10.0))
        if not hz > 0:
            raise ConfigError(f"control_hz must be positive, got {hz!r}")
        self.control_hz = hz
        self.rotation = rotation
        self.safety_lo, self.safety_hi = _box(safety_box, "safety_box")
        self.target_lo, self.target_hi = _box(target_box, "target_box")
        self.max_delta_pos = float(max_delta_pos)
        self.max_delta_rot = float(max_delta_rot)
        self.success_threshold = float(success_threshold)
        self.terminate_on_success = terminate_on_success
        self.home_q = np.asarray(home_q, dtype=np.float64).reshape(7)
        self.obs_mode = obs_mode
        if privileged and obs_mode != "vla":
            raise ConfigError(
                f"privileged=True adds an entry to obs_mode='vla' observations; obs_mode={obs_mode!r} "
                "already holds target_pos"
            )
        self.privileged = bool(privileged)

        if isinstance(backend, Backend):
            self.backend = backend
            self.gripper = bool(gripper) if gripper is not None else False
            cams: list[str] = []
        elif backend == "mujoco":
            from rlinf_hw_franka.backends.mujoco_backend import MujocoBackend

            self.gripper = True if gripper is None else bool(gripper)
            cams = list(cameras) if cameras is not None else (["table"] if obs_mode == "vla" else [])
            render_cams = [*cams, "front"] if render_mode == "rgb_array" and "front" not in cams else cams
            self.backend = MujocoBackend(
                timestep=sim_timestep,
                cameras=render_cams,
                image_size=image_size,
                gripper=self.gripper,
                fast_render=fast_render,
                **self._scene_options(),
            )
        elif backend == "franky":
            from rlinf_hw_franka.backends.franky_backend import FrankyBackend
            from rlinf_hw_franka.cameras import RealSenseCamera

            ip = robot_ip or hw.get("robot_ip")
            if not ip and hw:
                # Left out of the config: this node's ROBOT_IP names it (one address per robot).
                import os

                from rlinf_hw_franka.config import robot_ip_from_env

                ip = robot_ip_from_env(int(hw.get("local_rank", 0)), int(hw.get("node_rank", 0)), os.environ)
            if not ip:
                raise ConfigError(
                    "the franky backend needs robot_ip= (or the hardware info of a worker placed on a Franka)"
                )
            self.gripper = (
                (hw.get("gripper_type", "franka") == "franka") if gripper is None else bool(gripper)
            )
            if cameras is None:
                cams = list(hw.get("camera_serials", [])) if hw.get("camera_type") == "realsense" else []
            else:
                cams = list(cameras)
            h, w = image_size
            cam_objs = [c if isinstance(c, Camera) else RealSenseCamera(c, width=w, height=h) for c in cams]
            self.backend = FrankyBackend(
                ip,
                realtime_kernel=realtime_kernel,
                dynamics_factor=dynamics_factor,
                gripper=self.gripper,
                cameras=cam_objs,
                motion_timeout=motion_timeout,
            )
            cams = [c.name for c in cam_objs]
        else:
            raise ConfigError(f"unknown backend {backend!r}; FrankaEnv backends: mujoco, franky")
        self.camera_names = cams
        if obs_mode == "flat" and cams:
            raise ConfigError("obs_mode='flat' cannot carry camera images; use obs_mode='dict' with cameras")
        if obs_mode == "vla" and not cams:
            raise ConfigError(
                "obs_mode='vla' needs at least one camera: cameras=[...] (twin: front, table, wrist; "
                "a real arm: RealSense serials, or the hardware's camera_serials)"
            )
        if len(set(cams)) != len(cams):
            raise ConfigError(f"cameras must be distinct, got {cams}")
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.realtime = self.backend.physical if realtime is None else bool(realtime)
        self.rate = RateKeeper(self.control_hz, realtime=self.realtime)
        self.timing_info = self.realtime if timing_info is None else bool(timing_info)

        n_act = 3 + (3 if rotation else 0) + (1 if self.gripper else 0)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(n_act,), dtype=np.float32)
        inf = np.inf
        parts: dict[str, spaces.Space[Any]] = {
            "joint_pos": spaces.Box(-inf, inf, shape=(7,), dtype=np.float32),
            "joint_vel": spaces.Box(-inf, inf, shape=(7,), dtype=np.float32),
            "ee_pos": spaces.Box(-inf, inf, shape=(3,), dtype=np.float32),
            "ee_quat": spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32),
        }
        if self.gripper:
            parts["gripper_width"] = spaces.Box(0.0, 2 * FINGER_TRAVEL + 0.01, shape=(1,), dtype=np.float32)
        parts["target_pos"] = spaces.Box(-inf, inf, shape=(3,), dtype=np.float32)
        h, w = image_size
        if cams:
            parts["images"] = spaces.Dict(
                {c: spaces.Box(0, 255, shape=(h, w, 3), dtype=np.uint8) for c in cams}
            )
        #: ``obs_mode="vla"``: observation key of each camera (``image``, then ``image_<name>``).
        self.image_keys = {c: "image" if i == 0 else f"image_{c}" for i, c in enumerate(cams)}
        if obs_mode == "vla":
            n_state = sum(int(np.prod(parts[k].shape)) for k in self._state_keys())
            vla: dict[str, spaces.Space[Any]] = {
                key: spaces.Box(0, 255, shape=(h, w, 3), dtype=np.uint8) for key in self.image_keys.values()
            }
            vla["state"] = spaces.Box(-inf, inf, shape=(n_state,), dtype=np.float32)
            vla["instruction"] = INSTRUCTION_SPACE
            if self.privileged:
                vla["privileged"] = spaces.Box(-inf, inf, shape=(6,), dtype=np.float32)
            self.observation_space = spaces.Dict(vla)
        elif obs_mode == "flat":
            n = sum(int(np.prod(s.shape)) for s in parts.values()) + 3  # + target - ee
            self.observation_space = spaces.Box(-inf, inf, shape=(n,), dtype=np.float32)
        else:
            self.observation_space = spaces.Dict(parts)

        self._state: RobotState | None = None
        self._hold_quat = np.array([1.0, 0.0, 0.0, 0.0])
        self.target = (self.target_lo + self.target_hi) / 2
        self._steps = 0

    # -- hooks of task subclasses ----------------------------------------------------------------
    def _scene_options(self) -> dict[str, Any]:
        """Extra :class:`~rlinf_hw_franka.backends.mujoco_backend.MujocoBackend` arguments (the
        twin's scene objects); called by ``__init__`` before the backend exists."""
        return {}

    def _sample_target(self, options: dict[str, Any]) -> np.ndarray:
        """The episode's target (base frame, m), after the backend's reset; ``self.np_random``
        is seeded."""
        if "target" in options:
            target = np.asarray(options["target"], dtype=np.float64).reshape(3)
            if np.any(target < self.safety_lo) or np.any(target > self.safety_hi):
                raise ConfigError(f"options['target'] {target.tolist()} lies outside the safety box")
            return target
        return self.np_random.uniform(self.target_lo, self.target_hi)

    def _action_vector(self, action: Any) -> np.ndarray:
        """``action`` as the flat float vector :meth:`step` applies (EE delta, rotation, gripper
        opening; not yet clipped); ``ValueError`` for one of the wrong shape or not finite."""
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"action contains NaN or infinity: {a.tolist()}")
        return a

    def _on_read(self, st: RobotState) -> None:
        """Called after every reading of the robot (reset and step), before the info, reward and
        observation are made from it: where a task follows what moves in its scene."""

    def _is_success(self, st: RobotState, distance: float) -> bool:
        """Whether the task is achieved in state ``st`` (``info["success"]``); the reach task's:
        the end effector within ``success_threshold`` of the target."""
        return distance < self.success_threshold

    def _state_keys(self) -> list[str]:
        return ["joint_pos", "joint_vel", "ee_pos", "ee_quat"] + (["gripper_width"] if self.gripper else [])

    # -- gymnasium API ---------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if "instruction" in options:
            self.instruction = check_instruction(options["instruction"], "options['instruction']")
        self.backend.reset(self.home_q)
        self.target = self._sample_target(options)
        self.backend.set_target_marker(self.target)
        self._state = self.backend.read(cameras=bool(self.camera_names))
        self._hold_quat = self._state.ee_quat.copy()
        self._steps = 0
        self._on_read(self._state)
        self.rate.reset()
        return self._obs(self._state), self._info(self._state, overran=False, clipped=False)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self._state is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        a = np.clip(self._action_vector(action), -1.0, 1.0)
        st = self._state
        raw = st.ee_pos + a[:3] * self.max_delta_pos
        pos = np.clip(raw, self.safety_lo, self.safety_hi)
        clipped = bool(np.any(pos != raw))
        i = 3
        if self.rotation:
            quat = quat_mul(rotvec_to_quat(a[3:6] * self.max_delta_rot), st.ee_quat)
            i = 6
        else:
            quat = self._hold_quat
        width = float((a[i] + 1.0) / 2.0 * 2 * FINGER_TRAVEL) if self.gripper else None
        self.backend.command(pos, quat, width)
        if not self.backend.physical:
            self.backend.advance(1.0 / self.control_hz)
        overran = self.rate.wait()
        self._state = st = self.backend.read(cameras=bool(self.camera_names))
        self._steps += 1
        self._on_read(st)
        info = self._info(st, overran=overran, clipped=clipped)
        reward = self._reward(info["distance"], info["success"])
        terminated = bool(info["success"] and self.terminate_on_success)
        return self._obs(st), reward, terminated, False, info

    def expert_action(self) -> np.ndarray:
        """A scripted reach (what simulation benchmarks call a demonstrator): the action that
        moves the end effector straight towards the target, as far as one step allows, holding
        the orientation and the gripper. It reads the target, so it is for collecting training
        data (``model.warm_start.actions: expert``), never for acting on what a policy sees."""
        return self.reach_action(self.target)

    def reach_action(self, point: np.ndarray) -> np.ndarray:
        """The demonstrator's action towards ``point`` (base frame, m): straight there, as far
        as one step allows, holding the orientation and the gripper open."""
        if self._state is None:
            raise gym.error.ResetNeeded("call reset() before expert_action()")
        a = np.zeros(self.action_space.shape, dtype=np.float32)
        a[:3] = np.clip((np.asarray(point) - self._state.ee_pos) / self.max_delta_pos, -1.0, 1.0)
        if self.gripper:
            a[-1] = 1.0  # open
        return a

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        render = getattr(self.backend, "render", None)
        if render is None:
            raise ConfigError("render_mode='rgb_array' is only available with the mujoco backend")
        return render()["front"]

    def _reward(self, distance: float, success: bool) -> float:
        return -distance

    def close(self) -> None:
        self.backend.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _obs(self, st: RobotState) -> Any:
        obs: dict[str, Any] = {
            "joint_pos": st.q.astype(np.float32),
            "joint_vel": st.dq.astype(np.float32),
            "ee_pos": st.ee_pos.astype(np.float32),
            "ee_quat": st.ee_quat.astype(np.float32),
        }
        if self.gripper:
            obs["gripper_width"] = np.array([st.gripper_width], dtype=np.float32)
        if self.obs_mode == "vla":
            h, w = self.image_size
            vla: dict[str, Any] = {
                key: resize_nearest(st.images[cam], h, w) for cam, key in self.image_keys.items()
            }
            vla["state"] = np.concatenate([obs[k] for k in self._state_keys()])
            vla["instruction"] = self.instruction
            if self.privileged:
                vla["privileged"] = np.concatenate([self.target, self.target - st.ee_pos]).astype(np.float32)
            return vla
        obs["target_pos"] = self.target.astype(np.float32)
        if self.obs_mode == "flat":
            return np.concatenate([*obs.values(), (self.target - st.ee_pos).astype(np.float32)])
        if self.camera_names:
            obs["images"] = {c: st.images[c] for c in self.camera_names if c in st.images}
        return obs

    def _info(self, st: RobotState, *, overran: bool, clipped: bool) -> dict[str, Any]:
        dist = float(np.linalg.norm(st.ee_pos - self.target))
        success = bool(self._is_success(st, dist))
        info: dict[str, Any] = {
            "success": success,
            "is_success": success,
            "distance": dist,
            "safety_clipped": clipped,
        }
        if self.timing_info:
            s = self.rate.stats
            info.update(
                step_overrun=overran,
                overruns=s.overruns,
                period_s=s.last_period_s,
                period_error_s=s.last_error_s,
                work_s=s.last_work_s,
            )
        return info

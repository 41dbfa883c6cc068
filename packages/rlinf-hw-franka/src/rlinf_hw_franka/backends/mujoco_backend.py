"""The MuJoCo twin: this package's Panda MJCF with the Franka Hand, driven like the real arm.

An end-effector pose command is turned into a joint-position target by damped-least-squares
inverse kinematics (with a null-space pull towards the home posture), and the joint position
servos (the Menagerie gains, gravity compensated like the real controller) track that target,
linearly interpolated over the control period. Images come from MuJoCo's offscreen renderer,
only for the cameras asked for.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import numpy as np

from rlinf_core.errors import ConfigError
from rlinf_hw_franka.backends import Backend, RobotState, quat_normalize
from rlinf_hw_franka.mjcf import CUBE_SIZE, FINGER_TRAVEL, JOINT_LIMITS, panda_mjcf

__all__ = ["MujocoBackend"]


def _import_mujoco():  # type: ignore[no-untyped-def]
    # MuJoCo picks its OpenGL platform when it is first imported; on a headless node (no
    # DISPLAY) offscreen rendering needs EGL.
    if "mujoco" not in sys.modules and "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"
    try:
        import mujoco
    except ImportError:
        import importlib.util

        if importlib.util.find_spec("mujoco") is not None:  # installed: its GL platform failed
            raise ConfigError(_gl_hint("MuJoCo cannot be imported", sys.exc_info()[1])) from None
        raise ConfigError(
            "the mujoco backend needs MuJoCo: pip install 'rlinf-hw-franka[sim]' (or pip install mujoco)"
        ) from None
    except Exception as err:
        # MuJoCo sets up MUJOCO_GL's platform when imported (RuntimeError, AttributeError, ...).
        raise ConfigError(_gl_hint("MuJoCo cannot be imported", err)) from None
    return mujoco


def _gl_hint(what: str, err: BaseException | None) -> str:
    """An error message for an OpenGL platform that does not work, naming ``MUJOCO_GL``."""
    gl = os.environ.get("MUJOCO_GL")
    setting = f"MUJOCO_GL={gl}" if gl is not None else "MUJOCO_GL unset"
    return (
        f"{what} with {setting} ({type(err).__name__}: {err}). Offscreen rendering needs a working "
        "OpenGL platform: set MUJOCO_GL=egl before the process imports mujoco (EGL works headless, "
        "in software through Mesa without a GPU; install libegl1 / libgl1-mesa-dri if it is "
        "missing), or MUJOCO_GL=glfw with a display"
    )


def _preload_triton() -> None:
    """Load triton's LLVM before an offscreen GL context loads Mesa's.

    Mesa's software rasteriser (llvmpipe, what EGL falls back to without a GPU) and triton (which
    torch pulls in on CUDA builds, and imports through ``torch._dynamo`` the first time an
    optimiser steps) each carry their own LLVM. Loaded in that order they crash the process with a
    segmentation fault when triton is imported; the other order works. A process that renders
    cameras and also trains (the in-process runner) would die mid-run, so when triton is installed
    it is imported here, before the first renderer exists.
    """
    import importlib.util

    if "triton" in sys.modules or importlib.util.find_spec("triton") is None:
        return
    try:
        import triton  # noqa: F401
    except Exception:  # a broken triton install is torch's problem, not the renderer's
        pass


class MujocoBackend(Backend):
    """The simulated Panda.

    Parameters:
        timestep: physics step (s).
        cameras: names of MJCF cameras to render (``front``, ``wrist``); none by default.
        image_size: ``(height, width)`` of rendered images.
        gripper: simulate the Franka Hand's fingers (``False``: they stay open).
        ik_iterations: damped-least-squares iterations per command.
        cubes, cube_size, cube_mass, target_marker: scene objects (see
            :func:`~rlinf_hw_franka.mjcf.panda_mjcf`; with ``cube_mass`` the cubes are solid
            free bodies); :meth:`set_cubes` places the cubes, :meth:`cube_positions` reads where
            they are and :meth:`finger_contacts` which of them the fingers touch.
        fast_render: render without multisampling, shadows and reflections, into an offscreen
            buffer of the image's size, with coarser meshes (about 1 ms instead of over 100 ms for
            a 64x64 frame on Mesa's software renderer; the images stay deterministic).
    """

    name = "mujoco"
    physical = False

    def __init__(
        self,
        *,
        timestep: float = 0.002,
        cameras: Sequence[str] = (),
        image_size: tuple[int, int] = (128, 128),
        gripper: bool = True,
        ik_iterations: int = 8,
        cubes: int = 0,
        cube_size: float = CUBE_SIZE,
        cube_mass: float | None = None,
        target_marker: bool = True,
        fast_render: bool = True,
    ) -> None:
        mujoco = _import_mujoco()
        self._mj = mujoco
        xml = panda_mjcf(
            hand=True,
            scene=True,
            timestep=timestep,
            cubes=cubes,
            cube_size=cube_size,
            cube_mass=cube_mass,
            target_marker=target_marker,
        )
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.fast_render = fast_render
        self.data = mujoco.MjData(self.model)
        self._ik = mujoco.MjData(self.model)
        self.gripper = gripper
        self.ik_iterations = ik_iterations
        m = self.model
        self._tcp = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "tcp")
        self._arm_qpos = np.array(
            [m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"joint{i}")] for i in range(1, 8)]
        )
        self._arm_dof = np.array(
            [m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"joint{i}")] for i in range(1, 8)]
        )
        self._finger_qpos = np.array(
            [
                m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"finger_joint_{s}")]
                for s in ("left", "right")
            ]
        )
        self._finger_dof = np.array(
            [
                m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"finger_joint_{s}")]
                for s in ("left", "right")
            ]
        )
        body = mujoco.mjtObj.mjOBJ_BODY
        self._target_mocap = (
            int(m.body_mocapid[mujoco.mj_name2id(m, body, "target")]) if target_marker else -1
        )
        cube_bodies = [mujoco.mj_name2id(m, body, f"cube{i}") for i in range(cubes)]
        self.solid_cubes = cube_mass is not None
        self._cube_mocap = np.array([m.body_mocapid[b] for b in cube_bodies], dtype=int)
        self._cube_body = np.array(cube_bodies, dtype=int)
        joint = mujoco.mjtObj.mjOBJ_JOINT
        cube_joints = (
            [mujoco.mj_name2id(m, joint, f"cube{i}") for i in range(cubes)] if self.solid_cubes else []
        )
        self._cube_qpos = np.array([m.jnt_qposadr[j] for j in cube_joints], dtype=int)
        self._cube_dof = np.array([m.jnt_dofadr[j] for j in cube_joints], dtype=int)
        geom = mujoco.mjtObj.mjOBJ_GEOM
        self._pad_geom = np.array([mujoco.mj_name2id(m, geom, f"{s}_finger_pad") for s in ("left", "right")])
        self._cube_geom = np.array(
            [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"cube{i}") for i in range(cubes)], dtype=int
        )
        self._lo = np.array([lo for lo, _ in JOINT_LIMITS])
        self._hi = np.array([hi for _, hi in JOINT_LIMITS])
        self._home = np.zeros(7)
        self._q_cmd = np.zeros(7)
        self._finger_cmd = FINGER_TRAVEL
        self._jacp = np.zeros((3, m.nv))
        self._jacr = np.zeros((3, m.nv))
        self.camera_names = list(cameras)
        known = [m.camera(i).name for i in range(m.ncam)]
        unknown = [c for c in self.camera_names if c not in known]
        if unknown:
            raise ConfigError(f"unknown simulated camera(s) {unknown}; the twin has: {', '.join(known)}")
        self.image_size = image_size
        self._renderer = None

    # -- helpers ----------------------------------------------------------------------------
    def _tcp_pose(self, data) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
        quat = np.zeros(4)
        self._mj.mju_mat2Quat(quat, data.site_xmat[self._tcp])
        return data.site_xpos[self._tcp].copy(), quat_normalize(quat)

    def solve_ik(self, ee_pos: np.ndarray, ee_quat: np.ndarray, q0: np.ndarray) -> np.ndarray:
        """Joint positions (7,) that put the TCP at ``ee_pos`` / ``ee_quat`` (w, x, y, z), by
        damped least squares started at ``q0``, with a null-space pull towards home."""
        mj, m, d = self._mj, self.model, self._ik
        q = np.clip(q0.astype(np.float64), self._lo, self._hi)
        err = np.zeros(6)
        cur = np.zeros(4)
        neg = np.zeros(4)
        dif = np.zeros(4)
        lam2 = 1e-4
        for _ in range(self.ik_iterations):
            d.qpos[self._arm_qpos] = q
            mj.mj_kinematics(m, d)
            mj.mj_comPos(m, d)
            err[:3] = ee_pos - d.site_xpos[self._tcp]
            mj.mju_mat2Quat(cur, d.site_xmat[self._tcp])
            mj.mju_negQuat(neg, cur)
            mj.mju_mulQuat(dif, ee_quat, neg)
            mj.mju_quat2Vel(err[3:], dif, 1.0)
            if np.linalg.norm(err[:3]) < 1e-4 and np.linalg.norm(err[3:]) < 1e-3:
                break
            mj.mj_jacSite(m, d, self._jacp, self._jacr, self._tcp)
            jac = np.vstack([self._jacp[:, self._arm_dof], self._jacr[:, self._arm_dof]])
            jjt = jac @ jac.T + lam2 * np.eye(6)
            dq = jac.T @ np.linalg.solve(jjt, err)
            # Null-space posture task: stay close to the home configuration.
            pinv = jac.T @ np.linalg.inv(jjt)
            dq += (np.eye(7) - pinv @ jac) @ (0.1 * (self._home - q))
            step = np.max(np.abs(dq))
            if step > 0.2:
                dq *= 0.2 / step
            q = np.clip(q + dq, self._lo, self._hi)
        return q

    # -- Backend ----------------------------------------------------------------------------
    def reset(self, home_q: np.ndarray) -> None:
        mj = self._mj
        self._home = np.asarray(home_q, dtype=np.float64).copy()
        mj.mj_resetData(self.model, self.data)
        self.data.qpos[self._arm_qpos] = self._home
        self.data.qpos[self._finger_qpos] = FINGER_TRAVEL
        self._q_cmd = self._home.copy()
        self._finger_cmd = FINGER_TRAVEL
        self.data.ctrl[:7] = self._home
        self.data.ctrl[7:9] = FINGER_TRAVEL
        mj.mj_forward(self.model, self.data)

    def command(self, ee_pos: np.ndarray, ee_quat: np.ndarray, gripper_width: float | None) -> None:
        self._q_prev = self._q_cmd.copy()
        self._q_cmd = self.solve_ik(ee_pos, ee_quat, self.data.qpos[self._arm_qpos])
        if gripper_width is not None and self.gripper:
            self._finger_cmd = float(np.clip(gripper_width / 2.0, 0.0, FINGER_TRAVEL))

    def advance(self, duration: float) -> None:
        mj, m, d = self._mj, self.model, self.data
        steps = max(1, round(duration / m.opt.timestep))
        q_prev = getattr(self, "_q_prev", self._q_cmd)
        d.ctrl[7:9] = self._finger_cmd
        for k in range(1, steps + 1):
            d.ctrl[:7] = q_prev + (self._q_cmd - q_prev) * (k / steps)
            mj.mj_step(m, d)
        self._q_prev = self._q_cmd.copy()

    def read(self, cameras: bool = False) -> RobotState:
        d = self.data
        pos, quat = self._tcp_pose(d)
        state = RobotState(
            q=d.qpos[self._arm_qpos].copy(),
            dq=d.qvel[self._arm_dof].copy(),
            ee_pos=pos,
            ee_quat=quat,
            gripper_width=float(d.qpos[self._finger_qpos].sum()),
        )
        if cameras and self.camera_names:
            state.images = self.render()
        return state

    def render(self) -> dict[str, np.ndarray]:
        """RGB images (H, W, 3, uint8) of the configured cameras."""
        if self._renderer is None:
            h, w = self.image_size
            _preload_triton()
            if self.fast_render:
                # No multisampling, an offscreen buffer of the image's size and coarser
                # tessellation: what costs on a software rasteriser, invisible at small sizes.
                vis = self.model.vis
                vis.quality.offsamples = 0
                vis.global_.offwidth, vis.global_.offheight = w, h
                vis.quality.numslices, vis.quality.numstacks = 12, 6
            try:
                self._renderer = self._mj.Renderer(self.model, height=h, width=w)
            except Exception as err:
                raise ConfigError(_gl_hint("MuJoCo cannot render offscreen", err)) from None
            if self.fast_render:
                flags = self._renderer.scene.flags
                flags[self._mj.mjtRndFlag.mjRND_SHADOW] = 0
                flags[self._mj.mjtRndFlag.mjRND_REFLECTION] = 0
        out = {}
        for name in self.camera_names:
            self._renderer.update_scene(self.data, camera=name)
            out[name] = self._renderer.render().copy()
        return out

    def set_target_marker(self, pos: np.ndarray) -> None:
        if self._target_mocap >= 0:
            self.data.mocap_pos[self._target_mocap] = pos

    def set_cubes(self, positions: np.ndarray, rgba: np.ndarray) -> None:
        """Place the scene's cubes: ``positions`` (n, 3) centres in m, ``rgba`` (n, 4) colours."""
        positions = np.asarray(positions, dtype=np.float64).reshape(-1, 3)
        rgba = np.asarray(rgba, dtype=np.float32).reshape(-1, 4)
        if len(positions) != len(self._cube_mocap) or len(rgba) != len(self._cube_mocap):
            raise ConfigError(
                f"the scene has {len(self._cube_mocap)} cube(s); got {len(positions)} position(s), "
                f"{len(rgba)} colour(s)"
            )
        self.model.geom_rgba[self._cube_geom] = rgba
        if self.solid_cubes:
            for qadr, vadr, pos in zip(self._cube_qpos, self._cube_dof, positions, strict=True):
                self.data.qpos[qadr : qadr + 7] = (*pos, 1.0, 0.0, 0.0, 0.0)
                self.data.qvel[vadr : vadr + 6] = 0.0
            self._mj.mj_forward(self.model, self.data)  # poses and contacts of the new placement
        else:
            self.data.mocap_pos[self._cube_mocap] = positions
            self._mj.mj_kinematics(self.model, self.data)  # mocap poses into xpos, for the renderer

    def cube_positions(self) -> np.ndarray:
        """``(n, 3)``: where the cubes' centres are now (m, base frame)."""
        return self.data.xpos[self._cube_body].copy()

    def finger_contacts(self) -> tuple[dict[int, float], dict[int, float]]:
        """The cubes each finger pad (left, right) touches now, penetrating or within a
        millimetre (MuJoCo contacts of the pad's geom with a cube's, found by the last physics
        step): ``{cube index: alignment}``, the alignment the largest ``|n . u|`` over those
        contacts, ``n`` a contact's normal and ``u`` the unit vector between the pads' centres
        (1: the pad presses across the gap between the fingers, 0: along a face or from above)."""
        touched: tuple[dict[int, float], dict[int, float]] = ({}, {})
        cube_of = {int(g): i for i, g in enumerate(self._cube_geom)}
        pads = [int(g) for g in self._pad_geom]
        d = self.data
        across = d.geom_xpos[pads[1]] - d.geom_xpos[pads[0]]
        across = across / max(float(np.linalg.norm(across)), 1e-9)
        for k in range(d.ncon):
            c = d.contact[k]
            if c.dist > 1e-3:
                continue
            g1, g2 = int(c.geom1), int(c.geom2)
            for side, pad in enumerate(pads):
                other = g2 if g1 == pad else g1 if g2 == pad else -1
                if other in cube_of:
                    cube = cube_of[other]
                    align = abs(float(np.dot(c.frame[:3], across)))
                    touched[side][cube] = max(touched[side].get(cube, 0.0), align)
        return touched

    def pad_positions(self) -> np.ndarray:
        """``(2, 3)``: the centres of the left and right finger pads (m, base frame)."""
        return self.data.geom_xpos[self._pad_geom].copy()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

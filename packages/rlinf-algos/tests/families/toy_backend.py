"""A simulator backend for the tests (numpy only, run by ``child/server.py`` in a child process):
a point on a line that must reach ``+1``. ``obs = [x, goal]``, action ``[dx]`` in ``[-1, 1]``
moved by ``0.25 dx``; reward ``-|goal - x|``; success while ``|goal - x| < 0.1``; episodes of
``max_episode_steps`` (default 8) steps. ``init`` picks the start ``x = -0.5 * init``;
without one, the copy's generator draws it from ``[-1, 0]``.

``spec["dict_obs"]``: observations are ``{"state": [x, goal], "instruction": "go to TASK, step T"}``
instead (a text leaf that changes every step); ``spec["odd_obs"]`` declares an observation space
of a kind rlinf cannot lay out.

Faults on demand (``spec``): ``die_at`` (``os._exit(3)`` at that step of copy 0, after writing
a line to stderr), ``hang_at`` (sleeps for ever at that step), ``raise_at`` (``ValueError``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np


class Toy:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.tasks = list(spec["tasks"])
        self.num_envs = len(self.tasks)
        self.spec = spec
        self.max_steps = int(spec.get("max_episode_steps") or 8)
        self.rngs = [np.random.default_rng(int(spec.get("seed", 0)) + i) for i in range(self.num_envs)]
        self.x = np.zeros(self.num_envs)
        self.t = [0] * self.num_envs
        self.total = 0

    def spaces(self) -> dict[str, Any]:
        state = {"kind": "box", "shape": [2], "dtype": "float32"}
        text = {"kind": "text", "max_length": 64}
        return {
            "obs": {"kind": "discrete", "n": 3}
            if self.spec.get("odd_obs")
            else {"kind": "dict", "keys": {"state": state, "instruction": text}}
            if self.spec.get("dict_obs")
            else state,
            "action": {"low": np.full(1, -1.0, np.float32), "high": np.full(1, 1.0, np.float32)},
            "max_episode_steps": self.max_steps,
            "tasks": [{"name": t, "instruction": f"go to {t}", "init_states": 3} for t in self.tasks],
        }

    def _obs(self, i: int) -> Any:
        state = np.array([self.x[i], 1.0], np.float32)
        if self.spec.get("dict_obs"):
            return {"state": state, "instruction": f"go to {self.tasks[i]}, step {self.t[i]}"}
        return state

    def reset(self, i: int, seed: int | None, init: int | None) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.rngs[i] = np.random.default_rng(seed)
        self.x[i] = -0.5 * init if init is not None else float(self.rngs[i].uniform(-1.0, 0.0))
        self.t[i] = 0
        return self._obs(i), {}

    def step(self, i: int, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if i == 0:
            self.total += 1
            if self.total == self.spec.get("die_at"):
                sys.stderr.write("toy: the simulator crashed on purpose\n")
                sys.stderr.flush()
                os._exit(3)
            if self.total == self.spec.get("hang_at"):
                time.sleep(10_000)
            if self.total == self.spec.get("raise_at"):
                raise ValueError("toy: a bad action on purpose")
        self.x[i] = float(np.clip(self.x[i] + 0.25 * float(np.asarray(action).reshape(-1)[0]), -2.0, 2.0))
        self.t[i] += 1
        dist = abs(1.0 - self.x[i])
        return self._obs(i), -dist, False, self.t[i] >= self.max_steps, {"success": dist < 0.1}

    def render(self, i: int) -> np.ndarray:
        frame = np.zeros((8, 8, 3), np.uint8)
        frame[:, int(np.clip((self.x[i] + 2) * 1.75, 0, 7))] = 255
        return frame

    def expert(self) -> np.ndarray:
        return np.clip((1.0 - self.x) / 0.25, -1.0, 1.0).astype(np.float32)[:, None]

    def close(self) -> None:
        pass


def make(spec: dict[str, Any]) -> Toy:
    return Toy(spec)

"""The *port* a collection loop talks to, and the one over a vector env in this process.

A port has ``stages`` pipeline stages of ``slots`` env slots each; ``recv(s)`` gives the env
message of stage ``s`` (``obs``; after a step also ``rew``, ``term``, ``trunc`` and ``final`` =
(slot indices, final observations) of the episodes that ended) and ``send(s, actions)`` hands
the stage its actions. A rollout worker is a port over its env links
(:class:`~rlinf_algos.runtime.workers.rollout.RolloutWorker`); :class:`LocalPort` is one over a
:class:`~rlinf_algos.envs.VectorEnvStepper` in this process. PPO's and SAC's collection loops are
written against it (``LocalPort`` runs them without workers: benchmarks' bare collectors, tests).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlinf_algos import obs as obs_tree

__all__ = ["LocalPort"]


class LocalPort:
    """A one-stage port over a :class:`~rlinf_algos.envs.VectorEnvStepper` in this process:
    ``send`` steps the envs, ``recv`` returns what the step gave, as an env worker's message."""

    stages = 1

    def __init__(self, stepper: Any) -> None:
        self.stepper = stepper
        self.slots = stepper.num_envs
        self._msg: dict[str, Any] | None = None

    def recv(self, s: int) -> dict[str, Any]:
        """The message of the last step (whose ``obs`` are the current observations)."""
        return self._msg if self._msg is not None else {"obs": self.stepper.obs}

    def send(self, s: int, actions: np.ndarray) -> None:
        step = self.stepper.step(actions)
        msg: dict[str, Any] = {
            "obs": step.obs,
            "rew": step.rewards,
            "term": step.terminated,
            "trunc": step.truncated,
        }
        done = step.done
        if done.any():
            idx = np.flatnonzero(done)
            msg["final"] = (idx, obs_tree.take(step.final_obs, idx))
        self._msg = msg

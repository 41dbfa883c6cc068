"""Success rates from ``info["is_success"]``: the env side records it per finished episode, and
``evaluate_policy`` rebuilds the env with the ``env.kwargs`` the policy was trained with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlinf_algos.envs import VectorEnvStepper
from rlinf_algos.evaluate import evaluate_policy
from rlinf_algos.models import build_policy

GOAL_ID = "rlinf-test/Goal1D-v0"


class Goal1D(gym.Env):
    """A point on a line starts at 0 and moves by ``action`` per step (4-step episodes);
    ``info["is_success"]`` when it is within 0.1 of ``goal``. Real gymnasium, no physics: the
    success bookkeeping is what is tested, so the outcome must be scriptable."""

    def __init__(self, goal: float = 1.0) -> None:
        self.goal = float(goal)
        self.observation_space = gym.spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.x = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.x, self.goal], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.x = 0.0
        return self._obs(), {"is_success": False}

    def step(self, action: Any) -> Any:
        self.x += float(np.asarray(action).reshape(-1)[0])
        ok = abs(self.x - self.goal) < 0.1
        return self._obs(), -abs(self.x - self.goal), False, False, {"is_success": ok}


@pytest.fixture(scope="module", autouse=True)
def _registered() -> Any:
    gym.register(GOAL_ID, entry_point=Goal1D, max_episode_steps=4)
    yield
    gym.registry.pop(GOAL_ID, None)


def test_successes_are_recorded_at_the_last_step_of_each_episode() -> None:
    st = VectorEnvStepper(GOAL_ID, 2, 0)
    try:
        # env 0 reaches 1.0 after 4 steps of 0.25 (success at the end); env 1 overshoots to 2.0
        # after passing through 1.0 at step 2 (success in the middle only: not a success)
        actions = np.array([[0.25], [0.5]], dtype=np.float32)
        ended = [st.step(actions) for _ in range(4)]
        assert [s.episode_successes for s in ended[:3]] == [[], [], []]
        assert ended[3].episode_successes == [1.0, 0.0]
        assert list(st.recent_successes) == [1.0, 0.0]
        assert len(ended[3].episode_returns) == 2
    finally:
        st.close()


def test_envs_without_is_success_report_none() -> None:
    st = VectorEnvStepper("Pendulum-v1", 1, 0, max_episode_steps=3)
    try:
        steps = [st.step(np.zeros((1, 1), np.float32)) for _ in range(3)]
        assert steps[-1].episode_returns and steps[-1].episode_successes == []
        assert not st.recent_successes
    finally:
        st.close()


def _save_still_policy(path: Path, env_kwargs: dict[str, Any] | None) -> None:
    """A SAC actor whose deterministic action is 0 (zero head): the point stays at 0."""
    spec = {
        "cls": "SquashedGaussianActor",
        "obs_dim": 2,
        "act_dim": 1,
        "action_low": [-1.0],
        "action_high": [1.0],
        "hidden": [8],
        "activation": "relu",
    }
    module = build_policy(spec)
    with torch.no_grad():
        for p in module.head.parameters():
            p.zero_()
    record = {"algorithm": "sac", "env_id": GOAL_ID, "spec": spec, "state_dict": module.state_dict()}
    if env_kwargs is not None:
        record["env_kwargs"] = env_kwargs
    torch.save(record, path)


def test_evaluate_policy_builds_the_env_with_the_trained_kwargs(tmp_path: Path) -> None:
    _save_still_policy(tmp_path / "at_goal.pt", {"goal": 0.0})
    res = evaluate_policy(tmp_path / "at_goal.pt", episodes=3)
    assert res["success_rate"] == 1.0 and res["mean"] == 0.0
    # a record of an older run (no env_kwargs): the id's defaults, goal 1.0, never reached
    _save_still_policy(tmp_path / "old.pt", None)
    res = evaluate_policy(tmp_path / "old.pt", episodes=2)
    assert res["success_rate"] == 0.0 and res["mean"] == pytest.approx(-4.0)

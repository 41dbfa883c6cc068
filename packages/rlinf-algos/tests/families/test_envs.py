"""MuJoCo vector envs: seeding, episode statistics, and termination vs truncation in what the
rollout side records (real MuJoCo, InvertedPendulum-v5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlinf_algos.embodied.recipe import LearnerContext
from rlinf_algos.envs import VectorEnvStepper, make_vector_env
from rlinf_algos.models.mlp import GaussianActorCritic
from rlinf_algos.ports import LocalPort
from rlinf_algos.ppo import PPOConfig
from rlinf_algos.ppo.learner import PPOLearnerSide
from rlinf_algos.ppo.rollout import collect_ppo
from rlinf_algos.replay import ReplayBuffer
from rlinf_algos.sac import functional as sac
from rlinf_core.errors import ConfigError

ENV = "InvertedPendulum-v5"


def test_seeding_is_reproducible() -> None:
    a, obs_a = make_vector_env(ENV, 2, seed=3)
    b, obs_b = make_vector_env(ENV, 2, seed=3)
    c, obs_c = make_vector_env(ENV, 2, seed=4)
    try:
        assert np.array_equal(obs_a, obs_b)
        assert not np.array_equal(obs_a, obs_c)
        assert not np.array_equal(obs_a[0], obs_a[1])  # sub-env i gets seed + i
        assert np.array_equal(a.action_space.sample(), b.action_space.sample())
    finally:
        for e in (a, b, c):
            e.close()


def test_unknown_id_names_the_path_and_close_matches() -> None:
    with pytest.raises(ConfigError) as err:
        make_vector_env("InvertedPendulum-v9", 1)
    msg = str(err.value)
    assert msg.startswith("env.id: ") and "'InvertedPendulum-v5'" in msg


def test_truncation_keeps_final_obs_and_records_stats() -> None:
    st = VectorEnvStepper(ENV, 2, seed=0, max_episode_steps=5)
    try:
        zero = np.zeros((2, 1), np.float32)
        for _ in range(4):
            step = st.step(zero)
            assert not step.done.any()
        before = st.obs.copy()
        step = st.step(zero)
        assert step.truncated.all() and not step.terminated.any()
        # the final observation continues the episode; the returned one is a fresh reset
        assert np.abs(step.final_obs - before).max() < 0.1
        assert not np.array_equal(step.final_obs, step.obs)
        assert step.episode_lengths == [5, 5] and step.episode_returns == [5.0, 5.0]
        assert st.episodes == 2 and list(st.recent_returns) == [5.0, 5.0] and st.steps == 10
    finally:
        st.close()


def test_replay_buffer_bootstraps_on_truncation_not_termination() -> None:
    """Push the pole over (termination) in env 0 while env 1 runs into its time limit (truncation);
    the buffer keeps both flags apart and the SAC target bootstraps only the truncated one."""
    st = VectorEnvStepper(ENV, 2, seed=0, max_episode_steps=6)
    buf = ReplayBuffer(64, (st.obs_dim,), (st.act_dim,))
    try:
        for _ in range(6):
            obs = st.obs
            actions = np.array([[3.0], [0.0]], np.float32)
            step = st.step(actions)
            buf.add(obs, actions, step.rewards, step.final_obs, step.terminated, step.truncated)
            if step.terminated[0]:
                # an InvertedPendulum termination: the pole angle left [-0.2, 0.2]
                assert abs(step.final_obs[0, 1]) > 0.2 and abs(step.obs[0, 1]) < 0.2
        term = np.flatnonzero(buf.terminated[: len(buf)])
        trunc = np.flatnonzero(buf.truncated[: len(buf)])
        assert len(term) >= 1 and len(trunc) >= 1
        assert not (buf.terminated & buf.truncated).any()
        n = len(buf)
        y = sac.critic_target(
            torch.from_numpy(buf.rewards[:n]),
            torch.from_numpy(buf.terminated[:n]),
            torch.full((n,), 10.0),
            torch.full((n,), 10.0),
            torch.zeros(n),
            0.0,
            0.9,
        )
        assert y[term].tolist() == pytest.approx(buf.rewards[term].tolist())
        assert y[trunc].tolist() == pytest.approx((buf.rewards[trunc] + 9.0).tolist())
    finally:
        st.close()


def test_ppo_collector_bootstraps_truncated_steps() -> None:
    torch.manual_seed(0)
    st = VectorEnvStepper(ENV, 2, seed=0, max_episode_steps=3)
    model = GaussianActorCritic(st.obs_dim, st.act_dim, (8,))
    try:
        with torch.no_grad():
            model.actor_mean[-1].bias.zero_()
            model.actor_log_std.fill_(-20.0)  # near-zero actions: no termination in 3 steps
        traj = collect_ppo(LocalPort(st), model, 7, torch.Generator().manual_seed(0))
        traj["version"] = 0
        ctx = LearnerContext(None, 1, 10.0, publish=lambda: None)
        r = PPOLearnerSide(model, PPOConfig(normalize_reward=False), ctx, st.num_envs).assemble([traj])
        assert r.obs.shape == (7, 2, 4) and r.actions.shape == (7, 2, 1)
        assert r.truncated[:, 0].tolist() == [False, False, True, False, False, True, False]
        assert not r.terminated.any()
        assert (r.final_values[r.truncated] != 0).all() and (r.final_values[~r.truncated] == 0).all()
    finally:
        st.close()

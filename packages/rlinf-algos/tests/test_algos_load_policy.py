"""``rlinf_algos.load_policy(run_dir)``: a trained run's policy in a plain gymnasium loop (PPO,
SAC, embodied GRPO; single observations and batches), and a language-model run's transformers
model and tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlinf_algos
from rlinf_algos.training import run_training
from rlinf_core.errors import RlinfError

ENV = "InvertedPendulum-v5"
ALGOS: dict[str, dict[str, Any]] = {
    "ppo": {"name": "ppo", "rollout_steps": 32, "update_epochs": 1, "minibatch_size": 64},
    "sac": {"name": "sac", "learning_starts": 64, "batch_size": 32},
    "grpo": {"name": "grpo", "group_size": 2, "num_groups": 1},
}


def _train(run_dir: Path, algorithm: dict[str, Any], env_id: str = ENV, total: int = 256) -> Path:
    run_training(
        {
            "algorithm": algorithm,
            "env": {"id": env_id, "num_envs": 2},
            "model": {"hidden_sizes": [16, 16]},
            "runner": {"total_steps": total, "log_interval": total, "scheduler": "local", "loggers": ["csv"]},
        },
        run_dir=run_dir,
    )
    return run_dir


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_a_trained_policy_runs_in_a_plain_gymnasium_loop(tmp_path: Path, algo: str) -> None:
    run = _train(tmp_path / algo, ALGOS[algo])
    policy = rlinf_algos.load_policy(run)
    assert policy.algorithm == algo and policy.env_id == ENV
    assert policy.observation_space.shape == (4,) and policy.action_space.shape == (1,)
    env = gym.make(ENV)
    obs, _ = env.reset(seed=0)
    steps = 0
    for _ in range(50):  # the user's own loop: numpy in, numpy out
        action = policy.act(obs)
        assert isinstance(action, np.ndarray) and action.shape == (1,) and env.action_space.contains(action)
        obs, _, terminated, truncated, _ = env.step(action)
        steps += 1
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    assert steps == 50
    batch = np.stack([env.observation_space.sample() for _ in range(5)])
    actions = policy.act(batch)
    assert actions.shape == (5, 1)
    assert np.allclose(actions[2], policy.act(batch[2]))  # a batch row = the same observation alone
    assert np.all(np.abs(policy.act(batch * 100)) <= 3.0)  # clipped into the action space
    action, state = policy.predict(batch[0], deterministic=True)  # Stable-Baselines3's signature
    assert state is None and np.allclose(action, actions[0])
    sampled = np.stack([policy.act(batch[0], deterministic=False) for _ in range(8)])
    assert sampled.std() > 0  # a sample of the distribution, not the mean


def test_a_discrete_policy_returns_the_env_s_own_actions(tmp_path: Path) -> None:
    try:
        run = _train(tmp_path / "cartpole", ALGOS["ppo"], env_id="CartPole-v1", total=128)
    except RlinfError as err:  # discrete action spaces are not supported by this build
        pytest.skip(f"PPO on CartPole-v1: {err}")
    policy = rlinf_algos.load_policy(run)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    action = policy.act(obs)
    assert env.action_space.contains(action), action
    env.step(action)
    assert policy.act(np.stack([obs, obs])).shape == (2,)


def test_load_policy_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(RlinfError, match="no such run directory"):
        rlinf_algos.load_policy(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RlinfError, match="holds no policy") as err:
        rlinf_algos.load_policy(tmp_path / "empty")
    assert "\n" not in str(err.value)


def test_a_language_model_run_gives_its_model_and_tokenizer(tmp_path: Path) -> None:
    from rlinf_algos.lm.config import ModelInitConfig
    from rlinf_algos.lm.hf import new_model_folder

    run = tmp_path / "lm_run"
    init = ModelInitConfig(hidden_size=32, num_layers=1, num_heads=4, max_position_embeddings=64)
    new_model_folder(run / "policy", init, seed=0)  # what an LM run leaves in RUN_DIR/policy
    (run / "config.yaml").write_text("model:\n  dtype: float32\n")
    model, tokenizer = rlinf_algos.load_policy(run)
    assert not model.training and all(not p.requires_grad for p in model.parameters())
    ids = tokenizer("1+2=", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] > ids.shape[1]
    assert isinstance(tokenizer.decode(out[0]), str)

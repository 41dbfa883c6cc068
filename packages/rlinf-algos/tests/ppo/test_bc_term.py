"""PPO's behaviour-cloning term (``algorithm.bc_coef``): it pulls the policy's mean to the
demonstrations while RL moves it, decays as configured, and asks for demonstrations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import rlinf_algos
from rlinf_algos.models.mlp import GaussianActorCritic
from rlinf_algos.ppo import PPOConfig
from rlinf_algos.ppo.learner import PPOLearner
from rlinf_core.errors import ConfigError


def _demos() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    states = torch.randn(256, 3, generator=g)
    return states, torch.tanh(states[:, :2] - states[:, 2:])  # what an "expert" does


def _demo_error(learner: PPOLearner) -> float:
    states, actions = _demos()
    with torch.no_grad():
        m = learner.model
        return float((m.action_mean(m.normalize(states)) - actions).pow(2).sum(-1).mean())


def _train(
    rollout: Any, bc_coef: float, updates: int = 8, **kw: int
) -> tuple[PPOLearner, list[dict[str, float]]]:
    cfg = PPOConfig(minibatch_size=32, update_epochs=2, lr=1e-2, bc_coef=bc_coef, **kw)
    torch.manual_seed(0)
    learner = PPOLearner(GaussianActorCritic(3, 2, (16,), normalize_obs=False), cfg, seed=0, demos=_demos())
    return learner, [learner.update(rollout(k, act_dim=2)) for k in range(updates)]


def test_the_bc_term_keeps_the_policy_on_the_demonstrations(random_ppo_rollout: Any) -> None:
    plain, _ = _train(random_ppo_rollout, 0.0)
    cloned, rows = _train(random_ppo_rollout, 1.0)
    # PPO on random advantages alone learns nothing of the expert; with the term the mean fits it
    assert _demo_error(cloned) < 0.3 * _demo_error(plain), (_demo_error(cloned), _demo_error(plain))
    assert rows[-1]["bc_loss"] < rows[0]["bc_loss"]
    assert "bc_loss" not in _train(random_ppo_rollout, 0.0, updates=1)[1][0]  # no term, no column


def test_the_bc_weight_waits_for_the_critic_then_decays_to_zero(random_ppo_rollout: Any) -> None:
    _, rows = _train(random_ppo_rollout, 2.0, updates=6, critic_warmup=2, bc_decay_updates=2)
    assert [r["bc_weight"] for r in rows] == [0.0, 0.0, 2.0, 1.0, 0.0, 0.0]


def test_a_bc_coef_without_demonstrations_is_one_line_naming_the_key(tmp_path: Path) -> None:
    run = {
        "algorithm": {"name": "ppo", "rollout_steps": 8, "minibatch_size": 16, "bc_coef": 0.5},
        "env": {"id": "Pendulum-v1", "num_envs": 2},
        "runner": {"scheduler": "local", "total_steps": 16, "log_interval": 16, "loggers": ["csv"]},
    }
    with pytest.raises(ConfigError) as err:
        rlinf_algos.train(run, tmp_path / "run")
    assert "algorithm.bc_coef" in str(err.value) and "model.bc.demos" in str(err.value)


def _two_task_demos() -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Task a: 480 steps; task b (its feature 2 is +3): 20 steps, with another "expert"."""
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(480, 3, generator=g), torch.randn(20, 3, generator=g)
    a[:, 2], b[:, 2] = -3.0, 3.0
    states = torch.cat([a, b])
    actions = torch.cat([torch.tanh(a[:, :2]), -torch.tanh(b[:, :2])])
    return states, actions, ["a"] * 480 + ["b"] * 20


def test_per_task_sampling_gives_a_task_with_few_demonstrations_its_share(
    random_ppo_rollout: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlinf_algos.ppo import recipe

    states, actions, tasks = _two_task_demos()
    monkeypatch.setattr(
        recipe, "load_demos", lambda path: {"state": states, "action": actions, "task": tasks}
    )

    def error_on_b(sampling: str) -> float:
        cfg = PPOConfig(minibatch_size=32, update_epochs=2, lr=1e-2, bc_coef=1.0, bc_sampling=sampling)
        demos = recipe.bc_demos(cfg, {"bc": {"demos": "DEMOS"}})
        assert demos is not None and len(demos) == 3
        if sampling == "per_task":  # each task's steps add up to the same chance
            w = torch.as_tensor(demos[2])
            assert float(w[:480].sum()) == pytest.approx(float(w[480:].sum()))
        else:
            assert demos[2] is None
        torch.manual_seed(0)
        learner = PPOLearner(GaussianActorCritic(3, 2, (16,), normalize_obs=False), cfg, seed=0, demos=demos)
        for k in range(8):
            learner.update(random_ppo_rollout(k, act_dim=2))
        with torch.no_grad():
            m = learner.model
            return float((m.action_mean(m.normalize(states[480:])) - actions[480:]).pow(2).sum(-1).mean())

    uniform, balanced = error_on_b("uniform"), error_on_b("per_task")
    assert balanced < 0.5 * uniform, (balanced, uniform)


def test_bc_steps_until_solved_draws_no_step_after_the_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlinf_algos.ppo import recipe

    states = np.arange(12, dtype=np.float32).reshape(6, 2)
    data = {
        "state": states,
        "action": -states,
        "task": ["a", "a", "a", "b", "b", "b"],
        "episode_index": np.array([0, 0, 0, 1, 1, 1]),
        "success": np.array([0, 1, 0, 0, 0, 1], bool),
    }
    monkeypatch.setattr(recipe, "load_demos", lambda path: data)
    cfg = PPOConfig(bc_coef=1.0, bc_steps="until_solved", bc_sampling="per_task")
    got = recipe.bc_demos(cfg, {"bc": {"demos": "DEMOS"}})
    assert got is not None
    assert got[0].tolist() == states[[0, 1, 3, 4, 5]].tolist()
    assert got[2].tolist() == [0.5, 0.5, 1 / 3, 1 / 3, 1 / 3]  # shares over the steps kept
    data["success"] = None  # a data set without next.success: one line naming the key
    with pytest.raises(ConfigError) as err:
        recipe.bc_demos(cfg, {"bc": {"demos": "DEMOS"}})
    assert "algorithm.bc_steps" in str(err.value) and "next.success" in str(err.value)

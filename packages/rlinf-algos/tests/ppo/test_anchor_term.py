"""PPO's anchor term (``algorithm.anchor_coef``): it holds the policy's action mean near the one
RL started from on the batch's states, survives a checkpoint, and refuses a model it cannot hold."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlinf_algos.models.mlp import GaussianActorCritic
from rlinf_algos.ppo import PPOConfig
from rlinf_algos.ppo.learner import PPOLearner
from rlinf_core.errors import ConfigError


def _learner(anchor_coef: float, **kw: Any) -> PPOLearner:
    cfg = PPOConfig(minibatch_size=32, update_epochs=2, lr=1e-2, anchor_coef=anchor_coef, **kw)
    torch.manual_seed(0)
    return PPOLearner(GaussianActorCritic(3, 2, (16,), normalize_obs=False), cfg, seed=0)


def _drift(learner: PPOLearner, start: torch.nn.Module, obs: torch.Tensor) -> float:
    with torch.no_grad():
        return float((learner.model.action_mean(obs) - start.action_mean(obs)).pow(2).sum(-1).mean())


def test_the_anchor_keeps_the_policy_near_its_start_on_the_batch_states(random_ppo_rollout: Any) -> None:
    drifts, rows = {}, {}
    probe = random_ppo_rollout(99, act_dim=2).obs.reshape(-1, 3)
    for coef in (0.0, 10.0):
        learner = _learner(coef)
        start = GaussianActorCritic(3, 2, (16,), normalize_obs=False)
        start.load_state_dict(learner.model.state_dict())
        rows[coef] = [learner.update(random_ppo_rollout(k, act_dim=2)) for k in range(8)]
        drifts[coef] = _drift(learner, start, probe)
    # random advantages move the plain policy anywhere; the anchored one stays near its start
    assert drifts[10.0] < 0.2 * drifts[0.0], drifts
    assert rows[10.0][0]["anchor_loss"] == 0.0 or rows[10.0][0]["anchor_loss"] < 1e-3
    assert rows[10.0][-1]["anchor_loss"] > 0.0
    assert "anchor_loss" not in rows[0.0][0]  # no term, no column


def test_the_anchor_waits_for_the_critic_warmup_and_travels_in_the_checkpoint(
    random_ppo_rollout: Any,
) -> None:
    learner = _learner(1.0, critic_warmup=2)
    rows = [learner.update(random_ppo_rollout(k, act_dim=2)) for k in range(4)]
    assert [r["anchor_loss"] != r["anchor_loss"] for r in rows] == [
        True,
        True,
        False,
        False,
    ]  # nan, then a loss
    assert learner.anchor is not None
    start = {k: v.clone() for k, v in learner.anchor.state_dict().items()}
    resumed = _learner(1.0, critic_warmup=2)
    resumed.load_state_dict(learner.state_dict())
    assert resumed.anchor is not None and resumed.anchor is not resumed.model
    for k, v in resumed.anchor.state_dict().items():  # the start, not the policy it resumes
        assert torch.equal(v, start[k]), k
    assert not any(p.requires_grad for p in resumed.anchor.parameters())


def test_an_anchor_on_a_policy_without_an_action_mean_is_one_line_naming_the_key() -> None:
    class NoMean(GaussianActorCritic):  # a policy whose action is no Gaussian's mean
        action_mean = None

    cfg = PPOConfig(anchor_coef=0.5)
    with pytest.raises(ConfigError) as err:
        PPOLearner(NoMean(3, 2, (8,)), cfg, seed=0)
    assert "algorithm.anchor_coef" in str(err.value)

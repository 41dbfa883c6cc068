"""``algorithm.norm_scope: slot``: each env slot (one task of a suite) gets its own reward scale
and its own advantage normalisation, so a task whose returns are larger no longer sets the step
size of the others'."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from rlinf_algos.models.mlp import GaussianActorCritic
from rlinf_algos.ppo import PPOConfig
from rlinf_algos.ppo.learner import PPOLearner
from rlinf_algos.stats import RewardScaler
from rlinf_core.errors import RlinfError


def _scaled_slot(r: Any, slot: int, c: float) -> Any:
    """``r`` with slot ``slot``'s rewards and values times ``c`` (its GAE advantages times ``c``)."""
    rewards, values = r.rewards.clone(), r.values.clone()
    rewards[:, slot] *= c
    values[:, slot] *= c
    return dataclasses.replace(r, rewards=rewards, values=values)


def _actor_after_update(r: Any, scope: str) -> list[torch.Tensor]:
    # no gradient clipping and no KL stop: the actor's step depends on the advantages alone
    cfg = PPOConfig(minibatch_size=16, update_epochs=2, lr=1e-2, norm_scope=scope, max_grad_norm=None)
    torch.manual_seed(0)
    learner = PPOLearner(GaussianActorCritic(3, 1, (16,), normalize_obs=False), cfg, seed=0)
    learner.update(r)
    m = learner.model
    return [p.detach().clone() for p in (*m.actor_mean.parameters(), m.actor_log_std)]


def test_per_slot_advantages_make_the_policy_step_blind_to_a_slots_return_scale(
    random_ppo_rollout: Any,
) -> None:
    r = random_ppo_rollout(3, steps=16, envs=4)
    big = _scaled_slot(r, 0, 1000.0)
    same = [
        torch.allclose(a, b, atol=1e-5)
        for a, b in zip(_actor_after_update(r, "slot"), _actor_after_update(big, "slot"), strict=True)
    ]
    assert all(same), same
    # pooled over the batch, the slot with 1000x the returns takes over the policy's step
    pooled = [
        torch.allclose(a, b, atol=1e-5)
        for a, b in zip(_actor_after_update(r, "batch"), _actor_after_update(big, "batch"), strict=True)
    ]
    assert not all(pooled)


def test_a_per_slot_reward_scaler_gives_each_slot_its_own_scale() -> None:
    rng = np.random.default_rng(0)
    scales = np.array([1.0, 100.0])
    pooled, own = RewardScaler(2, 0.99), RewardScaler(2, 0.99, per_slot=True)
    done = np.zeros(2, dtype=bool)
    for _ in range(500):
        raw = rng.normal(1.0, 1.0) * scales  # the same draw, at two scales
        out_pooled, out_own = pooled(raw, done), own(raw, done)
    # each slot on its own: the same scaled reward; pooled: one scale, so 100x apart
    assert out_own[1] == pytest.approx(out_own[0], rel=1e-6)
    assert out_pooled[1] == pytest.approx(100 * out_pooled[0], rel=1e-6)
    assert own.var.shape == (2,) and own.var[1] / own.var[0] == pytest.approx(1e4, rel=1e-6)
    assert np.ndim(pooled.var) == 0
    state = own.state_dict()
    again = RewardScaler(2, 0.99, per_slot=True)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.var, own.var)
    with pytest.raises(RlinfError, match="norm_scope"):
        RewardScaler(2, 0.99).load_state_dict(state)


def test_a_pooled_scaler_state_is_plain_floats_as_before() -> None:
    s = RewardScaler(3, 0.9)
    s(np.ones(3), np.zeros(3, dtype=bool))
    state = s.state_dict()
    assert all(type(state[k]) is float for k in ("mean", "var", "count"))
    # a checkpoint written before norm_scope existed loads as it did
    old = {"returns": np.zeros(3), "mean": 0.5, "var": 2.0, "count": 10.0}
    s.load_state_dict(old)
    assert float(s.var) == 2.0

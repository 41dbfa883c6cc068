"""PPO maths against small hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf_algos.optim import clip_grad_norm
from rlinf_algos.ppo import functional as ppo


def col(*xs: float) -> torch.Tensor:
    """A [T, 1] column."""
    return torch.tensor(xs, dtype=torch.float32).unsqueeze(1)


def bcol(*xs: bool) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.bool).unsqueeze(1)


def test_gae_without_episode_end() -> None:
    # gamma = lam = 0.5, all deltas 1: A2 = 1, A1 = 1 + 0.25 * 1, A0 = 1 + 0.25 * 1.25
    adv, ret = ppo.gae(col(1, 1, 1), col(0, 0, 0), col(0, 0, 0), bcol(0, 0, 0), bcol(0, 0, 0), 0.5, 0.5)
    assert adv.squeeze(1).tolist() == pytest.approx([1.3125, 1.25, 1.0])
    assert torch.equal(ret, adv)


def test_gae_termination_does_not_bootstrap() -> None:
    # gamma = lam = 1; terminated at t=1: delta1 = 2 + 0 - 0.5 (the 9 is ignored), recursion cut
    next_v = col(0.5, 9.0, 2.0)
    adv, ret = ppo.gae(col(1, 2, 3), col(0.5, 0.5, 0.5), next_v, bcol(0, 1, 0), bcol(0, 0, 0), 1.0, 1.0)
    assert adv.squeeze(1).tolist() == pytest.approx([2.5, 1.5, 4.5])
    assert ret.squeeze(1).tolist() == pytest.approx([3.0, 2.0, 5.0])


def test_gae_truncation_bootstraps_from_final_value() -> None:
    # truncated at t=1 with V(final_obs) = 4: delta1 = 2 + 4 - 0.5 = 5.5, recursion still cut
    values = col(0.5, 0.5, 0.5)
    done = bcol(0, 1, 0)
    next_v = ppo.next_values_with_bootstrap(values, torch.tensor([2.0]), done, col(0, 4, 0))
    assert next_v.squeeze(1).tolist() == [0.5, 4.0, 2.0]
    adv, _ = ppo.gae(col(1, 2, 3), values, next_v, bcol(0, 0, 0), done, 1.0, 1.0)
    assert adv.squeeze(1).tolist() == pytest.approx([6.5, 5.5, 4.5])


def test_gae_envs_are_independent() -> None:
    rewards = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    values = torch.full((3, 2), 0.5)
    terminated = torch.tensor([[False, False], [True, False], [False, False]])
    truncated = torch.tensor([[False, False], [False, True], [False, False]])
    done = terminated | truncated
    final_v = torch.tensor([[0.0, 0.0], [9.0, 4.0], [0.0, 0.0]])
    next_v = ppo.next_values_with_bootstrap(values, torch.tensor([2.0, 2.0]), done, final_v)
    adv, _ = ppo.gae(rewards, values, next_v, terminated, truncated, 1.0, 1.0)
    assert adv[:, 0].tolist() == pytest.approx([2.5, 1.5, 4.5])
    assert adv[:, 1].tolist() == pytest.approx([6.5, 5.5, 4.5])


def lr(*ratios: float) -> torch.Tensor:
    return torch.log(torch.tensor(ratios))


def test_policy_loss_symmetric_and_asymmetric_clip() -> None:
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    log_ratio = lr(1.25, 0.5, 1.5, 0.5)
    # min(1.25, 1.2) + min(0.5, 0.8) + min(-1.5, -1.2) + min(-0.5, -0.8) = -0.6
    assert float(ppo.policy_loss(log_ratio, adv, 0.2, 0.2)) == pytest.approx(0.15)
    # clip to [0.9, 1.3]: 1.25 + 0.5 - 1.5 - 0.9 = -0.65
    assert float(ppo.policy_loss(log_ratio, adv, 0.1, 0.3)) == pytest.approx(0.1625)


def test_policy_loss_dual_clip_bounds_negative_advantages() -> None:
    log_ratio = lr(5.0, 5.0)
    adv = torch.tensor([-1.0, 1.0])
    # without dual clip: min(-5, -1.2) = -5 and min(5, 1.2) = 1.2
    assert float(ppo.policy_loss(log_ratio, adv)) == pytest.approx(-(-5 + 1.2) / 2)
    # dual clip c=3: max(-5, -3) = -3 for the negative advantage only
    assert float(ppo.policy_loss(log_ratio, adv, dual_clip=3.0)) == pytest.approx(-(-3 + 1.2) / 2)


def test_policy_loss_gradient_is_zero_where_clipped() -> None:
    log_ratio = lr(1.5, 1.0).requires_grad_()
    ppo.policy_loss(log_ratio, torch.tensor([1.0, 1.0])).backward()
    assert log_ratio.grad is not None
    assert log_ratio.grad[0] == 0.0 and log_ratio.grad[1] == pytest.approx(-0.5)


def test_clip_fraction() -> None:
    assert float(ppo.clip_fraction(lr(1.25, 0.5, 1.1, 1.0), 0.2, 0.2)) == pytest.approx(0.5)


def test_value_loss_with_and_without_clipping() -> None:
    v, ret, old = torch.tensor([2.5]), torch.tensor([2.6]), torch.tensor([1.5])
    assert float(ppo.value_loss(v, ret)) == pytest.approx(0.5 * 0.01, rel=1e-5)
    # clipped prediction 1.7: (1.7 - 2.6)^2 = 0.81 beats 0.01
    assert float(ppo.value_loss(v, ret, old, clip=0.2)) == pytest.approx(0.405, rel=1e-5)
    # both sides of the old value; unclipped errors (1) dominate
    v2, ret2, old2 = torch.tensor([1.0, 3.0]), torch.tensor([2.0, 2.0]), torch.tensor([1.5, 1.5])
    assert float(ppo.value_loss(v2, ret2, old2, clip=0.2)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="old_values"):
        ppo.value_loss(v, ret, clip=0.2)


def test_entropy_loss_and_approx_kl() -> None:
    assert float(ppo.entropy_loss(torch.tensor([1.0, 3.0]))) == -2.0
    # k3: (2 - 1) - ln 2 and 0
    assert float(ppo.approx_kl(lr(2.0, 1.0))) == pytest.approx((1 - math.log(2)) / 2)


def test_normalize_advantages() -> None:
    assert ppo.normalize_advantages(torch.tensor([1.0, 2.0, 3.0])).tolist() == pytest.approx(
        [-1, 0, 1], abs=1e-6
    )
    assert ppo.normalize_advantages(torch.tensor([5.0])).tolist() == [0.0]
    # per row (one pass over the minibatches of an epoch): each row as if alone
    rows = torch.tensor([[1.0, 2.0, 3.0], [10.0, 30.0, 20.0]])
    assert ppo.normalize_advantages(rows, dim=1).reshape(-1).tolist() == pytest.approx(
        [-1, 0, 1, -1, 1, 0], abs=1e-6
    )
    assert ppo.normalize_advantages(torch.tensor([[5.0], [7.0]]), dim=1).tolist() == [[0.0], [0.0]]


def test_clip_grad_norm() -> None:
    a = torch.nn.Parameter(torch.zeros(2))
    b = torch.nn.Parameter(torch.zeros(1))
    a.grad = torch.tensor([3.0, 0.0])
    b.grad = torch.tensor([4.0])
    assert float(clip_grad_norm([a, b], 1.0)) == pytest.approx(5.0)
    assert a.grad.tolist() == pytest.approx([0.6, 0.0], rel=1e-5)
    assert b.grad.tolist() == pytest.approx([0.8], rel=1e-5)
    # under the limit: untouched
    assert float(clip_grad_norm([a, b], 10.0)) == pytest.approx(1.0, rel=1e-5)
    assert b.grad.tolist() == pytest.approx([0.8], rel=1e-5)
    assert float(clip_grad_norm([torch.nn.Parameter(torch.zeros(1))], 1.0)) == 0.0

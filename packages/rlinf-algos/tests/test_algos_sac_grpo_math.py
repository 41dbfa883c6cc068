"""SAC and GRPO maths against small hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf_algos.grpo import functional as grpo
from rlinf_algos.sac import functional as sac


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def test_critic_target_bootstraps_unless_terminated() -> None:
    # soft V' = min(Q1', Q2') - alpha * logp = [2 - 0.1, 0 - 0.1]; the terminated one stops at r
    y = sac.critic_target(t(1, 1), torch.tensor([False, True]), t(2, 2), t(3, 0), t(0.5, 0.5), 0.2, 0.9)
    assert y.tolist() == pytest.approx([1 + 0.9 * 1.9, 1.0])
    assert not y.requires_grad


def test_critic_and_actor_losses() -> None:
    # mean(0, 1) + mean(1, 1)
    assert float(sac.critic_loss(t(1, 2), t(0, 2), t(1, 1))) == pytest.approx(1.5)
    # [0.5 * 0.5 - 1, 0.5 * -1 - 3]
    assert float(sac.actor_loss(t(1, 4), t(2, 3), t(0.5, -1), 0.5)) == pytest.approx(-2.125)


def test_temperature_loss_gradient_direction() -> None:
    log_alpha = torch.zeros((), requires_grad=True)
    # entropy -logp = 2 on average, above the target -1: alpha must go down (positive gradient)
    loss = sac.temperature_loss(log_alpha, t(-1, -3), target_entropy=-1.0)
    loss.backward()
    assert float(loss.detach()) == 0.0
    assert float(log_alpha.grad) == pytest.approx(3.0)
    assert sac.default_target_entropy(6) == -6.0


def test_polyak_update() -> None:
    target = [torch.zeros(2), torch.ones(1)]
    online = [t(1, 2), t(3)]
    sac.polyak_update(target, online, 0.1)
    assert target[0].tolist() == pytest.approx([0.1, 0.2])
    assert target[1].tolist() == pytest.approx([1.2])
    sac.polyak_update(target, online, 1.0)
    assert target[1].tolist() == [3.0]
    with pytest.raises(ValueError, match="2 target tensors but 1"):
        sac.polyak_update(target, online[:1], 0.5)


def test_group_advantages() -> None:
    r = t(1, 2, 3, 5, 5, 5)
    # group 1: mean 2, unbiased std 1; group 2: all equal -> 0
    assert grpo.group_advantages(r, 3).tolist() == pytest.approx([-1, 0, 1, 0, 0, 0], abs=1e-5)
    assert grpo.group_advantages(r, 3, scale=False).tolist() == pytest.approx([-1, 0, 1, 0, 0, 0])
    with pytest.raises(ValueError, match="group_size=4"):
        grpo.group_advantages(r, 4)


def test_group_advantages_by_id_groups_samples_in_any_order() -> None:
    # groups 7 and 3, interleaved as two workers would send them: 7 -> [1, 3, 5], 3 -> [2, 2, 2]
    r = torch.tensor([1.0, 2.0, 3.0, 2.0, 5.0, 2.0])
    gid = torch.tensor([7, 3, 7, 3, 7, 3])
    adv = grpo.group_advantages_by_id(r, gid, 3)
    assert adv.tolist() == pytest.approx([-1, 0, 0, 0, 1, 0], abs=1e-5)  # std of [1, 3, 5] is 2
    with pytest.raises(ValueError, match="every group needs 3 samples, got sizes \\[2, 4\\]"):
        grpo.group_advantages_by_id(r, torch.tensor([7, 3, 7, 3, 7, 7]), 3)


def test_k3_kl_and_masked_mean() -> None:
    kl = grpo.k3_kl(t(0.0, 0.0), t(math.log(2), 0.0))
    assert kl.tolist() == pytest.approx([1 - math.log(2), 0.0])
    assert float(grpo.masked_mean(t(1, 2, 3), t(1, 0, 1))) == 2.0
    assert float(grpo.masked_mean(t(1, 2), t(0, 0))) == 0.0


def test_grpo_policy_loss_masks_and_aggregation() -> None:
    zeros = torch.zeros(2, 2)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = t(1, -1)
    # ratio 1 everywhere: per token -A = [[-1, -1], [1, pad]]
    loss, stats = grpo.policy_loss(zeros, zeros, adv, mask)
    assert float(loss) == pytest.approx(-1 / 3)
    assert float(stats["clip_fraction"]) == 0.0
    loss, _ = grpo.policy_loss(zeros, zeros, adv, mask, aggregation="seq-mean-token-mean")
    assert float(loss) == pytest.approx(0.0)
    # a KL penalty of 1 - ln 2 on every valid token
    ref = torch.full((2, 2), math.log(2))
    loss, stats = grpo.policy_loss(zeros, zeros, adv, mask, ref_log_prob=ref, kl_coef=0.1)
    assert float(loss) == pytest.approx(-1 / 3 + 0.1 * (1 - math.log(2)))
    assert float(stats["kl"]) == pytest.approx(1 - math.log(2))
    with pytest.raises(ValueError, match="ref_log_prob"):
        grpo.policy_loss(zeros, zeros, adv, mask, kl_coef=0.1)


def test_grpo_policy_loss_clips_ratio() -> None:
    # ratio 2 on a positive advantage is clipped to 1.2 (asymmetric: 1.5 with clip_high 0.5)
    logp = torch.full((1, 1), math.log(2))
    old = torch.zeros(1, 1)
    mask = torch.ones(1, 1)
    loss, stats = grpo.policy_loss(logp, old, t(1.0), mask)
    assert float(loss) == pytest.approx(-1.2)
    assert float(stats["clip_fraction"]) == 1.0
    loss, _ = grpo.policy_loss(logp, old, t(1.0), mask, clip_low=0.2, clip_high=0.5)
    assert float(loss) == pytest.approx(-1.5)

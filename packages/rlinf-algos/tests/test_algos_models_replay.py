"""Networks (log-probabilities, squashing, ensembles, running statistics) and the replay buffer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlinf_algos.models.mlp import (
    EnsembleLinear,
    GaussianActorCritic,
    RunningNorm,
    SquashedGaussianActor,
    TwinQ,
    gaussian_entropy,
    gaussian_log_prob,
    mlp,
)
from rlinf_algos.replay import ReplayBuffer


def test_gaussian_log_prob_and_entropy_by_hand() -> None:
    # at the mean, each dim contributes -log_std - 0.5 * log(2 pi)
    mean = torch.zeros(1, 2)
    log_std = torch.tensor([[0.0, math.log(2.0)]])
    expected = -(0 + math.log(2.0)) - math.log(2 * math.pi)
    assert float(gaussian_log_prob(mean, mean, log_std)) == pytest.approx(expected, rel=1e-6)
    # one std away in dim 0 costs 0.5 more
    x = torch.tensor([[1.0, 0.0]])
    assert float(gaussian_log_prob(x, mean, log_std)) == pytest.approx(expected - 0.5, rel=1e-6)
    ref = torch.distributions.Normal(mean, log_std.exp())
    assert float(gaussian_entropy(log_std)) == pytest.approx(float(ref.entropy().sum()), rel=1e-6)


def test_mlp_orthogonal_init() -> None:
    net = mlp(5, [8], 3, "tanh", out_std=0.01)
    w = net[0].weight  # [8, 5]: orthogonal rows scaled by sqrt(2)
    assert torch.allclose(w.T @ w, 2.0 * torch.eye(5), atol=1e-5)
    assert float(net[-1].weight.detach().abs().max()) < 0.02
    assert float(net[0].bias.detach().abs().sum()) == 0.0


def test_actor_critic_act_and_evaluate_agree() -> None:
    torch.manual_seed(0)
    model = GaussianActorCritic(4, 2, (16, 16))
    obs = torch.randn(5, 4)
    action, logp, value = model.act(obs)
    logp2, entropy, value2 = model.evaluate(obs, action)
    assert action.shape == (5, 2) and logp.shape == (5,) and value.shape == (5,)
    assert torch.allclose(logp, logp2) and torch.allclose(value, value2)
    assert entropy.shape == (5,)
    assert float(entropy[0].detach()) == pytest.approx(2 * (0.5 + 0.5 * math.log(2 * math.pi)))


def test_running_norm_matches_batch_statistics() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(300, 3))
    norm = RunningNorm(3)
    for chunk in np.split(data, [7, 100, 180]):
        norm.update(chunk)
    assert norm.mean.numpy() == pytest.approx(data.mean(0), rel=1e-6)
    assert norm.var.numpy() == pytest.approx(data.var(0), rel=1e-5)
    out = norm(torch.as_tensor(data, dtype=torch.float32))
    assert out.mean(0).abs().max() < 1e-4 and (out.std(0) - 1).abs().max() < 1e-2
    # the statistics are state: they travel with the weights
    fresh = RunningNorm(3)
    fresh.load_state_dict(norm.state_dict())
    assert torch.equal(fresh(out), norm(out))


@pytest.mark.parametrize(
    ("bound", "ortho", "eps"), [("tanh", True, 0.0), ("clip", False, 0.0), ("clip", False, 1e-6)]
)
def test_squashed_actor_bounds_and_log_prob(bound: str, ortho: bool, eps: float) -> None:
    torch.manual_seed(0)
    low, high = np.array([-1.0, 0.0]), np.array([1.0, 4.0])
    actor = SquashedGaussianActor(
        3, 2, low, high, hidden=(16,), log_std_bound=bound, ortho_init=ortho, squash_eps=eps
    )
    obs = torch.randn(64, 3)
    torch.manual_seed(1)
    a, logp = actor.sample(obs)
    assert a.shape == (64, 2) and logp.shape == (64,)
    assert (a[:, 0] > -1).all() and (a[:, 0] < 1).all() and (a[:, 1] > 0).all() and (a[:, 1] < 4).all()
    # change of variables done by hand: u = atanh((a - bias) / scale)
    mean, log_std = actor._dist(obs)
    scale = torch.tensor([1.0, 2.0])
    y = (a - torch.tensor([0.0, 2.0])) / scale
    u = torch.atanh(y)
    ref = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1) - torch.log(
        scale * (1 - y**2)
    ).sum(-1)
    assert torch.allclose(logp, ref, atol=1e-3)
    det = actor.predict(obs)
    assert torch.allclose(det, torch.tanh(mean) * scale + torch.tensor([0.0, 2.0]))


def test_squashed_actor_log_std_parametrisations() -> None:
    """tanh (CleanRL) squashes the head's output into [-5, 2]; clip (SB3) clamps it into [-20, 2].
    From a head output of 0 the first starts at std exp(-1.5) = 0.22, the second at std 1."""
    obs = torch.randn(7, 3)
    for bound, lo in (("tanh", -5.0), ("clip", -20.0)):
        actor = SquashedGaussianActor(3, 2, [-1.0, -1.0], [1.0, 1.0], hidden=(8,), log_std_bound=bound)
        assert actor.log_std_min == lo and actor.log_std_max == 2.0
        with torch.no_grad():
            actor.head.weight.zero_()
            for raw, want in ((0.0, -1.5 if bound == "tanh" else 0.0), (1e3, 2.0), (-1e3, lo)):
                actor.head.bias.fill_(raw)
                _, log_std = actor._dist(obs)
                assert torch.allclose(log_std, torch.full((7, 2), want), atol=1e-5), (bound, raw)
    # clip passes the raw output through inside the bounds
    actor = SquashedGaussianActor(3, 2, [-1.0, -1.0], [1.0, 1.0], hidden=(8,), log_std_bound="clip")
    with torch.no_grad():
        actor.head.weight.zero_()
        actor.head.bias.copy_(torch.tensor([0.0, 0.0, -3.0, 1.5]))
    assert torch.allclose(actor._dist(obs)[1], torch.tensor([-3.0, 1.5]).expand(7, 2))
    with pytest.raises(ValueError, match="'tanh' or 'clip'"):
        SquashedGaussianActor(3, 2, [-1.0], [1.0], log_std_bound="softplus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="below log_std_max"):
        SquashedGaussianActor(3, 2, [-1.0], [1.0], log_std_min=3.0)


def test_squash_eps_bounds_the_cost_of_saturated_actions() -> None:
    """Deep in saturation (u = 20 in every dim) the exact correction is -2 (u - log 2) = -38.6 per
    dim; with SB3's eps = 1e-6 it stops at log(1e-6) = -13.8. Away from saturation both agree."""
    exact = SquashedGaussianActor(3, 2, [-1.0, -1.0], [1.0, 1.0], hidden=(8,), log_std_bound="clip")
    eps = SquashedGaussianActor(
        3, 2, [-1.0, -1.0], [1.0, 1.0], hidden=(8,), log_std_bound="clip", squash_eps=1e-6
    )
    obs = torch.randn(4, 3)
    for mean, log_std, want in ((20.0, -20.0, (-38.6137, math.log(1e-6))), (0.3, -1.0, None)):
        for actor in (exact, eps):
            with torch.no_grad():
                actor.head.weight.zero_()
                actor.head.bias.copy_(torch.tensor([mean, mean, log_std, log_std]))
        a1, lp1 = exact.sample(obs, torch.Generator().manual_seed(0))
        a2, lp2 = eps.sample(obs, torch.Generator().manual_seed(0))
        assert torch.equal(a1, a2)
        gauss = gaussian_log_prob(
            torch.full((4, 2), mean), torch.full((4, 2), mean), torch.full((4, 2), log_std)
        )
        if want is None:
            assert torch.allclose(lp1, lp2, atol=1e-4)
        else:
            assert torch.allclose(lp1, gauss - 2 * want[0], atol=1e-2)
            assert torch.allclose(lp2, gauss - 2 * want[1], atol=1e-2)
    with pytest.raises(ValueError, match="squash_eps"):
        SquashedGaussianActor(3, 2, [-1.0], [1.0], squash_eps=-1.0)


def test_sac_networks_default_init_is_pytorchs() -> None:
    """ortho_init=False: the actor's layers and each critic member are initialised exactly as
    nn.Linear would be (same draws from the same seed), biases included."""
    torch.manual_seed(3)
    ref = torch.nn.Linear(5, 8)
    torch.manual_seed(3)
    q = TwinQ(3, 2, hidden=(8,), ensemble=1, ortho_init=False)
    first = q.net[0]
    assert torch.equal(first.weight[0].T, ref.weight.detach()) and torch.equal(
        first.bias[0, 0], ref.bias.detach()
    )
    torch.manual_seed(3)
    actor = SquashedGaussianActor(5, 2, [-1.0, -1.0], [1.0, 1.0], hidden=(8,), ortho_init=False)
    assert torch.equal(actor.trunk[0].weight, ref.weight) and torch.equal(actor.trunk[0].bias, ref.bias)
    # the orthogonal default: W^T W = 2 I on each member, zero biases
    q = TwinQ(3, 2, hidden=(8,), ortho_init=True)
    w = q.net[0].weight.detach()  # [E, in, out]
    for i in range(2):
        assert torch.allclose(w[i] @ w[i].T, 2.0 * torch.eye(5), atol=1e-5)
    assert float(q.net[0].bias.detach().abs().sum()) == 0.0


def test_twin_q_members_are_independent() -> None:
    torch.manual_seed(0)
    q = TwinQ(3, 2, hidden=(8, 8))
    obs, act = torch.randn(4, 3), torch.randn(4, 2)
    out = q(obs, act)
    assert out.shape == (2, 4)
    assert not torch.allclose(out[0], out[1])
    # a loss on member 0 only leaves member 1's gradients at zero
    out[0].sum().backward()
    first = q.net[0].weight.grad
    assert first is not None and first[0].abs().sum() > 0 and float(first[1].abs().sum()) == 0.0


def filled_buffer(capacity: int = 4, n: int = 6, seed: int = 0) -> ReplayBuffer:
    buf = ReplayBuffer(capacity, (2,), (1,), seed=seed)
    for i in range(n):
        buf.add(
            np.full((1, 2), i, np.float32),
            np.full((1, 1), i, np.float32),
            np.array([float(i)]),
            np.full((1, 2), i + 0.5, np.float32),
            np.array([i % 3 == 0]),
            np.array([i % 3 == 1]),
        )
    return buf


def test_replay_buffer_ring_and_flags() -> None:
    buf = filled_buffer()
    assert len(buf) == 4 and buf.pos == 2
    # slots 0, 1 were overwritten by transitions 4, 5
    assert buf.rewards.tolist() == [4.0, 5.0, 2.0, 3.0]
    assert buf.terminated.tolist() == [False, False, False, True]
    assert buf.truncated.tolist() == [True, False, False, False]
    assert buf.next_obs[:, 0].tolist() == [4.5, 5.5, 2.5, 3.5]
    batch = buf.sample(32)
    assert batch.obs.shape == (32, 2) and batch.actions.shape == (32, 1)
    assert set(batch.rewards.tolist()) <= {2.0, 3.0, 4.0, 5.0}
    # every sampled row is one consistent transition
    assert np.array_equal(batch.next_obs[:, 0], batch.obs[:, 0] + 0.5)
    assert np.array_equal(batch.terminated, batch.rewards % 3 == 0)


def test_replay_buffer_batch_add_larger_than_capacity() -> None:
    buf = ReplayBuffer(3, (1,), (1,))
    x = np.arange(5, dtype=np.float32).reshape(5, 1)
    buf.add(x, x, x[:, 0], x, np.zeros(5, bool), np.zeros(5, bool))
    assert sorted(buf.rewards.tolist()) == [2.0, 3.0, 4.0] and len(buf) == 3


def test_replay_buffer_seeded_and_state_roundtrip() -> None:
    a, b = filled_buffer(seed=7), filled_buffer(seed=7)
    assert np.array_equal(a.sample(8).rewards, b.sample(8).rewards)
    state = a.state_dict()
    expected = a.sample(16).rewards
    c = ReplayBuffer(4, (2,), (1,), seed=123)
    c.load_state_dict(state)
    assert (c.pos, len(c)) == (a.pos, len(a))
    assert np.array_equal(c.sample(16).rewards, expected)
    with pytest.raises(ValueError, match="capacity is 4 in the state, 5 here"):
        ReplayBuffer(5, (2,), (1,)).load_state_dict(state)


def test_replay_buffer_rejects_bad_shapes() -> None:
    buf = ReplayBuffer(4, (2,), (1,))
    with pytest.raises(ValueError, match="actions"):
        buf.add(
            np.zeros((2, 2)),
            np.zeros((2, 3)),
            np.zeros(2),
            np.zeros((2, 2)),
            np.zeros(2, bool),
            np.zeros(2, bool),
        )
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)


@pytest.mark.parametrize("out_dim", [1, 5])
def test_ensemble_linear_is_its_members_side_by_side(out_dim: int) -> None:
    # the one-output layer takes another path (a product and a sum) than the others (baddbmm)
    torch.manual_seed(0)
    layer = EnsembleLinear(3, 4, out_dim)
    with torch.no_grad():
        layer.bias.normal_()
    x = torch.randn(3, 6, 4, requires_grad=True)
    y = layer(x)
    assert y.shape == (3, 6, out_dim)
    for i in range(3):
        want = torch.nn.functional.linear(x[i], layer.weight[i].T, layer.bias[i, 0])
        torch.testing.assert_close(y[i], want)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    for i in range(3):
        torch.testing.assert_close(layer.weight.grad[i], x[i].detach().T @ g[i])
        torch.testing.assert_close(layer.bias.grad[i, 0], g[i].sum(0))
    torch.testing.assert_close(x.grad, g @ layer.weight.detach().transpose(1, 2))

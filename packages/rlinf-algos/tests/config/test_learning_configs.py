"""The learning examples' configurations and the model knobs they use (``model.log_std_init``,
``model.ortho_init``): validation errors name their paths, and the knobs reach the networks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rlinf_algos.config import load_sections
from rlinf_algos.models import build_policy
from rlinf_algos.models.mlp import SquashedGaussianActor
from rlinf_algos.ppo import PPO
from rlinf_algos.sac import SAC
from rlinf_algos.sac.recipe import sac_critic, sac_policy_spec
from rlinf_core.config import load_yaml
from rlinf_core.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def _spec(**extra: object) -> dict[str, object]:
    return {
        "cls": "GaussianActorCritic",
        "obs_dim": 17,
        "act_dim": 6,
        "hidden": [256, 256],
        "activation": "relu",
        "log_std_init": -2.0,
        "normalize_obs": True,
        **extra,
    }


def test_model_knob_errors_name_their_paths() -> None:
    with pytest.raises(ConfigError) as err:
        load_sections(
            {
                "env": {"id": "HalfCheetah-v5"},
                "model": {"ortho_init": "sometimes", "log_std_init": "low"},
                "runner": {"total_steps": 10},
            }
        )
    got = {p.path: p.message for p in err.value.problems}
    assert set(got) == {"model.ortho_init", "model.log_std_init"}
    assert "bool" in got["model.ortho_init"]
    _, model, _ = load_sections({"env": {"id": "HalfCheetah-v5"}, "runner": {"total_steps": 10}})
    assert model.ortho_init is True and model.log_std_init == 0.0


@pytest.mark.parametrize(
    ("name", "algo"),
    [("ppo_halfcheetah_zoo.yaml", PPO), ("ppo_halfcheetah.yaml", PPO), ("sac_halfcheetah.yaml", SAC)],
)
def test_learning_examples_validate(name: str, algo: type) -> None:
    cfg = load_yaml(EXAMPLES / name)
    assert algo.run_config_problems(cfg) == []
    algo.config_model.model_validate(cfg["algorithm"])


def test_zoo_example_keeps_the_zoo_batch_and_knobs() -> None:
    cfg = load_yaml(EXAMPLES / "ppo_halfcheetah_zoo.yaml")
    _, model, runner = load_sections(cfg)
    algo = PPO.config_model.model_validate(cfg["algorithm"])
    assert algo.rollout_steps * cfg["env"]["num_envs"] == 512 and algo.minibatch_size == 64
    assert algo.update_epochs == 20 and algo.value_clip is None and not algo.anneal_lr
    assert model.ortho_init is False and model.log_std_init == -2.0 and runner.total_steps == 1_000_000


def test_ortho_init_and_log_std_reach_the_policy() -> None:
    torch.manual_seed(0)
    ortho = build_policy(_spec(ortho_init=True))
    plain = build_policy(_spec(ortho_init=False))
    legacy = build_policy(_spec())  # a policy.pt written before the knob existed: orthogonal
    for m in (ortho, plain, legacy):
        assert torch.equal(m.actor_log_std.detach(), torch.full((6,), -2.0))
    # orthogonal head with gain 0.01: W W^T = 1e-4 I; PyTorch's default init is far larger
    for m in (ortho, legacy):
        w = m.actor_mean[-1].weight.detach()
        assert torch.allclose(w @ w.T, 1e-4 * torch.eye(6), atol=1e-7)
        assert torch.count_nonzero(m.actor_mean[0].bias) == 0
    w = plain.actor_mean[-1].weight.detach()
    assert float((w @ w.T).diagonal().mean()) > 0.1  # kaiming-uniform rows: about 1/3
    assert torch.count_nonzero(plain.actor_mean[0].bias) > 0  # default biases are not zero


def test_sac_model_knobs_reach_actor_and_critics() -> None:
    """model.log_std_bound and model.ortho_init reach SAC's actor (through the spec policy.pt
    records) and its critics; a spec from before the knobs builds the CleanRL-style actor."""
    _, model, _ = load_sections(
        {
            "env": {"id": "HalfCheetah-v5"},
            "model": {"ortho_init": False, "log_std_bound": "clip", "squash_eps": 1e-6},
            "runner": {"total_steps": 10},
        }
    )
    spec = sac_policy_spec(
        model, {"obs_dim": 17, "act_dim": 6, "action_low": [-1.0] * 6, "action_high": [1.0] * 6}
    )
    assert spec["hidden"] == [256, 256] and spec["activation"] == "relu"
    torch.manual_seed(0)
    actor = build_policy(spec)
    assert isinstance(actor, SquashedGaussianActor)
    assert actor.log_std_bound == "clip" and actor.log_std_min == -20.0 and actor.squash_eps == 1e-6
    assert torch.count_nonzero(actor.trunk[0].bias) > 0  # PyTorch's default init, not orthogonal
    log_std = actor._dist(torch.randn(512, 17))[1].detach()
    assert 0.7 < float(log_std.exp().mean()) < 1.3  # SB3's start: std about 1
    assert torch.count_nonzero(sac_critic(spec).net[0].bias) > 0
    legacy = {k: v for k, v in spec.items() if k not in ("log_std_bound", "ortho_init", "squash_eps")}
    old = build_policy(legacy)
    assert old.log_std_bound == "tanh" and old.log_std_min == -5.0 and old.squash_eps == 0.0
    assert (
        torch.count_nonzero(old.trunk[0].bias) == 0
        and torch.count_nonzero(sac_critic(legacy).net[0].bias) == 0
    )
    log_std = old._dist(torch.randn(512, 17))[1].detach()
    assert float(log_std.exp().mean()) == pytest.approx(math.exp(-1.5), rel=0.05)  # CleanRL's start: 0.22


def test_sac_log_std_bound_error_names_its_path() -> None:
    with pytest.raises(ConfigError) as err:
        load_sections(
            {
                "env": {"id": "HalfCheetah-v5"},
                "model": {"log_std_bound": "softplus", "squash_eps": -1e-6},
                "runner": {"total_steps": 10},
            }
        )
    got = {p.path: p.message for p in err.value.problems}
    assert set(got) == {"model.log_std_bound", "model.squash_eps"}
    assert "greater than or equal to 0" in got["model.squash_eps"]
    assert "'tanh'" in got["model.log_std_bound"] and "'clip'" in got["model.log_std_bound"]

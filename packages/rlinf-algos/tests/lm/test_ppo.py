"""PPO for language policies (``ppo_lm``): token-level GAE by hand, the critic's alignment, the
actor's update moving towards rewarded responses, and the config's checks."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from rlinf_algos.lm import hf
from rlinf_algos.lm.algorithm import GRPOLM, PPOLM
from rlinf_algos.lm.config import CriticConfig, LMModelConfig, LMPPOConfig, ModelInitConfig, load_lm_sections
from rlinf_algos.lm.flow import train_lm
from rlinf_algos.lm.learner import pack_batch
from rlinf_algos.lm.ppo import PPOLMLearner, ValueModel, token_gae
from rlinf_algos.lm.tokens import LMTokenizer
from rlinf_core.errors import ConfigError

TOK = LMTokenizer.arith()


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> LMModelConfig:
    init = ModelInitConfig(hidden_size=16, num_layers=1, num_heads=2, max_position_embeddings=32)
    return LMModelConfig(path=str(hf.new_model_folder(tmp_path_factory.mktemp("m") / "m", init)))


def test_token_gae_by_hand_skips_unmasked_positions() -> None:
    # one sequence: generated tokens at 1, 2 and 4 (3 is text the orchestrator wrote), reward on 4
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[9.0, 0.5, 0.25, 9.0, 0.75]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0]])
    adv, ret = token_gae(rewards, values, mask, gamma=0.9, lam=0.5)
    d4 = 1.0 - 0.75
    d2 = 0.9 * 0.75 - 0.25
    d1 = 0.9 * 0.25 - 0.5
    a4, a2 = d4, d2 + 0.9 * 0.5 * d4
    a1 = d1 + 0.9 * 0.5 * a2
    assert torch.allclose(adv, torch.tensor([[0.0, a1, a2, 0.0, a4]]))
    assert torch.allclose(ret[mask > 0], (adv + values)[mask > 0])


def test_value_model_is_aligned_with_log_probs_and_starts_at_zero(spec: LMModelConfig) -> None:
    critic = ValueModel(hf.load_causal_lm(spec))
    ids = torch.tensor([[1, 8, 9, 10, 2], [1, 11, 12, 0, 0]])
    v = critic(ids)
    assert v.shape == ids.shape and torch.all(v == 0)
    with torch.no_grad():
        critic.head.bias.fill_(1.0)
        v = critic(ids)
    assert torch.all(v[:, 0] == 0) and torch.all(v[:, 1:] == 1.0)  # position 0 precedes nothing


def test_ppo_actor_moves_towards_the_rewarded_response(spec: LMModelConfig) -> None:
    torch.manual_seed(0)
    cfg = LMPPOConfig(lr=1e-2, minibatch_size=4, update_epochs=4, kl_coef=0.0, lr_warmup_iters=0)
    actor = PPOLMLearner(hf.load_causal_lm(spec), cfg, critic=CriticConfig(lr=1e-2), model_spec=spec)
    good, bad = TOK.encode("<bos>1+1=<step>1+1=2<ans>2<eos>"), TOK.encode("<bos>1+1=<step>1+1=3<ans>3<eos>")
    p = len(TOK.encode("<bos>1+1="))
    batch = pack_batch([good, bad], [[0] * p + [1] * (len(good) - p)] * 2, TOK.pad_id)
    batch["episode_index"] = torch.tensor([0, 1])
    batch["rewards"] = torch.tensor([1.0, 0.0])
    m = batch["loss_mask"]
    before = actor.compute_log_probs(batch)["log_probs"]
    v0 = actor._values(batch["input_ids"]).clone()
    stats = actor.update(batch)
    after = actor.compute_log_probs(batch)["log_probs"]
    assert float((after * m)[0].sum()) > float((before * m)[0].sum())
    assert float((after * m)[1].sum()) < float((before * m)[1].sum())
    v1 = actor._values(batch["input_ids"])
    # the critic learned: the rewarded sequence's last step is valued above the other's
    last = int((m[0] > 0).nonzero().max())
    assert float(v1[0, last] - v1[1, last]) > float(v0[0, last] - v0[1, last])
    assert stats["trained_sequences"] == 2 and stats["value_loss"] > 0 and actor.version == 1


def test_ppo_lm_config_and_smoke_run(spec: LMModelConfig, tmp_path: Path) -> None:
    base = {
        "algorithm": {"name": "ppo_lm", "prompts_per_iter": 4, "iterations": 1, "minibatch_size": 8},
        "model": {"path": spec.path},
        "task": {"eval_size": 4, "num_terms": [2], "min_digits": 1, "max_digits": 1},
        "sft": {"steps": 0},
        "critic": {"lr": 1e-3},
        "runner": {"scheduler": "local"},
    }
    run = load_lm_sections(base)
    assert isinstance(run.algorithm, LMPPOConfig) and run.algorithm.group_size == 1
    summary = train_lm(run, tmp_path / "run", log=None)
    assert summary["algorithm"] == "ppo_lm" and summary["iterations"] == 1
    assert PPOLM.PLUGIN_NAME == "ppo_lm" and PPOLM.config_model is LMPPOConfig
    grpo = {**base, "algorithm": {"name": "grpo_lm"}}
    assert "ppo_lm only" in {p.path: p.message for p in GRPOLM.run_config_problems(grpo)}["critic"]
    with pytest.raises(ConfigError, match=r"algorithm\.gamma"):
        load_lm_sections({**base, "algorithm": {"name": "ppo_lm", "gamma": 0}})


@pytest.mark.parametrize("lora", [False, True])
def test_the_critic_starts_from_a_copy_of_the_policy(spec: LMModelConfig, lora: bool) -> None:
    torch.manual_seed(0)
    policy = hf.load_causal_lm(spec)
    with torch.no_grad():  # a "warm-started" policy: not the folder's weights any more
        for p in policy.parameters():
            p.add_(0.01 * torch.randn_like(p))
    if lora:
        from rlinf_algos.lm.config import LoraConfig

        policy = hf.apply_lora(policy, LoraConfig(rank=4, alpha=8.0, target_modules="all-linear"))
        with torch.no_grad():
            for name, p in policy.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.05)  # an adapter that changes the outputs
    ids = torch.tensor([[1, 8, 9, 10, 2]])
    with torch.no_grad():
        merged = copy.deepcopy(policy).merge_and_unload() if lora else policy
        want = merged.base_model(input_ids=ids).last_hidden_state
    actor = PPOLMLearner(policy, LMPPOConfig(), critic=CriticConfig(), model_spec=spec)
    with torch.no_grad():
        got = actor.critic.backbone(input_ids=ids).last_hidden_state
    assert torch.allclose(got, want, atol=1e-5)
    folder = hf.load_causal_lm(spec).base_model(input_ids=ids).last_hidden_state
    assert not torch.allclose(got, folder, atol=1e-3)  # not model.path's weights
    # its own trainable copy: training the critic leaves the policy alone
    assert all(p.requires_grad for p in actor.critic.parameters())
    policy_ids = {id(p) for p in policy.parameters()}
    assert not policy_ids & {id(p) for p in actor.critic.parameters()}

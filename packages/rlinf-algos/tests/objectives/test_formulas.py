"""The registered advantage estimators and policy losses against their papers' formulas on small
hand-computed cases (the arithmetic is in the comments), their aggregations, DAPO's overlong
penalty and the group filters, the names' validation, and the defaults giving the numbers the
code gave before the registry (a copy of that code is the reference here)."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf_algos import objectives
from rlinf_algos.grpo.config import GRPOConfig
from rlinf_algos.grpo.functional import score_episodes, success_band
from rlinf_algos.lm.config import LMGRPOConfig, LMPPOConfig
from rlinf_algos.objectives.advantages import Outcomes, StepRewards
from rlinf_algos.objectives.losses import LossSettings, aggregate, aggregation_share
from rlinf_algos.objectives.shaping import episode_tokens, overlong_penalty, uniform_groups
from rlinf_algos.ppo.config import PPOConfig
from rlinf_core.config import validate_model
from rlinf_core.errors import ConfigError


def est(name: str):
    return objectives.estimator(name)


def loss(name: str):
    return objectives.loss_function(name)


# -- the registry --------------------------------------------------------------------------------


def test_the_built_ins_are_registered_by_name_and_kind() -> None:
    assert objectives.estimator_names() == ["dr_grpo", "gae", "grpo", "reinforce_plus_plus", "rloo"]
    assert objectives.estimator_names(critic=True) == ["gae"]
    assert objectives.policy_loss_names() == ["dapo", "gspo", "ppo_clip"]
    # the aggregation each is defined with: Dr. GRPO's constant, DAPO's tokens, GSPO's sequences
    assert est("dr_grpo").aggregation == "seq-mean-token-sum-norm"
    assert loss("dapo").aggregation == "token-mean" and loss("gspo").aggregation == "seq-mean-token-mean"
    assert est("GRPO") is est("grpo")  # names match case-insensitively


def test_the_deferred_built_ins_carry_their_functions_marks() -> None:
    # rlinf-algos registers stand-ins (no torch until one is called): their marks are the
    # functions' own, and the lookups hand out the functions themselves
    from rlinf_algos.objectives import advantages, losses

    ests, lss = objectives._registries()
    for reg, module in ((ests, advantages), (lss, losses)):
        for key, proxy in reg.items():
            fn = getattr(module, proxy.__name__)
            for mark in ("PLUGIN_NAME", "needs_critic", "aggregation", "needs_sequences"):
                assert getattr(proxy, mark, None) == getattr(fn, mark, None), (key, mark)
            assert (est(key) if reg is ests else loss(key)) is fn


def test_listing_and_validating_the_names_import_no_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from rlinf_core.plugins import load_plugins; "
        "rows = {r['name']: r['registers'] for r in load_plugins().describe()}; "
        "from rlinf_algos.ppo.config import PPOConfig; from rlinf_algos.grpo.config import GRPOConfig; "
        "GRPOConfig(adv_estimator='rloo', policy_loss='gspo'); PPOConfig(policy_loss='dapo'); "
        "print(rows['algos']['policy_losses'], 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "['ppo_clip', 'dapo', 'gspo'] False", out.stderr[-2000:]


@pytest.mark.parametrize(
    ("model", "data", "says"),
    [
        (
            LMGRPOConfig,
            {"adv_estimator": "grpo++"},
            "algorithm.adv_estimator: unknown advantage estimator 'grpo++'; registered: dr_grpo, grpo, "
            "reinforce_plus_plus, rloo (got 'grpo++')",
        ),
        (
            LMGRPOConfig,
            {"policy_loss": "clip"},
            "algorithm.policy_loss: unknown policy loss 'clip'; registered: dapo, gspo, ppo_clip (got 'clip')",
        ),
        (GRPOConfig, {"adv_estimator": "gae"}, "'gae' needs a critic (algorithm.name ppo or ppo_lm)"),
        (LMPPOConfig, {"adv_estimator": "rloo"}, "this algorithm takes one of: gae"),
        (PPOConfig, {"adv_estimator": "grpo"}, "this algorithm takes one of: gae"),
        (
            PPOConfig,
            {"policy_loss": "gspo"},
            "algorithm.policy_loss: policy loss 'gspo' reads whole sequences (algorithm.name grpo, grpo_lm "
            "or ppo_lm); this algorithm trains on single steps and takes one of: dapo, ppo_clip (got 'gspo')",
        ),
        (
            PPOConfig,
            {"policy_loss": "clip"},
            "algorithm.policy_loss: unknown policy loss 'clip'; registered: dapo, ppo_clip (got 'clip')",
        ),
        (LMPPOConfig, {"dynamic_sampling": {}}, "algorithm.dynamic_sampling: a grpo_lm option"),
        (GRPOConfig, {"aggregation": "mean"}, "algorithm.aggregation: Input should be 'token-mean'"),
        (
            LMGRPOConfig,
            {"overlong": {"max_length": 4, "cache": 8}},
            "cache (8) must not exceed max_length (4)",
        ),
        (GRPOConfig, {"success_band": {"low": 0.9, "high": 0.1, "success_return": 1}}, "low (0.9) must not"),
    ],
)
def test_a_bad_name_is_one_line_with_its_path_and_the_registered_names(model, data, says) -> None:
    with pytest.raises(ConfigError) as err:
        validate_model(model, data, "algorithm")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_aggregation_defaults_to_the_loss_then_the_estimator_then_token_mean() -> None:
    resolve = objectives.resolve_aggregation
    assert resolve(LMGRPOConfig()) == "token-mean"  # today's default
    assert resolve(LMGRPOConfig(adv_estimator="dr_grpo")) == "seq-mean-token-sum-norm"
    assert resolve(LMGRPOConfig(adv_estimator="dr_grpo", policy_loss="gspo")) == "seq-mean-token-mean"
    assert resolve(GRPOConfig(policy_loss="dapo", aggregation="seq-mean-token-sum")) == "seq-mean-token-sum"


# -- the estimators ------------------------------------------------------------------------------

# two groups of G = 4: [1, 0, 0, 1] has mean 0.5 and unbiased std sqrt(4 * 0.25 / 3) = 1/sqrt(3);
# [2, 2, 2, 2] has mean 2 and std 0
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
A = 0.5 / (1 / math.sqrt(3) + 1e-6)  # 0.866 (GRPO's eps = 1e-6 beside the std)


def test_grpo_divides_by_the_group_std() -> None:
    got = est("grpo")(Outcomes.consecutive(REWARDS, 4), LMGRPOConfig(group_size=4))
    assert torch.allclose(got, torch.tensor([A, -A, -A, A, 0, 0, 0, 0]), atol=1e-6)
    # any order, groups by id (a distributed rollout's): the same advantage for each episode
    perm = torch.tensor([5, 0, 7, 2, 1, 4, 3, 6])
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])[perm]
    shuffled = est("grpo")(Outcomes(REWARDS[perm], ids, 4), None)
    assert torch.allclose(shuffled, got[perm])


def test_dr_grpo_only_centres() -> None:
    # r - mean_g: [0.5, -0.5, -0.5, 0.5] and [0, 0, 0, 0]; no 1/std (no difficulty bias)
    got = est("dr_grpo")(Outcomes.consecutive(REWARDS, 4), None)
    assert got.tolist() == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0]


def test_rloo_uses_the_mean_of_the_other_samples() -> None:
    # G = 3, rewards [1, 0, 2]: baselines (0+2)/2 = 1, (1+2)/2 = 1.5, (1+0)/2 = 0.5
    # -> A = [0, -1.5, 1.5] (= 3/2 * (r - mean 1))
    got = est("rloo")(Outcomes.consecutive(torch.tensor([1.0, 0.0, 2.0]), 3), None)
    assert torch.allclose(got, torch.tensor([0.0, -1.5, 1.5]))


def test_reinforce_plus_plus_normalises_over_the_batch_tokens() -> None:
    r = torch.tensor([1.0, 0.0, 1.0, 0.0])
    # each episode once: mean 0.5, unbiased var 4 * 0.25 / 3 = 1/3 -> +-0.5 * sqrt(3) = +-0.866
    plain = est("reinforce_plus_plus")(Outcomes.consecutive(r, 2), None)
    assert torch.allclose(plain, torch.tensor([1, -1, 1, -1]) * 0.5 / math.sqrt(1 / 3 + 1e-8))
    # weighted by tokens n = [2, 1, 1, 4] (8 in all): mu = (2 + 1) / 8 = 0.375,
    # var = (2 * 0.625^2 + 0.375^2 + 0.625^2 + 4 * 0.375^2) / 7 = 1.875 / 7 = 0.267857,
    # A = 0.625 / 0.517549 = 1.207615 for a reward of 1, -0.375 / 0.517549 = -0.724569 for 0
    lengths = torch.tensor([2.0, 1.0, 1.0, 4.0])
    got = est("reinforce_plus_plus")(Outcomes.consecutive(r, 2, lengths), None)
    assert torch.allclose(got, torch.tensor([1.207615, -0.724569, 1.207615, -0.724569]), atol=1e-5)
    # not per group: the second group's baseline is the batch's, not its own
    assert not torch.allclose(got, est("rloo")(Outcomes.consecutive(r, 2), None))


def test_gae_over_time_steps_and_over_masked_tokens() -> None:
    # time-major, one env, gamma 0.9, lambda 0.8, terminated at t = 1:
    # delta_1 = 1 + 0 - 0.5 = 0.5 = A_1; delta_0 = 1 + 0.9 * 0.5 - 0.5 = 0.95,
    # A_0 = 0.95 + 0.9 * 0.8 * 0.5 = 1.31; returns = A + V
    steps = StepRewards(
        torch.tensor([[1.0], [1.0]]),
        torch.tensor([[0.5], [0.5]]),
        0.9,
        0.8,
        next_values=torch.tensor([[0.5], [7.0]]),
        terminated=torch.tensor([[False], [True]]),
        truncated=torch.tensor([[False], [False]]),
    )
    adv, ret = est("gae")(steps, None)
    assert torch.allclose(adv, torch.tensor([[1.31], [0.5]])) and torch.allclose(ret, adv + 0.5)
    # a token sequence with a skipped (inserted) position, gamma = lambda = 1: position 2 is the
    # last step, delta = 1 - 0.4 = 0.6; position 0's successor is position 2:
    # delta = 0 + 0.4 - 0.2 = 0.2, A_0 = 0.2 + 0.6 = 0.8; the skipped position gets 0
    tokens = StepRewards(
        torch.tensor([[0.0, 0.0, 1.0]]),
        torch.tensor([[0.2, 9.0, 0.4]]),
        1.0,
        1.0,
        mask=torch.tensor([[1, 0, 1]]),
    )
    adv, _ = est("gae")(tokens, None)
    assert torch.allclose(adv, torch.tensor([[0.8, 0.0, 0.6]]))


# -- the losses ----------------------------------------------------------------------------------


def test_aggregations_by_hand() -> None:
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert float(aggregate(per_token, mask, "token-mean")) == 10 / 4  # (1+2+3+4) / 4 tokens
    assert float(aggregate(per_token, mask, "seq-mean-token-sum")) == (6 + 4) / 2
    assert float(aggregate(per_token, mask, "seq-mean-token-mean")) == (2 + 4) / 2
    assert float(aggregate(per_token, mask, "seq-mean-token-sum-norm", 5)) == 10 / (2 * 5)
    # split by rows: each part's loss times its share adds up to the whole's
    for mode in objectives.AGGREGATIONS:
        whole = aggregate(per_token, mask, mode, 5)
        parts = sum(
            float(aggregate(per_token[i : i + 1], mask[i : i + 1], mode, 5))
            * aggregation_share(mask[i : i + 1], mask, mode)
            for i in range(2)
        )
        assert parts == pytest.approx(float(whole))


def test_ppo_clip_by_hand() -> None:
    # ratios 1.5 and 0.5, A = +1 for sequence 0 and -1 for sequence 1, clip 0.2:
    # seq 0: min(1.5, 1.2) = 1.2 and min(0.5, 0.8) = 0.5; seq 1: min(-1.5, -1.2) = -1.5 and
    # min(-0.5, -0.8) = -0.8; token-mean of the negated objective: (-1.2 - 0.5 + 1.5 + 0.8) / 4 = 0.15
    logp = torch.log(torch.tensor([[1.5, 0.5], [1.5, 0.5]]))
    mask = torch.ones(2, 2)
    out, st = loss("ppo_clip")(
        logp, torch.zeros(2, 2), torch.tensor([1.0, -1.0]), mask, LossSettings(0.2, 0.2)
    )
    assert float(out) == pytest.approx(0.15)
    assert float(st["clip_fraction"]) == 1.0 and float(st["ratio_mean"]) == pytest.approx(1.0)


def test_dual_clip_bounds_a_negative_advantage_by_hand() -> None:
    # ratio 5 on both rows, clip 0.2, c = 3: A = -1 -> min(-5, -1.2) = -5, bounded by
    # max(-5, 3 * -1) = -3; A = +1 -> min(5, 1.2) = 1.2 (untouched); token-mean of the negated
    # objective: (3 - 1.2) / 2 = 0.9 (without the dual clip: (5 - 1.2) / 2 = 1.9)
    logp, adv, mask = torch.log(torch.full((2, 1), 5.0)), torch.tensor([-1.0, 1.0]), torch.ones(2, 1)
    for name in ("ppo_clip", "dapo"):
        out, _ = loss(name)(logp, torch.zeros(2, 1), adv, mask, LossSettings(0.2, 0.2, dual_clip=3.0))
        assert float(out) == pytest.approx(0.9), name
        plain, _ = loss(name)(logp, torch.zeros(2, 1), adv, mask, LossSettings(0.2, 0.2))
        assert float(plain) == pytest.approx(1.9)
    # a caller that reads no statistics gets none
    assert loss("ppo_clip")(logp, torch.zeros(2, 1), adv, mask, LossSettings(stats=False))[1] == {}


def test_dapo_clips_higher_and_weighs_every_token_alike() -> None:
    # eps_low 0.2, eps_high 0.28, A = 1: ratio 1.5 -> 1.28 (not PPO's 1.2); ratio 0.5 -> 0.5
    # sequence 0 has tokens [1.5, 0.5], sequence 1 one token [1.5] (padding after it):
    # token-level: -(1.28 + 0.5 + 1.28) / 3 = -1.02; per sequence it would be
    # -((1.28 + 0.5) / 2 + 1.28) / 2 = -1.085
    logp = torch.log(torch.tensor([[1.5, 0.5], [1.5, 1.0]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    s = LossSettings(0.2, 0.28, aggregation=objectives.resolve_aggregation(LMGRPOConfig(policy_loss="dapo")))
    out, _ = loss("dapo")(logp, torch.zeros(2, 2), torch.ones(2), mask, s)
    assert float(out) == pytest.approx(-1.02)
    s.aggregation = "seq-mean-token-mean"
    assert float(loss("dapo")(logp, torch.zeros(2, 2), torch.ones(2), mask, s)[0]) == pytest.approx(-1.085)


def test_gspo_clips_one_length_normalised_ratio_per_sequence() -> None:
    # sequence 0: token log-ratios [log 2, 0] -> s = exp((log 2 + 0) / 2) = sqrt(2) = 1.414,
    # A = 1, clip 0.2 -> min(1.414, 1.2) = 1.2 (each token's ratio is s, not 2 and 1);
    # sequence 1: one token of ratio 0.9, A = -1 -> min(-0.9, -0.9) = -0.9;
    # seq-mean-token-mean of the negated objective: (-1.2 + 0.9) / 2 = -0.15
    logp = torch.tensor([[math.log(2.0), 0.0], [math.log(0.9), 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    s = LossSettings(0.2, 0.2, aggregation="seq-mean-token-mean")
    out, st = loss("gspo")(logp, torch.zeros(2, 2), torch.tensor([1.0, -1.0]), mask, s)
    assert float(out.detach()) == pytest.approx(-0.15)
    assert float(st["ratio_mean"]) == pytest.approx((2 * math.sqrt(2) + 0.9) / 3)
    # unclipped, the gradient is the sequence objective's: d s / d logp_t = s / |y|
    logp2 = torch.tensor([[0.1, -0.1]], requires_grad=True)  # s = exp(0) = 1, inside the clip
    out2, _ = loss("gspo")(logp2, torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2), s)
    out2.backward()
    assert torch.allclose(logp2.grad, torch.tensor([[-0.5, -0.5]]))


def test_every_loss_adds_the_k3_kl() -> None:
    # log pi = 0, log pi_ref = log 2 per token: k3 = exp(log 2) - log 2 - 1 = 0.30685 per token;
    # ratio 1 and A = 0: the loss is kl_coef * k3 alone
    ref = torch.full((1, 2), math.log(2.0))
    for name in objectives.policy_loss_names():
        s = LossSettings(0.2, 0.2, kl_coef=0.5, aggregation="token-mean")
        out, st = loss(name)(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1), torch.ones(1, 2), s, ref)
        assert float(out) == pytest.approx(0.5 * (1 - math.log(2.0))), name
        assert float(st["kl"]) == pytest.approx(1 - math.log(2.0))


# -- shaping and filters -------------------------------------------------------------------------


def test_dapo_overlong_penalty_by_hand() -> None:
    # L_max 10, L_cache 4: no penalty up to 6 tokens, (6 - n) / 4 from 7 to 10, -1 beyond
    n = torch.tensor([5, 6, 8, 10, 11])
    assert overlong_penalty(n, 10, 4).tolist() == [0.0, 0.0, -0.5, -1.0, -1.0]
    assert overlong_penalty(n, 10, 4, penalty=0.5).tolist() == [0.0, 0.0, -0.25, -0.5, -0.5]
    # the tokens of an episode: its sequences' trained tokens added up
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]])
    assert episode_tokens(mask, torch.tensor([0, 0, 1]), 2).tolist() == [5.0, 1.0]


def test_group_filters() -> None:
    assert uniform_groups(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2).tolist() == [True, False]
    # success rates by group: 4/4, 1/4, 0/4, 2/4 -> the band [0.1, 0.9] keeps groups 1 and 3
    succ = torch.tensor([1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0]).bool()
    ids = torch.arange(16) // 4
    keep = success_band(succ, ids, 0.1, 0.9)
    assert keep.tolist() == [False] * 4 + [True] * 4 + [False] * 4 + [True] * 4
    # scored with the band: dropped episodes get 0, kept ones their group's advantage
    cfg = GRPOConfig(
        group_size=4, num_groups=4, success_band={"low": 0.1, "high": 0.9, "success_return": 1.0}
    )
    adv, kept = score_episodes(est("dr_grpo"), cfg, succ.float(), ids)
    assert kept.tolist() == keep.tolist()
    assert adv.tolist() == [0.0] * 4 + [0.75, -0.25, -0.25, -0.25] + [0.0] * 4 + [0.5, -0.5, 0.5, -0.5]


# -- the defaults give today's numbers -----------------------------------------------------------


def _old_group_advantages(rewards: torch.Tensor, g: int, scale: bool = True) -> torch.Tensor:
    """The pre-registry ``grpo.functional.group_advantages`` (a verbatim copy)."""
    grouped = rewards.view(-1, g)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (grouped.std(dim=1, keepdim=True) + 1e-6)
    return centred.reshape(-1)


def _old_policy_loss(logp, old, adv, mask, lo, hi, ref, kl_coef, aggregation):
    """The pre-registry ``grpo.functional.policy_loss`` (a verbatim copy of its loss)."""
    adv = adv.unsqueeze(1) if adv.ndim == 1 else adv
    ratio = torch.exp(logp - old)
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - lo, 1.0 + hi) * adv)
    if kl_coef > 0.0:
        d = ref - logp
        per_token = per_token + kl_coef * (torch.expm1(d) - d)
    m = mask.to(per_token.dtype)
    if aggregation == "token-mean":
        return (per_token * m).sum() / m.sum().clamp(min=1.0)
    return ((per_token * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)).mean()


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_the_default_estimator_and_loss_give_the_numbers_of_before(aggregation: str) -> None:
    g = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (12,), generator=g).float()
    for cfg in (LMGRPOConfig(group_size=4), GRPOConfig(group_size=4, num_groups=3)):
        got = est(cfg.adv_estimator)(Outcomes.consecutive(rewards, 4), cfg)
        assert torch.equal(got, _old_group_advantages(rewards, 4))
    logp, old, ref = (torch.randn(6, 5, generator=g) * 0.3 for _ in range(3))
    adv, mask = torch.randn(6, generator=g), (torch.rand(6, 5, generator=g) > 0.3).float()
    cfg = LMGRPOConfig(aggregation=aggregation)
    s = LossSettings(cfg.clip_low, cfg.clip_high, 0.05, objectives.resolve_aggregation(cfg))
    got, _ = loss(cfg.policy_loss)(logp, old, adv, mask, s, ref)
    assert torch.equal(got, _old_policy_loss(logp, old, adv, mask, 0.2, 0.28, ref, 0.05, aggregation))


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_embodied_ppo_default_loss_gives_the_numbers_of_before(dual_clip: float | None) -> None:
    # embodied PPO trains on single steps: [B, 1] rows under an all-ones mask; the registered
    # ppo_clip gives what ppo.functional.policy_loss (the learner's loss before the registry) gave
    from rlinf_algos.ppo import functional as ppo_f

    g = torch.Generator().manual_seed(1)
    logp, old = torch.randn(64, generator=g) * 0.3, torch.randn(64, generator=g) * 0.3
    adv = torch.randn(64, generator=g)
    cfg = PPOConfig(clip_high=0.28, dual_clip=dual_clip)
    s = LossSettings(
        cfg.clip_low, cfg.clip_high, aggregation=objectives.resolve_aggregation(cfg), dual_clip=dual_clip
    )
    got, _ = loss(cfg.policy_loss)(logp.unsqueeze(1), old.unsqueeze(1), adv, torch.ones(64, 1), s)
    want = ppo_f.policy_loss(logp - old, adv, cfg.clip_low, cfg.clip_high, dual_clip)
    assert torch.equal(got, want)

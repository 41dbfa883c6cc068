"""Every registered advantage estimator and policy loss runs by name: on embodied GRPO
(``examples/grpo_pendulum.yaml`` shortened, in process), on embodied PPO (``examples/quickstart.yaml``
shortened: the losses of single steps) and on the language-model learner (a tiny model's update)
in the fast suite, and on ``examples/grpo_arith.yaml`` (a tiny model, one
iteration) in the slow one; DAPO's dynamic sampling draws more prompts until enough groups have
unequal rewards, and the success band leaves groups out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from rlinf_algos import objectives
from rlinf_algos.lm import hf
from rlinf_algos.lm.config import LMGRPOConfig, LMModelConfig, LMPPOConfig, ModelInitConfig, load_lm_sections
from rlinf_algos.lm.learner import LMLearner, pack_batch
from rlinf_algos.lm.ppo import PPOLMLearner
from rlinf_algos.lm.tokens import LMTokenizer
from rlinf_algos.training import run_training
from rlinf_core.config import apply_overrides, load_yaml

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
TOK = LMTokenizer.arith()

OUTCOME = ["grpo", "dr_grpo", "rloo", "reinforce_plus_plus"]
LOSSES = ["ppo_clip", "dapo", "gspo"]

PENDULUM_SHORT = [
    "runner.scheduler=local",
    "algorithm.group_size=2",
    "algorithm.num_groups=2",
    "algorithm.update_epochs=1",
    "algorithm.minibatch_size=64",
    "env.num_envs=4",
    "env.max_episode_steps=30",
    "model.hidden_sizes=[16,16]",
    "runner.total_steps=100",
    "runner.log_interval=1",
    "runner.checkpoint_interval=0",
]
"""``examples/grpo_pendulum.yaml`` in process, two groups of two episodes of at most 30 steps."""


def _pendulum(tmp_path: Path, extra: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    config = apply_overrides(load_yaml(EXAMPLES / "grpo_pendulum.yaml"), [*PENDULUM_SHORT, *extra])
    summary = run_training(config, run_dir=tmp_path / "run")
    import csv

    with (tmp_path / "run" / "metrics.csv").open() as f:
        return summary, list(csv.DictReader(f))


@pytest.mark.parametrize(
    ("estimator", "loss"),
    [*((e, "ppo_clip") for e in OUTCOME), *(("grpo", x) for x in LOSSES[1:])],
)
def test_embodied_grpo_runs_each_by_name(tmp_path: Path, estimator: str, loss: str) -> None:
    summary, rows = _pendulum(
        tmp_path, [f"algorithm.adv_estimator={estimator}", f"algorithm.policy_loss={loss}"]
    )
    assert summary["total_env_steps"] >= 100 and rows
    assert all(float(r["policy_loss"]) == float(r["policy_loss"]) for r in rows)  # finite, not NaN
    resolved = (tmp_path / "run" / "config.yaml").read_text()
    assert f"adv_estimator: {estimator}" in resolved and f"policy_loss: {loss}" in resolved


def test_embodied_grpo_success_band_leaves_groups_out(tmp_path: Path) -> None:
    # InvertedPendulum pays 1 per step: with a success return of 1e9 no episode succeeds, every
    # group's success rate (0) is outside [0.1, 0.9], and no update takes a step
    summary, rows = _pendulum(
        tmp_path,
        ["+algorithm.success_band={low: 0.1, high: 0.9, success_return: 1.0e9}", "algorithm.kl_coef=0.1"],
    )
    assert summary["total_env_steps"] >= 100 and rows
    assert all(float(r["grad_norm"]) == 0.0 and float(r["kl_ref"]) == 0.0 for r in rows)


QUICKSTART_SHORT = [
    "runner.scheduler=local",
    "algorithm.rollout_steps=16",
    "algorithm.minibatch_size=16",
    "algorithm.update_epochs=1",
    "env.num_envs=2",
    "model.hidden_sizes=[16,16]",
    "runner.total_steps=64",
    "runner.log_interval=1",
    "runner.checkpoint_interval=0",
]
"""``examples/quickstart.yaml`` (embodied PPO) in process, two updates of 32 steps."""


@pytest.mark.parametrize("loss", ["ppo_clip", "dapo"])
def test_embodied_ppo_runs_each_loss_by_name(tmp_path: Path, loss: str) -> None:
    # gae is embodied PPO's one estimator (a critic's); gspo, which reads whole sequences, is
    # refused at validation (test_algos_objectives.py)
    config = apply_overrides(
        load_yaml(EXAMPLES / "quickstart.yaml"),
        [*QUICKSTART_SHORT, "algorithm.adv_estimator=gae", f"algorithm.policy_loss={loss}", "algorithm.clip_high=0.28"],
    )  # fmt: skip
    summary = run_training(config, run_dir=tmp_path / "run")
    assert summary["total_env_steps"] >= 64
    import csv

    with (tmp_path / "run" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows and all(float(r["policy_loss"]) == float(r["policy_loss"]) for r in rows)
    assert f"policy_loss: {loss}" in (tmp_path / "run" / "config.yaml").read_text()


# -- the language-model learner ------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> LMModelConfig:
    init = ModelInitConfig(hidden_size=16, num_layers=1, num_heads=2, max_position_embeddings=32)
    return LMModelConfig(path=str(hf.new_model_folder(tmp_path_factory.mktemp("m") / "m", init)))


def _batch(rewards: list[float]) -> dict[str, torch.Tensor]:
    """One sequence per episode: ``<bos>1+1=`` and 1 to 3 digits, the last 3 to 5 tokens trained."""
    seqs, masks = [], []
    for i, _ in enumerate(rewards):
        text = "<bos>1+1=" + "2" * (1 + i % 3) + "<eos>"
        ids = TOK.encode(text)
        seqs.append(ids)
        masks.append([0] * 4 + [1] * (len(ids) - 4))
    batch = pack_batch(seqs, masks, TOK.pad_id)
    batch["episode_index"] = torch.arange(len(rewards))
    batch["rewards"] = torch.tensor(rewards)
    return batch


@pytest.mark.parametrize(
    ("estimator", "loss"), [*((e, "ppo_clip") for e in OUTCOME), *(("grpo", x) for x in LOSSES[1:])]
)
def test_lm_learner_updates_with_each_by_name(spec: LMModelConfig, estimator: str, loss: str) -> None:
    torch.manual_seed(0)
    cfg = LMGRPOConfig(group_size=2, adv_estimator=estimator, policy_loss=loss, kl_coef=0.0, lr=1e-2)
    actor = LMLearner(hf.load_causal_lm(spec), cfg)
    before = [p.detach().clone() for p in actor.params]
    stats = actor.update(_batch([1.0, 0.0, 0.0, 1.0]))
    assert stats["trained_sequences"] == 4 and stats["grad_norm"] > 0 and stats["loss"] == stats["loss"]
    assert any(not torch.equal(a, b) for a, b in zip(before, actor.params, strict=True))


def test_ppo_lm_learner_runs_gae_by_name(spec: LMModelConfig) -> None:
    cfg = LMPPOConfig(adv_estimator="gae", policy_loss="gspo", kl_coef=0.0, group_size=1)
    actor = PPOLMLearner(hf.load_causal_lm(spec), cfg)
    stats = actor.update(_batch([1.0, 0.0]))
    assert stats["trained_sequences"] == 2 and stats["value_loss"] > 0


def test_dynamic_sampling_defers_until_enough_groups_differ(spec: LMModelConfig) -> None:
    cfg = LMGRPOConfig(group_size=2, prompts_per_iter=2, kl_coef=0.0, dynamic_sampling={"max_draws": 2})
    actor = LMLearner(hf.load_causal_lm(spec), cfg)
    # draw 0: groups [1, 1] (uniform) and [1, 0]: one group to learn from, fewer than 2 -> wait
    first = actor.update(_batch([1.0, 1.0, 1.0, 0.0]))
    assert first["deferred"] == 1.0 and first["trained_sequences"] == 0 and actor.version == 1
    # draw 1: [0, 1] and [0, 0]: two held groups now -> one update on them
    second = actor.update(_batch([0.0, 1.0, 0.0, 0.0]))
    assert "deferred" not in second and second["draws"] == 1 and second["kept_groups"] == 2
    assert second["trained_sequences"] == 4 and actor.held == []
    # the bound: every draw uniform, max_draws 2 -> two deferrals, then an update on nothing
    outs = [actor.update(_batch([1.0, 1.0, 0.0, 0.0])) for _ in range(3)]
    assert [o.get("deferred", 0.0) for o in outs] == [1.0, 1.0, 0.0]
    assert outs[-1]["draws"] == 2 and outs[-1]["kept_groups"] == 0 and outs[-1]["trained_sequences"] == 0


def test_overlong_penalty_reaches_the_advantages(spec: LMModelConfig) -> None:
    # 3, 4, 5, 3 trained tokens; L_max 5, L_cache 2: penalties 0, (3 - 4) / 2 = -0.5, -1, 0; the
    # rewards 1 become [1, 0.5] and [0, 1], which Dr. GRPO centres to [0.25, -0.25], [-0.5, 0.5]
    cfg = LMGRPOConfig(
        group_size=2, kl_coef=0.0, adv_estimator="dr_grpo", overlong={"max_length": 5, "cache": 2}
    )
    actor = LMLearner(hf.load_causal_lm(spec), cfg)
    batch = _batch([1.0, 1.0, 1.0, 1.0])
    adv, uniform = actor.advantages(batch)
    assert torch.allclose(adv, torch.tensor([0.25, -0.25, -0.5, 0.5])) and not uniform.any()
    assert actor.update(batch)["overlong_penalty"] == pytest.approx(-1.5 / 4)


# -- grpo_arith, one iteration by name (slow) ----------------------------------------------------

TINY = ("runner.checkpoint_interval=0",)  # beside conftest's tiny_lm


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        *([f"algorithm.adv_estimator={e}"] for e in OUTCOME),
        *([f"algorithm.policy_loss={x}"] for x in LOSSES),
        ["algorithm.name=ppo_lm", "algorithm.adv_estimator=gae"],
        ["+algorithm.dynamic_sampling={max_draws: 2}", "+algorithm.overlong={max_length: 40, cache: 8}"],
    ],
    ids=[*OUTCOME, *LOSSES, "ppo_lm-gae", "dapo-sampling"],
)
def test_grpo_arith_runs_each_by_name(tmp_path: Path, extra: list[str], tiny_lm: Any) -> None:
    from rlinf_algos.lm.flow import train_lm

    data = tiny_lm.config(*TINY, "runner.scheduler=local", *extra)
    run = load_lm_sections(data)
    summary = train_lm(run, tmp_path, log=None)
    assert summary["iterations"] == 1
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["loss"] == rows[0]["loss"]
    if run.algorithm.dynamic_sampling is not None:
        assert 0 <= rows[0]["draws"] <= 2 and "overlong_penalty" in rows[0]
    assert objectives.resolve_aggregation(run.algorithm) in objectives.AGGREGATIONS


@pytest.mark.slow
@pytest.mark.extended  # 90 s on CI's 2 cores; CI runs dynamic sampling locally
def test_grpo_arith_dynamic_sampling_on_placed_workers(
    tmp_path: Path, rlinf_script: Any, tiny_lm: Any
) -> None:
    """``rlinf train`` on its default scheduler (ray: rollout, reward and actor workers): an
    iteration whose update the actor defers draws more prompts through the same workers (the
    actor's version moves on each draw, so every draw has channel keys of its own)."""
    overrides = tiny_lm(*TINY)
    proc = rlinf_script(
        "train", str(EXAMPLES / "grpo_arith.yaml"), *overrides, "algorithm.iterations=2",
        "algorithm.adv_estimator=rloo", "algorithm.policy_loss=dapo", "+algorithm.dynamic_sampling={max_draws: 2}",
        "--run-dir", str(tmp_path / "run"), "--quiet", timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["scheduler"] == "ray" and summary["iterations"] == 2
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2] and all(0 <= r["draws"] <= 2 for r in rows)


@pytest.mark.slow
@pytest.mark.extended  # 65 s on CI's 2 cores; CI places PPO by name
def test_embodied_grpo_by_name_on_placed_workers(tmp_path: Path) -> None:
    """``examples/grpo_pendulum.yaml`` shortened on its default scheduler (ray: env, rollout,
    reward, reference and actor workers): the reward worker scores with the named estimator and
    the success band, the actor trains with the named loss."""
    local = [o for o in PENDULUM_SHORT if not o.startswith("runner.scheduler")]
    extra = [
        "algorithm.adv_estimator=reinforce_plus_plus", "algorithm.policy_loss=gspo",
        "+algorithm.success_band={low: 0.0, high: 0.9, success_return: 10.0}", "runner.total_steps=200",
    ]  # fmt: skip
    config = apply_overrides(load_yaml(EXAMPLES / "grpo_pendulum.yaml"), [*local, *extra])
    summary = run_training(config, run_dir=tmp_path / "run")
    assert summary["workers"]["reward"] == 1 and summary["total_env_steps"] >= 200
    assert summary["restarts"] == 0 and summary["dropped_batches"] == 0


@pytest.mark.slow
def test_embodied_ppo_by_name_on_placed_workers(tmp_path: Path) -> None:
    """``examples/quickstart.yaml`` shortened on its default scheduler (ray: env, rollout and
    actor workers): the actor trains with the named loss and PPO's dual clip through it."""
    local = [o for o in QUICKSTART_SHORT if not o.startswith("runner.scheduler")]
    extra = ["algorithm.policy_loss=dapo", "algorithm.clip_high=0.28", "algorithm.dual_clip=3.0"]
    config = apply_overrides(load_yaml(EXAMPLES / "quickstart.yaml"), [*local, *extra])
    summary = run_training(config, run_dir=tmp_path / "run")
    assert summary["workers"]["actor"] == 1 and summary["total_env_steps"] >= 64
    assert summary["restarts"] == 0 and summary["dropped_batches"] == 0

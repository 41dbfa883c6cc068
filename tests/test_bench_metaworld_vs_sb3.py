"""``benchmarks/metaworld_vs_sb3.py`` (PPO on MetaWorld through rlinf beside Stable-Baselines3):
SB3's PPO takes each example's settings from its YAML (``--config``), and the SB3 side runs end
to end on push-v3, one rollout and the 50-episode evaluation from the fixed initial states, so
the benchmark cannot rot. Slow: a MetaWorld interpreter starts per env, and the evaluation plays
25,000 steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BENCHMARK = "metaworld_vs_sb3"  # the `bench` fixture (tests/conftest.py) imports it
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def metaworld_and_sb3() -> None:
    """Before ``bench`` imports the benchmark: SB3 (the ``bench`` dependency group) and
    MetaWorld's interpreter."""
    pytest.importorskip("stable_baselines3")
    from rlinf_algos.families import get_family
    from rlinf_algos.families.venvs import setup_family

    setup_family(get_family("metaworld"), log=lambda *_: None)


@pytest.mark.parametrize(
    "example", ["metaworld_reach.yaml", "metaworld_push.yaml", "maniskill_pushcube.yaml"]
)
def test_sb3_ppo_takes_the_examples_settings(bench, example):
    from _equal_wall import settings
    from _sb3 import ppo_like

    s = settings(EXAMPLES / example)
    ppo, model_cfg = s["ppo"], s["model"]
    envs = bench.make_envs(EXAMPLES / "metaworld_reach.yaml", "reach-v3", 2, 0)  # any Box env will do
    model, venv = ppo_like(envs.unwrapped, s, seed=0)
    try:
        assert (model.n_steps, model.batch_size, model.n_epochs) == (
            ppo["rollout_steps"],
            ppo["minibatch_size"],
            ppo["update_epochs"],
        )
        assert (model.gamma, model.gae_lambda, venv.gamma) == (ppo["gamma"], ppo["gae_lambda"], ppo["gamma"])
        assert model.clip_range(1.0) == ppo["clip_low"] and model.clip_range_vf(1.0) == ppo["value_clip"]
        assert model.lr_schedule(0.5) == pytest.approx(ppo["lr"] * (0.5 if ppo["anneal_lr"] else 1.0))
        assert (model.ent_coef, model.vf_coef, model.max_grad_norm) == (
            ppo["ent_coef"],
            ppo["vf_coef"],
            ppo["max_grad_norm"],
        )
        hidden = [m.out_features for m in model.policy.mlp_extractor.policy_net if hasattr(m, "out_features")]
        assert hidden == model_cfg["hidden_sizes"]
        assert float(model.policy.log_std.detach().mean()) == pytest.approx(model_cfg["log_std_init"])
        assert (venv.norm_obs, venv.norm_reward) == (ppo["normalize_obs"], ppo["normalize_reward"])
    finally:
        venv.close()


def test_the_sb3_side_trains_on_push_and_is_evaluated_like_rlinf(bench, tmp_path):
    out = tmp_path / "sb3.json"
    bench.sb3_child(EXAMPLES / "metaworld_push.yaml", "push-v3", seed=0, steps=4000, wall=300.0, out=str(out))
    res = json.loads(out.read_text())
    assert res["env_steps"] == 4000  # one rollout of 500 x 8 envs (the YAML's rollout_steps)
    assert res["episodes"] == bench.EVAL_EPISODES
    for key in ("success_at_end", "success_once"):
        lo, hi = res[key]["ci95"]
        assert lo - 1e-9 <= res[key]["rate"] <= hi + 1e-9 and 0.0 <= lo < hi <= 1.0
    assert res["curve"] and res["curve"][-1]["step"] == 4000
    assert res["curve"][-1]["success_rate"] is not None  # each env's 500-step episode ended


def test_rlinf_is_stopped_at_the_wall_budget_and_still_writes_its_policy(bench, tmp_path):
    """The harness's clock (both benchmarks'): SIGTERM once the run's training clock reaches the
    budget; the run finishes its iteration and writes its summary and policy."""
    from _equal_wall import cap_rlinf, start

    run_dir = tmp_path / "run"
    cmd = [
        "rlinf", "train", str(EXAMPLES / "cartpole.yaml"), "runner.scheduler=local",
        "runner.total_steps=10000000", "runner.log_interval=256", "runner.loggers=[csv]",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    proc = start(cmd, cpu=0, log=tmp_path / "rlinf.log")
    assert cap_rlinf(proc, run_dir, wall=4.0, timeout=300.0), (tmp_path / "rlinf.log").read_text()[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert 0 < summary["total_env_steps"] < 10_000_000
    assert 4.0 <= summary["wall_s"] < 60.0
    assert (run_dir / "policy.safetensors").exists()

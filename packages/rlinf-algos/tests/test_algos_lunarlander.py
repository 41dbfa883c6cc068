"""LunarLander-v3 (discrete, Box2D; rlinf-algos' ``box2d`` extra): the example, what a machine
without Box2D is told, and issue 41's learning check (mean evaluation return at least 200 within
1M env steps, opt-in: minutes per seed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.evaluate import evaluate_policy, load_policy
from rlinf_algos.training import run_training, validate_run_config

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "lunarlander.yaml"


def test_lunarlander_example_validates_with_the_zoo_settings() -> None:
    import yaml

    algo_cls, cfg, scheduler = validate_run_config(yaml.safe_load(EXAMPLE.read_text()))
    assert (algo_cls.PLUGIN_NAME, scheduler) == ("ppo", "local")
    # RL Baselines3 Zoo's PPO for LunarLander: 16 envs x 1024 steps, minibatch 64, 4 epochs
    got = (cfg.rollout_steps, cfg.minibatch_size, cfg.update_epochs, cfg.gamma, cfg.gae_lambda, cfg.ent_coef)
    assert got == (1024, 64, 4, 0.999, 0.98, 0.01)
    assert (cfg.lr, cfg.anneal_lr, cfg.value_clip, cfg.normalize_obs, cfg.normalize_reward) == (
        3e-4,
        False,
        None,
        False,
        False,
    )


def test_lunarlander_trains_and_evaluates_in_one_process(tmp_path: Path) -> None:
    """A short run of the example (Box2D installed by the workspace's dev group): a Categorical
    over the 4 engine actions, saved and evaluated like any run."""
    overrides = ["env.num_envs=2", "algorithm.rollout_steps=64", "runner.total_steps=256"]
    summary = run_training(str(EXAMPLE), run_dir=tmp_path / "run", overrides=overrides)
    assert summary["total_env_steps"] == 256
    _, record = load_policy(tmp_path / "run")
    assert record["env_id"] == "LunarLander-v3"
    assert record["spec"]["action_space"] == {"kind": "discrete", "n": 4, "start": 0}
    first = evaluate_policy(tmp_path / "run", episodes=2, num_envs=2)
    assert first["returns"] == evaluate_policy(tmp_path / "run", episodes=2, num_envs=2)["returns"]


NO_BOX2D = """\
raise ModuleNotFoundError("No module named 'Box2D'", name="Box2D")
"""


def test_dry_run_names_the_box2d_extra_when_box2d_is_missing(
    rlinf_script: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine without Box2D (a module first on the path that fails to import, as a missing
    one does), ``--dry-run`` fails with exit 2 and one line that says what to install, before
    anything starts."""
    shadow = tmp_path / "shadow"
    (shadow / "Box2D").mkdir(parents=True)
    (shadow / "Box2D" / "__init__.py").write_text(NO_BOX2D)
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    proc = rlinf_script("train", str(EXAMPLE), "--dry-run", timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    want = (
        "env.id: 'LunarLander-v3' needs Box2D and pygame-ce, which are not installed here (no module "
        "named 'Box2D'): install rlinf-algos' box2d extra (`uv sync --all-packages` in the rlinf "
        "workspace, or `pip install 'rlinf-algos[box2d]'`)"
    )
    assert want in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# The learning check of issue 41. 1M env steps take about 75 s per seed on the idle 2-core
# machine: CI's learning suite runs seed 1 (a regression fails CI); RLINF_LUNARLANDER_SEEDS=0,1,2
# runs the recorded seeds. The record, beside SB3 at the same settings and in the same run, is
# benchmarks/results/lunarlander_ppo_vs_sb3_3seeds.json (benchmarks/discrete_vs_sb3.py).
LUNARLANDER_SEEDS = [int(s) for s in os.environ.get("RLINF_LUNARLANDER_SEEDS", "1").split(",") if s.strip()]


@pytest.mark.slow
@pytest.mark.learning(seconds=338)
@pytest.mark.parametrize("seed", LUNARLANDER_SEEDS)
def test_lunarlander_example_reaches_200_within_1m_steps(seed: int, tmp_path: Path) -> None:
    """``examples/lunarlander.yaml`` (PPO, 999,424 env steps, in one process): mean return of 20
    deterministic evaluation episodes (seeds 10000..10019) at least 200."""
    summary = run_training(str(EXAMPLE), run_dir=tmp_path / "run", overrides=[f"runner.seed={seed}"])
    assert summary["total_env_steps"] <= 1_000_000
    result = evaluate_policy(tmp_path / "run", episodes=20, seed=10_000, num_envs=8)
    assert result["return"]["mean"] >= 200.0, result["returns"]

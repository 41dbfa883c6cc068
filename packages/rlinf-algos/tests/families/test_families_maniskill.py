"""The ``maniskill`` env family through rlinf's runtime: PPO on PushCube-v1 (state) and the
``vla`` model on PickCube-v1 from 64x64 RGB train a few iterations end to end, and a run's
policy is evaluated with ``rlinf eval --suite``. Slow: importing ManiSkill takes 15-30 s here and
SAPIEN renders a CPU frame in 60-250 ms. The adapter itself is tested in
``test_maniskill_adapter.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import rlinf_algos
from rlinf_algos.families import get_family
from rlinf_algos.families.venvs import setup_family

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def maniskill_ready() -> None:
    setup_family(get_family("maniskill"), log=lambda *_: None)


def test_ppo_iterations_on_pushcube_state(maniskill_ready: None, tmp_path: Path) -> None:
    summary = rlinf_algos.train(
        EXAMPLES / "maniskill_pushcube.yaml",
        tmp_path / "run",
        overrides=[
            "runner.scheduler=local",
            "runner.total_steps=800",
            "runner.log_interval=400",
            "runner.loggers=[csv]",
            "env.num_envs=4",
        ],
    )
    assert summary["total_env_steps"] >= 800 and summary["episodes"] >= 8  # 50-step episodes
    policy = rlinf_algos.load_policy(tmp_path / "run")
    assert policy.record["env_family"] == "maniskill"


def test_the_vla_model_trains_on_pickcube_rgb_and_is_evaluated_per_task(
    maniskill_ready: None, tmp_path: Path, host: Any, invoke: Any
) -> None:
    run = tmp_path / "run"
    summary = rlinf_algos.train(
        EXAMPLES / "maniskill_pickcube_vla.yaml",
        run,
        overrides=["runner.total_steps=100", "runner.loggers=[csv]"],
    )
    assert summary["total_env_steps"] >= 100
    res = invoke(host, "eval", str(run), "--suite", "maniskill:PickCube-v1", "--episodes-per-task", "2")
    assert res.exit_code == 0, res.output
    assert "PickCube-v1: success_at_end" in res.output and "2 episodes" in res.output
    assert (run / "eval" / "maniskill_PickCube-v1-seed10000.json").is_file()

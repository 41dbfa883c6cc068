"""``runner.scheduler: local`` is a scheduler: the in-process one
(:mod:`rlinf_algos.runtime.inprocess`) runs the very flow a Ray run runs, every role a worker
object in this process, so:

- a local run launches the same roles (env, rollout, actor; GRPO's reward and reference) and
  every one of them lives in this process (fast);
- the in-process twins of the iteration are gone (fast);
- a local run and a Ray run of the same seed log the same metrics rows, but for the columns that
  measure time (``slow``: each Ray run starts an embedded Ray).
"""

from __future__ import annotations

import csv
import importlib
import os
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.training import run_training
from rlinf_core.config import apply_overrides

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

PPO: dict[str, Any] = {
    "cluster": {
        "num_nodes": 1,
        "component_placement": {
            name: {"node_group": "node", "placement": "0"} for name in ("env", "rollout", "actor")
        },
    },
    "algorithm": {"name": "ppo", "rollout_steps": 32, "minibatch_size": 32, "update_epochs": 2},
    "env": {"id": "InvertedPendulum-v5", "num_envs": 4},
    "model": {"hidden_sizes": [16, 16]},
    "rollout": {"pipeline_stages": 2, "max_staleness": 0},  # strictly on-policy: deterministic
    "runner": {"total_steps": 384, "log_interval": 128, "seed": 5, "loggers": ["csv"]},
}
"""Three quickstart-like PPO iterations (InvertedPendulum, 4 envs x 32 steps in 2 stages)."""

LM_TINY = ("algorithm.iterations=2", "algorithm.kl_coef=0.05", "runner.loggers=[csv]")
"""Beside conftest's ``tiny_lm``: two grpo_lm iterations of a tiny Qwen2 model."""

TIMING = {
    "wall_s", "env_steps_per_s", "rollout_s", "update_s", "wait_s", "tokens_per_s",
    "generate_s", "reward_s", "reference_s", "sync_s",
}  # fmt: skip
"""Columns that measure time: they differ between any two runs."""


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(f)]


def _local(config: dict[str, Any]) -> dict[str, Any]:
    return apply_overrides(config, ["runner.scheduler=local"])


def test_a_local_run_is_the_placed_flow_with_every_role_in_this_process(tmp_path: Path) -> None:
    seen: dict[str, list[int]] = {}

    def on_iteration(run: Any, k: int) -> None:
        seen.update({role: list(pids) for role, pids in run.pids.items()})

    summary = run_training(_local(PPO), run_dir=tmp_path / "run", callbacks={"on_iteration": on_iteration})
    assert summary["total_env_steps"] == 384 and summary["iterations"] == 3
    assert seen == {"env": [os.getpid()], "rollout": [os.getpid()], "actor": [os.getpid()]}
    assert summary["workers"] == {"env": 1, "rollout": 1, "actor": 1, "pipeline_stages": 2}
    assert summary["weight_sync"] == {"requested": "auto", "mode": "local"}
    assert [int(r["step"]) for r in _rows(tmp_path / "run")] == [128, 256, 384]


def test_the_in_process_twins_of_the_iteration_are_gone() -> None:
    for gone in ("rlinf_algos.embodied.local", "rlinf_algos.lm.local"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(gone)
    import rlinf_algos.embodied.recipe as recipe
    import rlinf_algos.flow as flow

    assert not hasattr(flow, "LocalSession") and not hasattr(recipe.Recipe, "local_session")
    assert not hasattr(flow.Flow, "local")


@pytest.mark.slow
def test_ppo_local_and_ray_log_the_same_rows(tmp_path: Path) -> None:
    run_training(_local(PPO), run_dir=tmp_path / "local")
    run_training(PPO, run_dir=tmp_path / "ray")  # an embedded Ray of its own
    local, ray = _rows(tmp_path / "local"), _rows(tmp_path / "ray")
    assert [r["step"] for r in local] == ["128", "256", "384"]
    assert {"episode_return_mean", "policy_loss", "value_loss", "approx_kl"} <= set(local[0])
    assert local == ray


@pytest.mark.slow
@pytest.mark.extended  # 100 s on CI's 2 cores; CI compares PPO's local and Ray rows
def test_grpo_lm_local_and_ray_log_the_same_rows(tmp_path: Path, tiny_lm: Any) -> None:
    config = tiny_lm.config(*LM_TINY)
    run_training(_local(config), run_dir=tmp_path / "local")
    run_training(config, run_dir=tmp_path / "ray")
    local, ray = _rows(tmp_path / "local"), _rows(tmp_path / "ray")
    assert [r["iteration"] for r in local] == ["1", "2"]
    assert {"reward_mean", "loss", "kl", "generated_tokens"} <= set(local[0])
    assert local == ray

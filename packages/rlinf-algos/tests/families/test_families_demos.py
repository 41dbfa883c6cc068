"""Demonstrations and behaviour cloning: ``rlinf demos record`` writes MetaWorld's scripted expert
in LeRobot's layout, and ``model.bc`` fits the policy to it before RL (the warm start is written
and RL starts from it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import rlinf_algos
from rlinf_algos.demos import load_demos, record_demos, steps_until_solved, until_solved
from rlinf_algos.families import get_family
from rlinf_algos.families.venvs import setup_family
from rlinf_algos.run_files import read_state
from rlinf_core.errors import ConfigError, RlinfError


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    setup_family(get_family("metaworld"), log=lambda *_: None)
    out = tmp_path_factory.mktemp("demos") / "reach"
    record_demos("metaworld:reach-v3", out, episodes_per_task=4, num_envs=4, max_episode_steps=60, seed=3)
    return out


def test_the_data_set_has_lerobots_layout(demos: Path) -> None:
    info = json.loads((demos / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v2.1" and info["total_tasks"] == 1
    assert info["features"]["observation.state"]["shape"] == [39] and info["features"]["action"]["shape"] == [
        4
    ]
    episodes = [json.loads(line) for line in (demos / "meta" / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == info["total_episodes"] >= 3 and all(e["success"] for e in episodes)
    assert [e["init"] for e in episodes] == sorted(e["init"] for e in episodes)
    assert (
        json.loads((demos / "meta" / "tasks.jsonl").read_text().splitlines()[0])["task"]
        == "reach the goal position"
    )
    table = pq.read_table(demos / "data" / "chunk-000" / "episode_000000.parquet").to_pydict()
    n = len(table["action"])
    assert table["frame_index"] == list(range(n)) and table["next.success"][-1] is True
    assert set(table["task"]) == {"reach-v3"} and table["index"][0] == 0
    assert not (demos.parent / ".reach.partial").exists()


def test_recording_into_an_existing_folder_or_a_misspelt_suite_is_refused(
    demos: Path, tmp_path: Path
) -> None:
    with pytest.raises(RlinfError, match="exists"):
        record_demos("metaworld:reach-v3", demos, episodes_per_task=1)
    with pytest.raises(ConfigError, match="'reech-v3' is no MetaWorld task"):
        record_demos("metaworld:reech-v3", tmp_path / "x", episodes_per_task=1)


def test_keep_once_records_an_expert_that_solves_then_overshoots(tmp_path: Path) -> None:
    """MetaWorld's door-open-v3 expert opens the door past its goal: success from about step 75,
    gone again by step 150. ``keep="end"`` keeps none of these episodes; ``keep="once"`` keeps
    them and says so per episode."""
    setup_family(get_family("metaworld"), log=lambda *_: None)
    kw: dict[str, Any] = {"episodes_per_task": 2, "num_envs": 2, "max_episode_steps": 150, "seed": 100}
    with pytest.raises(RlinfError, match=r"succeeded at its end.*--keep once or all"):
        record_demos("metaworld:door-open-v3", tmp_path / "end", **kw)
    assert not (tmp_path / "end").exists() and not (tmp_path / ".end.partial").exists()
    record_demos("metaworld:door-open-v3", tmp_path / "once", keep="once", **kw)
    episodes = [
        json.loads(line) for line in (tmp_path / "once" / "meta" / "episodes.jsonl").read_text().splitlines()
    ]
    assert [(e["success"], e["success_once"]) for e in episodes] == [(False, True), (False, True)]
    table = pq.read_table(tmp_path / "once" / "data" / "chunk-000" / "episode_000000.parquet").to_pydict()
    assert any(table["next.success"]) and not table["next.success"][-1]
    assert json.loads((tmp_path / "once" / "meta" / "info.json").read_text())["rlinf"]["keep"] == "once"
    with pytest.raises(RlinfError, match="keep='best': one of end, once, all"):
        record_demos("metaworld:door-open-v3", tmp_path / "x", keep="best", **kw)


def test_behaviour_cloning_fits_the_expert_then_rl_starts_from_it(demos: Path, tmp_path: Path) -> None:
    data = load_demos(demos)
    run = {
        "algorithm": {
            "name": "ppo",
            "rollout_steps": 30,
            "minibatch_size": 60,
            "update_epochs": 1,
            "lr": 1e-9,
        },
        "env": {"family": "metaworld", "id": "reach-v3", "num_envs": 2, "max_episode_steps": 60},
        "model": {
            "hidden_sizes": [32, 32],
            "bc": {"demos": str(demos), "epochs": 300, "batch_size": 64, "log_std": -2.0},
        },
        "runner": {
            "scheduler": "local",
            "total_steps": 60,
            "log_interval": 60,
            "loggers": ["csv"],
            "seed": 1,
        },
    }
    summary = rlinf_algos.train(run, tmp_path / "run")
    assert summary["warm_start"]["steps"] == len(data["action"])
    warm = read_state(tmp_path / "run" / "warm_start.safetensors")
    assert warm["env_family"] == "metaworld"
    policy = rlinf_algos.load_policy(tmp_path / "run" / "warm_start.safetensors")
    fresh = rlinf_algos.load_policy(tmp_path / "run")  # after one (near-zero lr) PPO iteration
    target = np.clip(data["action"], -1, 1)
    constant = np.sum((target - target.mean(0)) ** 2, -1).mean()  # the best state-blind policy's loss
    assert summary["warm_start"]["train_loss"] < 0.1 * constant, (summary["warm_start"], constant)
    # the saved warm start is the fitted policy: it reproduces the demonstrations it was fitted on
    # (a tenth of the episodes, here one, is held out; four episodes are too few to generalise)
    errors = [
        np.sum(
            (policy.act(data["state"][data["episode_index"] == e]) - target[data["episode_index"] == e]) ** 2,
            -1,
        ).mean()
        for e in np.unique(data["episode_index"])
    ]
    assert sum(err < 0.1 * constant for err in errors) >= len(errors) - 1, (errors, constant)
    assert torch.allclose(fresh.module.actor_log_std, torch.full((4,), -2.0), atol=1e-3)


def test_until_solved_keeps_each_episode_up_to_its_first_solved_step() -> None:
    episodes = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2])
    success = np.array([0, 1, 0, 1, 0, 0, 0, 1, 1], bool)  # 0 solves then overshoots; 1 never
    assert until_solved(episodes, success).tolist() == [1, 1, 0, 0, 1, 1, 1, 1, 0]
    data = {
        "state": np.arange(9, dtype=np.float32)[:, None],
        "action": np.zeros((9, 1), np.float32),
        "episode_index": episodes,
        "task": list("aaaabbbcc"),
        "success": success,
    }
    kept = steps_until_solved(data, "DEMOS", "model.bc.steps")
    assert kept["state"][:, 0].tolist() == [0, 1, 4, 5, 6, 7] and kept["task"] == list("aabbbc")
    with pytest.raises(ConfigError) as err:  # a data set without next.success: one line naming the key
        steps_until_solved({**data, "success": None}, "DEMOS", "model.bc.steps")
    assert err.value.problems[0].path == "model.bc.steps" and "next.success" in str(err.value)


def test_the_clone_fits_only_the_steps_up_to_the_solve_when_told(demos: Path, tmp_path: Path) -> None:
    """``model.bc.steps: until_solved``: reach-v3's expert holds the goal for many steps after it
    first reaches it; the clone is fitted on each episode's steps up to that one only."""
    data = load_demos(demos)
    up_to = until_solved(data["episode_index"], data["success"])
    assert 0 < up_to.sum() < len(up_to)
    run = {
        "algorithm": {"name": "ppo", "rollout_steps": 30, "minibatch_size": 60, "update_epochs": 1},
        "env": {"family": "metaworld", "id": "reach-v3", "num_envs": 2, "max_episode_steps": 60},
        "model": {"hidden_sizes": [16], "bc": {"demos": str(demos), "epochs": 2, "steps": "until_solved"}},
        "runner": {"scheduler": "local", "total_steps": 60, "log_interval": 60, "loggers": ["csv"]},
    }
    summary = rlinf_algos.train(run, tmp_path / "run")
    assert summary["warm_start"]["steps"] == int(up_to.sum())


def test_demonstrations_of_another_env_are_refused_naming_both_sizes(demos: Path, tmp_path: Path) -> None:
    run: dict[str, Any] = {
        "algorithm": {"name": "ppo", "rollout_steps": 8, "minibatch_size": 16, "update_epochs": 1},
        "env": {"id": "Pendulum-v1", "num_envs": 2},
        "model": {"bc": {"demos": str(demos)}},
        "runner": {"scheduler": "local", "total_steps": 16, "log_interval": 16, "loggers": ["csv"]},
    }
    with pytest.raises(ConfigError) as err:
        rlinf_algos.train(run, tmp_path / "run")
    assert "holds states of 39 and actions of 4 values; this run's env has 3 and 1" in str(err.value)
    with pytest.raises(ConfigError, match="no demonstration data set"):
        load_demos(tmp_path)


def _bc_run(demos: Path, obs_norm: str | None) -> dict[str, Any]:
    bc: dict[str, Any] = {"demos": str(demos), "epochs": 5, "batch_size": 64}
    if obs_norm is not None:
        bc["obs_norm"] = obs_norm
    return {
        "algorithm": {"name": "ppo", "rollout_steps": 30, "minibatch_size": 30, "update_epochs": 2},
        "env": {"family": "metaworld", "id": "reach-v3", "num_envs": 2, "max_episode_steps": 60},
        "model": {"hidden_sizes": [16, 16], "bc": bc},
        "runner": {
            "scheduler": "local",
            "total_steps": 120,
            "log_interval": 60,
            "loggers": ["csv"],
            "seed": 2,
        },
    }


def _obs_stats(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    norm = rlinf_algos.load_policy(path).module.obs_norm
    return norm.mean.clone(), norm.var.clone()


def test_rl_keeps_the_warm_starts_observation_statistics_unless_told(demos: Path, tmp_path: Path) -> None:
    """A behaviour-cloning warm start's observation statistics are frozen through RL by default
    (``model.bc.obs_norm: frozen``), and a feature constant in the demonstrations is normalised
    with unit variance around its demo value, so a later deviation of 0.05 stays 0.05 rather than
    the clip value 10. Before this (a5304a6) PPO folded its rollouts into the statistics the clone
    was fitted under (MT10: two features moved by 833 and 6 demo standard deviations) and a
    feature of demo variance 0 normalised any deviation to +-10."""
    states = load_demos(demos)["state"]
    constant = np.flatnonzero(states.var(0) == 0)
    assert len(constant) > 0  # MetaWorld's empty second-object slot

    rlinf_algos.train(_bc_run(demos, None), tmp_path / "frozen")
    warm_mean, warm_var = _obs_stats(tmp_path / "frozen" / "warm_start.safetensors")
    mean, var = _obs_stats(tmp_path / "frozen")  # after two PPO iterations
    assert torch.equal(mean, warm_mean) and torch.equal(var, warm_var)
    assert torch.all(var[constant] == 1.0)
    probe = torch.as_tensor(states[:1], dtype=torch.float32).clone()
    probe[0, constant] += 0.05
    policy = rlinf_algos.load_policy(tmp_path / "frozen")
    assert torch.allclose(policy.module.normalize(probe)[0, constant], torch.full((len(constant),), 0.05))

    rlinf_algos.train(_bc_run(demos, "running"), tmp_path / "running")
    r_warm_mean, _ = _obs_stats(tmp_path / "running" / "warm_start.safetensors")
    r_mean, _ = _obs_stats(tmp_path / "running")
    assert torch.equal(r_warm_mean, warm_mean) and not torch.equal(r_mean, r_warm_mean)


def test_a_misspelt_obs_norm_mode_is_one_line_naming_the_choices(demos: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        rlinf_algos.train(_bc_run(demos, "freeze"), tmp_path / "run")
    assert "model.bc.obs_norm" in str(err.value) and "frozen" in str(err.value)

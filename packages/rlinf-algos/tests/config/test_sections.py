"""Configuration errors, registration, and the plugin staying light."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlinf_algos.config import load_sections
from rlinf_algos.grpo import GRPO, GRPOConfig
from rlinf_algos.ppo import PPO, PPOConfig
from rlinf_algos.sac import SAC, SACConfig
from rlinf_core.config import validate_model
from rlinf_core.errors import ConfigError, RlinfError
from rlinf_core.plugins import load_plugins


def problems(err: pytest.ExceptionInfo[ConfigError]) -> dict[str, str]:
    return {p.path: p.message for p in err.value.problems}


def test_ppo_config_errors_name_their_paths() -> None:
    with pytest.raises(ConfigError) as err:
        validate_model(
            PPOConfig, {"gamma": 1.5, "clip_low": 1.0, "dual_clip": 0.5, "lr": "fast", "clp": 1}, "algorithm"
        )
    got = problems(err)
    assert set(got) == {
        "algorithm.gamma",
        "algorithm.clip_low",
        "algorithm.dual_clip",
        "algorithm.lr",
        "algorithm.clp",
    }
    assert "less than or equal to 1" in got["algorithm.gamma"] and "(got 1.5)" in got["algorithm.gamma"]
    assert "greater than 1" in got["algorithm.dual_clip"]
    assert "unknown key" in got["algorithm.clp"]


def test_sac_and_grpo_config_errors() -> None:
    with pytest.raises(ConfigError) as err:
        validate_model(SACConfig, {"tau": 0, "updates_per_step": -1, "name": "ppo"}, "algorithm")
    assert set(problems(err)) == {"algorithm.tau", "algorithm.updates_per_step", "algorithm.name"}
    with pytest.raises(ConfigError) as err:
        validate_model(SACConfig, {"update_order": "pipelined", "actor_update_interval": 2}, "algorithm")
    assert "needs actor_update_interval: 1 (got 2)" in problems(err)["algorithm"]
    with pytest.raises(ConfigError) as err:
        validate_model(GRPOConfig, {"group_size": 1, "aggregation": "sum"}, "algorithm")
    got = problems(err)
    assert "greater than or equal to 2" in got["algorithm.group_size"]
    assert "'token-mean'" in got["algorithm.aggregation"]
    assert PPOConfig().clip_high == 0.2 and SACConfig().tau == 0.005


def test_run_sections_are_validated_together() -> None:
    with pytest.raises(ConfigError) as err:
        load_sections({"env": {"id": "", "num_envs": 0}, "model": {"hidden_sizes": [64, 0]}, "runner": {}})
    got = problems(err)
    assert set(got) == {"env.id", "env.num_envs", "model", "runner.total_steps"}
    assert "positive layer widths" in got["model"]
    with pytest.raises(ConfigError, match=r"^env: missing section"):
        load_sections({"runner": {"total_steps": 10}})
    env, model, runner = load_sections({"env": {"id": "HalfCheetah-v5"}, "runner": {"total_steps": 10}})
    assert env.num_envs == 8 and model.hidden_sizes is None and runner.torch_threads == 1


def test_registered_through_the_plugin_manager() -> None:
    host = load_plugins()
    assert not [f for f in host.failures if f.distribution == "rlinf-algos"]
    assert host.algorithms.get("ppo") is PPO
    assert host.algorithms.get("SAC") is SAC
    assert host.algorithms.get("grpo") is GRPO
    assert PPO.config_model is PPOConfig and "actor" in PPO.components


def test_plugin_and_algorithms_import_without_heavy_modules() -> None:
    code = (
        "import sys, rlinf_algos, rlinf_algos.plugin, rlinf_algos.ppo, rlinf_algos.sac, rlinf_algos.grpo;"
        "rlinf_algos.plugin.rlinf_register_algorithms();"
        "heavy = [m for m in ('torch', 'gymnasium', 'mujoco', 'ray') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_run_with_something_that_is_not_a_scheduler_is_explained() -> None:
    sections = {"env": {"id": "x"}, "runner": {"total_steps": 1}}
    for algo in (PPO(PPOConfig()), GRPO(GRPOConfig())):
        with pytest.raises(RlinfError, match=r"needs a started rlinf_core\.Scheduler"):
            algo.run(object(), sections, "/nonexistent")


def test_grpo_needs_matching_env_count(tmp_path) -> None:
    algo = GRPO(GRPOConfig(group_size=4, num_groups=2))
    with pytest.raises(ConfigError, match=r"^env.num_envs: .* = 8, got 3"):
        algo.run(
            None,
            {"env": {"id": "InvertedPendulum-v5", "num_envs": 3}, "runner": {"total_steps": 10}},
            tmp_path,
        )


def test_env_kwargs_of_the_wrong_type_are_found_before_anything_starts(tmp_path) -> None:
    # InvertedPendulum takes reset_noise_scale as a float and only uses it on reset: a string
    # used to pass --dry-run and fail inside the env worker with a remote traceback.
    from pathlib import Path

    from rlinf_algos.config.prepare import dry_run

    example = Path(__file__).resolve().parents[4] / "examples" / "quickstart.yaml"
    with pytest.raises(ConfigError) as info:
        dry_run(str(example), overrides=["env.kwargs={reset_noise_scale: abc}"])
    (problem,) = info.value.problems
    assert problem.path == "env.kwargs" and "reset_noise_scale" in problem.message
    assert "TypeError" in problem.message
    dry_run(str(example), overrides=["env.kwargs={reset_noise_scale: 0.02}"])  # a float is fine

"""Seed 003's worker-pool configs: expanded into rlinf's sections (``rlinf train --dry-run``),
validated with errors that name the seed key, ``python -m rlinf.train`` / ``python -m rlinf.bench``,
and (slow) the CPU-sized variant trained and benchmarked on an embedded Ray."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinf_algos.bench import render_throughput
from rlinf_algos.config.prepare import dry_run
from rlinf_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[4]
SEED = ROOT / "examples" / "seed003"

# the seed form maps embodied_vla on mujoco/franka to rlinf/FrankaReach-v0, which rlinf-hw-franka
# registers: these run in the workspace, and are skipped where rlinf-algos is installed alone
needs_franka = pytest.mark.skipif(
    importlib.util.find_spec("rlinf_hw_franka") is None,
    reason="needs rlinf-hw-franka (registers the Franka envs)",
)


def seed(name: str) -> dict[str, Any]:
    return yaml.safe_load((SEED / f"{name}.yaml").read_text())


def problems(data: dict[str, Any], host: Any, *overrides: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        dry_run(data, overrides=overrides, host=host)
    return {p.path: p.message for p in err.value.problems}


@needs_franka
def test_8gpu_expands_into_ordinary_sections(host: Any) -> None:
    out = dry_run(seed("ppo_vla_8gpu"), host=host)
    config = out["config"]
    assert config["algorithm"]["name"] == "ppo"
    assert config["cluster"]["component_placement"]["rollout"] == {"node_group": "head", "placement": "4-7"}
    assert config["env"]["id"] == "rlinf/FrankaReach-v0" and config["env"]["num_envs"] == 4 * 8
    assert config["actor"]["micro_batch_size"] == 64 // (4 * 4)  # minibatch / (4 trainer GPUs x 4 steps)
    assert config["runner"]["checkpoint_interval"] == 100 * 256 * 32  # 100 updates of 256 x 32 env steps
    # the trainer and rollout GPUs compute (before, ppo's learner was CPU-only and held them idle)
    assert config["runner"]["device"] == "auto"
    assert out["devices"]["actor"] == [f"cuda:{g}@node 0" for g in range(4)]
    assert out["devices"]["rollout"] == [f"cuda:{g}@node 0" for g in range(4, 8)]
    assert out["devices"]["env"] == ["cpu"] * 4
    assert out["inventory_implied"] and out["plan"]["rollout"].world_size == 4


@needs_franka
def test_256gpu_falls_back_from_tensor_parallel_to_fsdp(host: Any) -> None:
    out = dry_run(seed("ppo_vla_256gpu"), host=host)
    assert out["config"]["actor"]["strategy"] == "fsdp"
    assert any("no tensor-parallel backend" in note for note in out["expansion"].notes)
    # minibatch_size grows to a multiple of 8 trainer processes x 32 micro-batches (stated)
    assert out["config"]["algorithm"]["minibatch_size"] == 256
    assert out["plan"]["rollout"].world_size == 248 and out["plan"]["env"].world_size == 64


@needs_franka
def test_overrides_apply_to_the_seed_keys(host: Any) -> None:
    out = dry_run(seed("ppo_vla_32gpu"), overrides=["rollout_worker.num_workers=12"], host=host)
    assert out["config"]["cluster"]["component_placement"]["rollout"]["placement"] == "0-11"
    assert out["config"]["env"]["num_envs"] == 12 * 8


def test_mistyped_seed_keys_name_themselves(host: Any) -> None:
    data = seed("ppo_vla_8gpu")
    data["rolout_worker"] = data.pop("rollout_worker")
    data["trainer"]["gradient_acumulation_steps"] = data["trainer"].pop("gradient_accumulation_steps")
    found = problems(data, host)
    assert "did you mean 'rollout_worker'?" in found["rolout_worker"]
    assert "did you mean 'gradient_accumulation_steps'?" in found["trainer.gradient_acumulation_steps"]


def test_what_the_form_cannot_express_is_an_error_naming_its_key(host: Any) -> None:
    data = seed("ppo_vla_8gpu")
    data.update(
        task="embodied_vla",
        model={"base_path": "/data/models/openvla-7b", "lora": {"enabled": True, "rank": 32}},
        env={"sim": "genesis", "scene": "franka_pick_place.yaml"},
        reward_fn="my_verifier",
    )
    found = problems(data, host)
    assert "cannot load a VLA checkpoint" in found["model.base_path"]
    assert "LoRA adapts a loaded base model" in found["model.lora.enabled"]
    assert "genesis" in found["env.sim"] and "env.sim: mujoco" in found["env.sim"]
    assert "custom reward function is not supported" in found["reward_fn"]
    found = problems(seed("ppo_vla_8gpu"), host, "task=agentic", "env.scene=pick_place", "trainer.num_gpus=9")
    assert "unknown task" in found["task"]
    assert "reach" in found["env.scene"]
    found = problems(seed("ppo_vla_256gpu"), host, "actor.strategy=ddp")
    assert "contradicts actor.strategy: ddp" in found["trainer.tensor_parallel_size"]


def test_problems_of_the_expanded_sections_name_the_seed_key(host: Any) -> None:
    found = problems(seed("ppo_vla_8gpu"), host, "algorithm=nope", "rollout_worker.num_envs_per_worker=0")
    assert "unknown algorithm 'nope'" in found["algorithm"]
    assert "rollout_worker.num_envs_per_worker" in found


def test_sac_learner_is_one_process(host: Any) -> None:
    found = problems(seed("ppo_vla_8gpu"), host, "algorithm=sac")
    assert "runs as one process" in found["trainer.num_gpus"]


@needs_franka
def test_train_dry_run_shows_the_cluster_section_then_the_plan(host: Any, invoke: Any) -> None:
    res = invoke(
        host,
        "train",
        str(SEED / "ppo_vla_32gpu.yaml"),
        "--dry-run",
        "--inventory",
        str(SEED / "inventory_4node.yaml"),
    )
    assert res.exit_code == 0, res.output
    out = res.output
    assert out.index("# the cluster section it became") < out.index("# resolved configuration")
    assert out.index("# resolved configuration") < out.index("# placement plan")
    assert "rollout: 24 processes on nodes 1-3" in out


def test_train_dry_run_of_a_mistyped_key_names_it(host: Any, invoke: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (SEED / "ppo_vla_8gpu.yaml")
        .read_text()
        .replace("num_workers: 4\n  num_gpus", "num_worker: 4\n  num_gpus")
    )
    res = invoke(host, "train", str(bad), "--dry-run")
    assert isinstance(res.exception, ConfigError)  # the console script prints it and exits 2
    assert "rollout_worker.num_worker: unknown key (did you mean 'num_workers'?" in str(res.exception)


@needs_franka
def test_cpu_variant_validates(host: Any) -> None:
    out = dry_run(seed("ppo_reach_cpu"), host=host)
    assert out["config"]["runner"]["device"] == "cpu"
    assert out["config"]["runner"]["checkpoint_interval"] == 10 * 100 * 8
    assert [out["plan"][c].world_size for c in ("actor", "rollout", "env")] == [1, 1, 1]


def test_render_throughput_table() -> None:
    run = {
        "num_envs": 8,
        "env_steps_per_s": 400.0,
        "speedup": 1.0,
        "scaling_efficiency": 1.0,
        "time_per_update_s": {"rollout_s": 1.5, "update_s": 0.5, "publish_s": 0.01},
    }
    result = {
        "baseline_workers": 1,
        "iterations": 4,
        "cluster": "embedded Ray (this machine)",
        "runs": [
            {**run, "workers": 1},
            {**run, "workers": 2, "env_steps_per_s": 600.0, "speedup": 1.5, "scaling_efficiency": 0.75},
        ],
    }
    text = render_throughput(result)
    assert "env+rollout s" in text and "weight sync s" in text and "75%" in text


def python_m(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ},
        cwd=ROOT,
    )


def test_python_m_rlinf_forwards_to_the_cli() -> None:
    res = python_m("rlinf.train", "--help")
    assert res.returncode == 0 and "Train with the run configuration" in res.stdout, res.stderr
    res = python_m("rlinf.bench", "throughput", "--help")
    assert res.returncode == 0 and "--workers" in res.stdout, res.stderr
    res = python_m("rlinf.train", str(SEED / "ppo_vla_8gpu.yaml"), "--dry-run", "env.sim=genesis")
    assert res.returncode == 2 and "env.sim: genesis" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
@pytest.mark.network
def test_cpu_variant_trains_through_python_m_rlinf_train(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    res = python_m(
        "rlinf.train", str(SEED / "ppo_reach_cpu.yaml"), "runner.total_steps=4000", "--run-dir", str(run_dir),
        "--quiet", timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] >= 4000
    assert (run_dir / "policy.safetensors").exists() and (run_dir / "checkpoints").is_dir()
    assert "expanded the worker-pool form" in res.stderr
    written = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert written["env"]["id"] == "rlinf/FrankaReach-v0"  # the run records the expanded config


@pytest.mark.slow
@pytest.mark.extended  # two placed runs: 190 s on CI's 2 cores
@pytest.mark.network
def test_bench_throughput_of_the_cpu_variant(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    res = python_m(
        "rlinf.bench", "throughput", str(SEED / "ppo_reach_cpu.yaml"), "--workers", "1,2", "--iterations", "2",
        "--out", str(out), timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "efficiency" in res.stdout
    result = json.loads(out.read_text())
    assert [r["workers"] for r in result["runs"]] == [1, 2]
    assert [r["num_envs"] for r in result["runs"]] == [8, 16]
    for run in result["runs"]:
        assert run["env_steps_per_s"] > 0
        assert {"rollout_s", "update_s", "publish_s"} <= set(run["time_per_update_s"])
    assert result["runs"][0]["scaling_efficiency"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "override",
    [
        "rollout_worker=[1,2]",
        "rollout_worker.num_workers=abc",
        "rollout_worker.num_workers=true",
        "trainer.num_gpus=-1",
        "ray_cluster.num_nodes=0",
        "reward_worker.num_workers=1e400",
        "algorithm=[ppo]",
        "algorithm={name: [1]}",
        "task=[embodied_vla]",
        "env=3",
        "env.kwargs=7",
        "model.lora=[]",
        "checkpoint_interval=-3",
        "checkpoint_interval=true",
        "reward_fn={a: 1}",
        "rollout.pipeline_stages=x",
        "actor.strategy=[1]",
        "cluster={num_nodes: 1}",
    ],
)
def test_hostile_seed_values_are_config_errors(host: Any, override: str) -> None:
    with pytest.raises(ConfigError):
        dry_run(seed("ppo_vla_8gpu"), overrides=[override], host=host)


def test_bare_algorithm_name_beside_a_cluster_section_is_accepted(host: Any) -> None:
    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    data["algorithm"] = "ppo"
    out = dry_run(data, host=host)
    assert out["expansion"] is None and out["config"]["algorithm"]["name"] == "ppo"

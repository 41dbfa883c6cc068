"""End to end across rlinf-algos and rlinf-hw-franka: ``examples/franka_hybrid.yaml``, PPO over a
hybrid action space (a continuous arm and a discrete gripper) on ``rlinf/FrankaInstructGrasp-v0``
(the MuJoCo twin: close the gripper on the cube the instruction names). The dry run, a seconds-long
smoke run in one process, and the learning check: the example as committed, then ``rlinf eval``
on 50 unseen episodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("mujoco")
pytest.importorskip("rlinf_hw_franka")

from rlinf_algos import train
from rlinf_algos.evaluate import evaluate_policy, load_policy

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "franka_hybrid.yaml"
# CI checks seed 0; RLINF_FRANKA_HYBRID_SEEDS=0,1,2 checks the three seeds the results record
# (benchmarks/results/franka_hybrid_success.json).
SEEDS = [int(s) for s in os.environ.get("RLINF_FRANKA_HYBRID_SEEDS", "0").split(",") if s.strip()]


def rlinf(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("rlinf", path=str(Path(sys.executable).parent)) or shutil.which("rlinf")
    if exe is None:
        pytest.skip("the rlinf console script is not installed (uv sync --all-packages)")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # embedded Ray, as on a laptop
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def test_dry_run_accepts_the_example() -> None:
    cfg = yaml.safe_load(EXAMPLE.read_text())
    assert cfg["env"]["id"] == "rlinf/FrankaInstructGrasp-v0" and cfg["algorithm"]["name"] == "ppo"
    proc = rlinf("train", str(EXAMPLE), "--dry-run", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dry run: nothing was started" in proc.stdout


def test_smoke_run_in_one_process_then_eval(tmp_path: Path) -> None:
    """A few hundred steps of the example in one process (seconds): the hybrid space reaches the
    policy, the success flag the summary, and ``rlinf eval`` rebuilds the env from the run."""
    run_dir = tmp_path / "run"
    summary = train(
        EXAMPLE,
        run_dir=run_dir,
        overrides=[
            "runner.scheduler=local",
            "runner.total_steps=200",
            "runner.checkpoint_interval=0",
            "env.num_envs=2",
            "algorithm.rollout_steps=50",
            "algorithm.minibatch_size=50",
            "algorithm.update_epochs=1",
        ],
    )
    assert summary["env_id"] == "rlinf/FrankaInstructGrasp-v0" and summary["total_env_steps"] == 200
    assert summary["episodes"] == 4 and 0.0 <= summary["success_rate"] <= 1.0
    _, record = load_policy(run_dir)
    assert record["spec"]["action_space"] == {
        "kind": "dict",
        "parts": [
            {"key": "arm", "space": {"kind": "box", "dims": 3}},
            {"key": "gripper", "space": {"kind": "discrete", "n": 2, "start": 0}},
        ],
    }
    result = evaluate_policy(run_dir, episodes=2, seed=100_000, num_envs=2)
    assert result["episodes"] == 2 and result["length"]["mean"] == 50
    assert 0.0 <= result["success_at_end"] <= result["success_once"] <= 1.0


@pytest.mark.slow
@pytest.mark.learning(seconds=477)
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", SEEDS)
def test_example_grasps_the_named_cube(seed: int, tmp_path: Path) -> None:
    """The example as committed (its Ray workers, its budget) on ``seed``, then ``rlinf eval`` on
    50 unseen episodes (seeds 100000...): the gripper holds the named cube at the last step of at
    least 80% of them (deterministic actions). A few minutes on the 2-core machine; the three
    seeds' figures are in benchmarks/results/franka_hybrid_success.json."""
    run_dir = tmp_path / "run"
    proc = rlinf(
        "train", str(EXAMPLE), f"runner.seed={seed}", "--run-dir", str(run_dir), "--quiet", timeout=1500
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = rlinf("eval", str(run_dir), "--episodes", "50", "--seed", "100000", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["episodes"] == 50
    assert result["success_at_end"] >= 0.8, result["per_instruction"]

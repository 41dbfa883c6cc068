"""End to end across rlinf-algos and rlinf-hw-franka: ``examples/vla_franka_reach.yaml`` (PPO on
camera images, proprioception and a language instruction, ``rlinf/FrankaInstructReach-v0`` on the
MuJoCo twin) trained for one tiny iteration through the CLI, then ``rlinf eval`` with its success
rates per instruction and one video per episode. Real rendering (``MUJOCO_GL=egl``), no fakes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "vla_franka_reach.yaml"


def rlinf(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("rlinf", path=str(Path(sys.executable).parent)) or shutil.which("rlinf")
    if exe is None:
        pytest.skip("the rlinf console script is not installed (uv sync --all-packages)")
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "MUJOCO_GL": "egl"}
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def test_example_trains_on_images_and_words() -> None:
    cfg = yaml.safe_load(EXAMPLE.read_text())
    assert cfg["env"]["id"] == "rlinf/FrankaInstructReach-v0" and cfg["model"]["type"] == "vla"
    assert cfg["algorithm"]["name"] == "ppo"


@pytest.mark.slow
def test_vla_example_smoke_then_eval_with_videos(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = rlinf(
        "train",
        str(EXAMPLE),
        "runner.scheduler=local",
        "runner.total_steps=100",
        "env.num_envs=2",
        "algorithm.rollout_steps=50",
        "algorithm.minibatch_size=50",
        "algorithm.update_epochs=1",
        "model.warm_start.frames=48",  # the perception warm start, tiny: 4 scenes, one pass
        "model.warm_start.epochs=1",
        "--run-dir",
        str(run_dir),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_id"] == "rlinf/FrankaInstructReach-v0" and summary["total_env_steps"] == 100
    assert 0.0 <= summary["success_rate"] <= 1.0
    assert summary["parameters"]["trainable"] == summary["parameters"]["total"] > 0
    proc = rlinf(
        "eval", str(run_dir), "--episodes", "3", "--seed", "500", "--json", "--video", str(tmp_path / "v")
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    assert res["episodes"] == 3 and 0.0 <= res["success_at_end"] <= res["success_once"] <= 1.0
    assert all(e["instruction"].startswith("reach the ") for e in res["per_episode"])
    assert sum(r["episodes"] for r in res["per_instruction"].values()) == 3
    videos = sorted(p.name for p in (tmp_path / "v").iterdir())
    assert len(videos) == 3 and all("_reach-the-" in v for v in videos)
    again = json.loads(rlinf("eval", str(run_dir), "--episodes", "3", "--seed", "500", "--json").stdout)
    for ep in again["per_episode"]:
        ep.pop("video", None)
    for ep in res["per_episode"]:
        ep.pop("video", None)
    assert again == res


@pytest.mark.learning
@pytest.mark.skipif(
    not os.environ.get("RLINF_PIXEL_LEARNING"),
    reason="2-3 minutes of pixel PPO: set RLINF_PIXEL_LEARNING=1 (kept out of CI's 45-minute budget)",
)
def test_vla_example_learns_to_approach_the_cubes(tmp_path: Path) -> None:
    """The short learning check of the pixel pipeline (PPO, the vla model, the embedded Ray):
    16,000 env steps of the example without its perception warm start and loss, on the table
    camera alone (about 2 minutes on an idle 2-core machine). The first
    3,200 steps return about -23 (the hand hovers about 0.46 m from the named cube on average);
    three seed-0 runs were at -16.0, -16.3 and -16.6 at 16,000 steps
    (benchmarks/results/vla_franka_reach_curve.json). The final return averages the last 100
    episodes (from about 11,000 steps on), so -20.5 asks for learning with a margin;
    the success goal takes far longer."""
    run_dir = tmp_path / "run"
    proc = rlinf(
        "train",
        str(EXAMPLE),
        "runner.total_steps=16000",
        "runner.seed=0",
        "model.warm_start=null",
        "model.predict_privileged=0",
        "env.kwargs={}",
        "--run-dir",
        str(run_dir),
        "--quiet",
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] >= 16000
    assert summary["final_return_mean"] > -20.5, summary


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(3600)
@pytest.mark.skipif(
    not os.environ.get("RLINF_PIXEL_LEARNING"),
    reason="about 15 minutes (the whole example, its perception warm start included): set "
    "RLINF_PIXEL_LEARNING=1 (kept out of CI's 45-minute budget)",
)
def test_vla_example_reaches_the_success_goal(tmp_path: Path) -> None:
    """The example as committed, on its default scheduler, then ``rlinf eval`` on 50 episodes
    whose reset seeds training never used: ``success_at_end`` at least 0.8 (issue #21's goal).
    Seeds 0-2 measured 1.0 each in 834-863 s (benchmarks/results/vla_franka_reach_success.json);
    through this test (seed 0, 2026-11-27): 1.0, in 1034 s with the evaluation."""
    run_dir = tmp_path / "run"
    proc = rlinf("train", str(EXAMPLE), "runner.seed=0", "--run-dir", str(run_dir), "--quiet", timeout=3000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] >= 100000 and not summary["interrupted"], summary
    proc = rlinf("eval", str(run_dir), "--episodes", "50", "--seed", "100000", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    rates = {k: res[k] for k in ("episodes", "success_at_end", "success_once")}
    assert res["episodes"] == 50 and res["success_at_end"] >= 0.8, rates

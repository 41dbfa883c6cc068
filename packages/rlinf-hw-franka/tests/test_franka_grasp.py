"""rlinf/FrankaInstructGrasp-v0 on the MuJoCo twin: the hybrid action space, solid cubes, and what
counts as closing the gripper on the named cube (and what does not)."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

from gymnasium import spaces  # noqa: E402

from rlinf_core.envs import register_with_gymnasium  # noqa: E402
from rlinf_core.errors import ConfigError  # noqa: E402
from rlinf_hw_franka.envs import env_specs  # noqa: E402
from rlinf_hw_franka.grasp import CLOSE, OPEN, FrankaInstructGraspEnv  # noqa: E402

ENV_ID = "rlinf/FrankaInstructGrasp-v0"
SEEDS = [0, 1, 2, 3, 4]


@pytest.fixture
def env():
    e = FrankaInstructGraspEnv(obs_mode="flat")
    yield e
    e.close()


def run(env: FrankaInstructGraspEnv, policy, steps: int = 30):
    """``steps`` steps of ``policy(env)``; the last step's ``(obs, reward, info)``."""
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(policy(env))
        assert not terminated and not truncated
    return obs, reward, info


def to(point, gripper: int):
    """A scripted policy: straight towards ``point(env)`` (m), the gripper as given."""

    def policy(env: FrankaInstructGraspEnv):
        arm = np.clip((point(env) - env._state.ee_pos) / env.max_delta_pos, -1, 1).astype(np.float32)
        return {"arm": arm, "gripper": gripper}

    return policy


@pytest.mark.filterwarnings("ignore:.*Box observation space m:UserWarning")  # the contract: -inf..inf
def test_registered_spaces_and_the_gymnasium_checker() -> None:
    from gymnasium.utils.env_checker import check_env

    register_with_gymnasium(env_specs())
    env = gym.make(ENV_ID, obs_mode="flat")
    try:
        assert env.spec.max_episode_steps == 50
        inner = env.unwrapped
        assert isinstance(inner, FrankaInstructGraspEnv) and inner.control_hz == 10
        space = env.action_space
        assert isinstance(space, spaces.Dict) and list(space) == ["arm", "gripper"]
        assert space["arm"] == spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        assert space["gripper"] == spaces.Discrete(2)
        # joints 7 + 7, EE position 3 and quaternion 4, gripper opening 1, grasp point 3, offset 3
        assert env.observation_space.shape == (28,)
        check_env(inner, skip_render_check=True)
    finally:
        env.close()


def test_vla_observations_hold_the_instruction_and_the_gripper() -> None:
    env = FrankaInstructGraspEnv(image_size=(32, 32), privileged=True)
    try:
        assert set(env.observation_space) == {"image", "state", "instruction", "privileged"}
        assert env.observation_space["state"].shape == (22,)  # the reach task's 21 + opening
        obs, info = env.reset(seed=3)
        assert env.observation_space.contains(obs)
        assert obs["instruction"] == f"grasp the {info['target_color']} cube"
        assert obs["state"][-1] == pytest.approx(0.08, abs=1e-3)  # open: 2 x 4 cm
        np.testing.assert_allclose(obs["privileged"][:3], env.target, atol=1e-6)
    finally:
        env.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_the_scripted_grasp_succeeds_and_holds(env, seed) -> None:
    """Over the named cube, down, close: success, and it holds to the end of the episode."""
    obs, info = env.reset(seed=seed)
    assert not info["success"] and info["grasped"] == ""
    first = None
    for t in range(50):
        obs, reward, _, _, info = env.step(env.expert_action())
        if info["success"] and first is None:
            first = t
        if first is not None:
            assert info["success"], t  # never lets go
    assert first is not None and first < 25, first
    assert info["grasped"] == info["target_color"] == env.target_color
    # the bonus on a holding step, less the (small) distance to the grasp point
    assert reward == pytest.approx(1.0 - info["distance"]) and info["distance"] < 0.01
    # the fingers are held apart by the 5 cm cube (their pads sink about 2 mm into it)
    assert 0.04 < obs[21] < 0.05


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_closing_on_another_cube_is_no_success(env, seed) -> None:
    env.reset(seed=seed)
    other = (env.target_index + 1) % env.num_targets
    _, reward, info = run(env, lambda e: e.grasp_action(other))
    assert info["grasped"] == env.cube_colors[other] != info["target_color"]
    assert not info["success"] and not info["is_success"]
    assert reward == pytest.approx(-info["distance"] - 1.0)  # the wrong-cube penalty


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_an_open_gripper_around_the_named_cube_is_no_success(env, seed) -> None:
    env.reset(seed=seed)
    _, reward, info = run(env, lambda e: {**e.expert_action(), "gripper": OPEN})
    assert info["distance"] < 0.005  # the pads straddle the cube
    assert not info["success"] and info["grasped"] == ""
    assert reward == pytest.approx(-info["distance"])


@pytest.mark.parametrize("seed", SEEDS)
def test_a_closed_gripper_pressed_on_the_cube_is_no_success(env, seed) -> None:
    """Closed first, then down onto the named cube: the pads touch its top, not its sides."""
    env.reset(seed=seed)
    _, _, info = run(env, lambda e: {**e.expert_action(), "gripper": CLOSE})
    assert not info["success"] and info["grasped"] == ""


def test_one_pad_against_a_face_is_no_success(env) -> None:
    """The closed hand lowered beside the cube along the fingers' axis, then pushed into it: one
    pad presses a face across the gap between the fingers, from outside."""
    env.reset(seed=0)
    run(env, to(lambda e: e.target + np.array([0.0, 0.05, 0.0]), CLOSE), steps=25)
    _, _, info = run(env, to(lambda e: e.target + np.array([0.0, 0.03, 0.0]), CLOSE), steps=3)
    left, right = env.backend.finger_contacts()
    assert left.get(env.target_index, 0.0) > 0.9 and not right  # pressing its face, squarely
    assert not info["success"] and info["grasped"] == ""


def test_the_cubes_are_solid_and_the_target_follows_them(env) -> None:
    """The table carries the cubes; the hand pushes one; the grasp point moves with it."""
    obs, _ = env.reset(seed=1)
    start = env.cube_positions.copy()
    np.testing.assert_allclose(start[:, 2], 0.025, atol=1e-3)
    cube = env.cube_positions[env.target_index]
    # lower the closed hand beside the named cube (x - 6 cm), then sweep it through the cube
    run(env, to(lambda e: np.array([cube[0] - 0.06, cube[1], 0.035]), CLOSE), steps=25)
    obs, _, info = run(env, to(lambda e: np.array([cube[0] + 0.06, cube[1], 0.035]), CLOSE), steps=10)
    moved = env.cube_positions[env.target_index]
    assert moved[0] - start[env.target_index][0] > 0.02  # pushed along
    assert moved[2] == pytest.approx(0.025, abs=0.005)  # still on the table
    np.testing.assert_allclose(obs[22:25], [moved[0], moved[1], 0.035], atol=1e-5)  # target_pos
    assert not info["success"]


def test_same_seed_same_episode() -> None:
    def rollout():
        env = FrankaInstructGraspEnv(obs_mode="flat")
        obs, _ = env.reset(seed=7)
        out = [obs]
        rng = np.random.default_rng(0)
        for _ in range(15):
            obs, r, *_ = env.step({"arm": rng.uniform(-1, 1, 3), "gripper": int(rng.integers(2))})
            out.append(np.append(obs, r))
        env.close()
        return out

    for a, b in zip(rollout(), rollout(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("action", "match"),
    [
        (np.zeros(4, np.float32), "must be a dict with 'arm'"),
        ({"arm": np.zeros(3)}, "must be a dict with 'arm'"),
        ({"arm": np.zeros(4), "gripper": 0}, r"action\['arm'\] must have shape \(3,\)"),
        ({"arm": [np.nan, 0, 0], "gripper": 0}, "NaN or infinity"),
        ({"arm": np.zeros(3), "gripper": 2}, r"0 \(open\) or 1 \(close\), got 2"),
        ({"arm": np.zeros(3), "gripper": 0.5}, r"0 \(open\) or 1 \(close\), got 0.5"),
    ],
)
def test_bad_actions_are_named(env, action, match) -> None:
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        env.step(action)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reach_height": 0.03}, "takes no 'reach_height'"),
        ({"gripper": False}, "takes no 'gripper'"),
        ({"cube_size": 0.09}, "at most 0.07 m"),
        ({"grasp_height": 0.06}, "between the table and the cube's top"),
        ({"cube_mass": 0.0}, "cube_mass must be positive"),
        ({"wrong_cube_penalty": -1.0}, "must not be negative"),
    ],
)
def test_bad_arguments_are_named(kwargs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        FrankaInstructGraspEnv(obs_mode="flat", **kwargs)


def test_rotation_widens_the_arm_part() -> None:
    env = FrankaInstructGraspEnv(obs_mode="flat", rotation=True)
    try:
        assert env.action_space["arm"].shape == (6,)
        env.reset(seed=0)
        _, _, info = run(env, lambda e: e.expert_action())
        assert info["success"]
    finally:
        env.close()

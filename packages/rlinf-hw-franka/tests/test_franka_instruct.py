"""rlinf/FrankaInstructReach-v0 and FrankaEnv's ``obs_mode="vla"`` on the MuJoCo twin: the
observation contract, deterministic rendering, the success flag, instructions, and the error a
camera that cannot render gives."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

from gymnasium import spaces  # noqa: E402

from rlinf_core.envs import register_with_gymnasium  # noqa: E402
from rlinf_core.errors import ConfigError  # noqa: E402
from rlinf_hw_franka.env import FrankaEnv  # noqa: E402
from rlinf_hw_franka.envs import env_specs  # noqa: E402
from rlinf_hw_franka.instruct import COLORS, FrankaInstructReachEnv  # noqa: E402

ENV_ID = "rlinf/FrankaInstructReach-v0"


@pytest.fixture
def env():
    e = FrankaInstructReachEnv()
    yield e
    e.close()


def towards(env: FrankaInstructReachEnv, obs, point=None) -> np.ndarray:
    """A scripted policy that knows the target from the env's internals (``state[14:17]`` is
    the end-effector position)."""
    goal = env.target if point is None else point
    return np.clip((goal - obs["state"][14:17]) / env.max_delta_pos, -1, 1).astype(np.float32)


@pytest.mark.filterwarnings("ignore:.*Box observation space m:UserWarning")  # the contract: -inf..inf
def test_registered_and_passes_the_gymnasium_checker() -> None:
    from gymnasium.utils.env_checker import check_env

    register_with_gymnasium(env_specs())
    env = gym.make(ENV_ID)
    try:
        assert env.spec.max_episode_steps == 50
        assert isinstance(env.unwrapped, FrankaInstructReachEnv) and env.unwrapped.control_hz == 10
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_observation_contract(env) -> None:
    space = env.observation_space
    assert isinstance(space, spaces.Dict) and set(space) == {"image", "state", "instruction"}
    image, state, text = space["image"], space["state"], space["instruction"]
    assert isinstance(image, spaces.Box) and image.shape == (64, 64, 3) and image.dtype == np.uint8
    assert np.all(image.low == 0) and np.all(image.high == 255)
    assert isinstance(state, spaces.Box) and state.shape == (21,) and state.dtype == np.float32
    assert np.all(np.isinf(state.low)) and np.all(np.isinf(state.high))
    assert isinstance(text, spaces.Text) and text.max_length == 64
    assert env.action_space.shape == (3,)
    states = []
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        assert space.contains(obs) and set(obs) == {"image", "state", "instruction"}
        assert (
            isinstance(obs["instruction"], str)
            and obs["instruction"] == f"reach the {info['target_color']} cube"
        )
        assert obs["image"].flags["C_CONTIGUOUS"]
        states.append(obs["state"])
    # Nothing about the target is in the state: every episode starts from the same one.
    assert all(np.array_equal(states[0], s) for s in states[1:])
    obs, reward, terminated, truncated, info = env.step(np.zeros(3, dtype=np.float32))
    assert space.contains(obs) and isinstance(reward, float) and not terminated and not truncated
    assert set(info) >= {"success", "is_success", "distance", "target_color"}


def test_further_cameras_are_image_name_entries() -> None:
    env = FrankaInstructReachEnv(cameras=["table", "wrist"], image_size=(48, 40))
    try:
        assert set(env.observation_space) == {"image", "image_wrist", "state", "instruction"}
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        assert obs["image"].shape == obs["image_wrist"].shape == (48, 40, 3)
        assert not np.array_equal(obs["image"], obs["image_wrist"])
    finally:
        env.close()


def _colour_mask(image: np.ndarray, color: str) -> np.ndarray:
    """Pixels of a cube colour, shading aside: their chromaticity (the channels over their sum)
    within 0.1 of the colour's, and not dark."""
    rgb = np.asarray(COLORS[color][:3])
    px = image.astype(np.float64) / 255.0
    chroma = px / np.maximum(px.sum(-1, keepdims=True), 1e-6)
    return (np.abs(chroma - rgb / rgb.sum()).max(-1) < 0.1) & (px.max(-1) > 0.25)


def test_the_wrist_camera_shows_the_cube_under_the_hand() -> None:
    """Hovering at a cube's reach point, the cube fills the middle of the wrist image, whole (the
    camera looks past the fingers at the point below them), so the last centimetres of a reach
    can be read from it; from the table camera the hand hides the cube there."""
    env = FrankaInstructReachEnv(cameras=["table", "wrist"], image_size=(64, 64), privileged=True)
    try:
        for seed in (0, 1, 2):
            obs, _ = env.reset(seed=seed)
            for _ in range(30):
                obs, _, _, _, info = env.step(env.expert_action())
            assert info["success"], (seed, info["distance"])
            mask = _colour_mask(obs["image_wrist"], env.target_color)
            ys, xs = np.nonzero(mask)
            assert mask.sum() >= 64, (seed, env.target_color, int(mask.sum()))
            # whole: it touches no edge of the image; and below the middle, under the fingertips
            assert 0 < ys.min() <= ys.max() < 63 and 0 < xs.min() <= xs.max() < 63, (seed, ys, xs)
            assert abs(xs.mean() - 31.5) < 8 and 32 <= ys.mean() < 56, (seed, xs.mean(), ys.mean())
    finally:
        env.close()


def _rollout(seed: int, steps: int = 12) -> list[np.ndarray]:
    env = FrankaInstructReachEnv()
    try:
        obs, _ = env.reset(seed=seed)
        env.action_space.seed(seed)
        frames = [obs["image"]]
        for _ in range(steps):
            obs, *_ = env.step(env.action_space.sample())
            frames.append(obs["image"])
        return frames
    finally:
        env.close()


def test_rendering_is_deterministic_for_a_seed() -> None:
    a, b = _rollout(7), _rollout(7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))  # bit for bit
    assert not np.array_equal(a[0], _rollout(8, steps=0)[0])  # other cubes, other image
    assert len({f.tobytes() for f in a}) > 1  # the arm moves in the picture


def test_scripted_policy_reaches_the_named_cube(env) -> None:
    for seed in range(4):
        obs, info = env.reset(seed=seed)
        assert not info["success"] and not info["is_success"]
        rewards = []
        for _ in range(30):
            obs, reward, _, _, info = env.step(towards(env, obs))
            rewards.append(reward)
        assert info["success"] and info["is_success"], (seed, info)
        assert info["distance"] < 0.01 and rewards[-1] == pytest.approx(-info["distance"])
        assert rewards[-1] > rewards[0]
        # The reach point is above the named cube.
        cube = env.cube_positions[env.target_index]
        np.testing.assert_allclose(obs["state"][14:16], cube[:2], atol=0.01)


def test_pushing_down_stops_at_the_reach_height(env) -> None:
    # The safety box's floor is the reach points' height: a policy that presses the hand down
    # (as PPO's did, onto the old floor 4 cm below the reach point, inside the cube) stops there.
    reach_z = env.cube_size + env.reach_height
    assert env.safety_lo[2] == pytest.approx(reach_z)
    obs, _ = env.reset(seed=3)
    assert env.target[2] == pytest.approx(reach_z)
    for _ in range(30):
        a = towards(env, obs)
        a[2] = -1.0
        obs, _, _, _, info = env.step(a)
    assert obs["state"][16] == pytest.approx(reach_z, abs=0.005)
    assert info["success"] and info["distance"] < 0.01 and info["safety_clipped"]
    # An explicit safety_box still wins.
    low = FrankaInstructReachEnv(safety_box=[[0.25, -0.4, 0.05], [0.75, 0.4, 0.75]])
    try:
        assert low.safety_lo[2] == pytest.approx(0.05)
    finally:
        low.close()


def test_expert_action_is_the_scripted_reach(env) -> None:
    with pytest.raises(gym.error.ResetNeeded):
        env.expert_action()
    obs, _ = env.reset(seed=5)
    np.testing.assert_allclose(env.expert_action(), towards(env, obs), atol=1e-6)
    for _ in range(30):
        obs, _, _, _, info = env.step(env.expert_action())
    assert info["success"] and info["distance"] < 0.01
    assert env.expert_action().shape == env.action_space.shape


def test_candidate_actions_reach_every_cube(env) -> None:
    env.reset(seed=3)
    cands = env.candidate_actions()
    assert cands.shape == (env.num_targets, *env.action_space.shape)
    np.testing.assert_allclose(cands[env.target_index], env.expert_action())
    other = (env.target_index + 1) % env.num_targets
    for _ in range(30):
        env.step(env.candidate_actions()[other])
    hand = env.backend.read().ee_pos
    point = env.cube_positions[other] + [0, 0, env.cube_size / 2 + env.reach_height]
    assert np.linalg.norm(hand - point) < 0.01  # over the other cube, at the reach height


def test_reaching_another_cube_is_no_success(env) -> None:
    obs, _ = env.reset(seed=1)
    other = (env.target_index + 1) % env.num_targets
    point = env.cube_positions[other] + [0, 0, env.target[2] - env.cube_positions[other][2]]
    for _ in range(30):
        obs, _, _, _, info = env.step(towards(env, obs, point))
    assert np.linalg.norm(obs["state"][14:17] - point) < 0.01
    assert not info["success"] and info["distance"] > env.min_separation - 0.02


def test_instructions_and_cubes_vary_over_seeds(env) -> None:
    instructions, colours = set(), set()
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        instructions.add(obs["instruction"])
        colours.add(tuple(env.cube_colors))
        assert obs["instruction"] == f"reach the {env.target_color} cube"
        assert env.target_color in env.cube_colors and len(set(env.cube_colors)) == 3
        xy = env.cube_positions[:, :2]
        assert np.all(xy >= env.cube_lo) and np.all(xy <= env.cube_hi)
        gaps = [np.linalg.norm(xy[i] - xy[j]) for i in range(3) for j in range(i)]
        assert min(gaps) >= env.min_separation
    assert instructions == {f"reach the {c} cube" for c in ("red", "green", "blue", "yellow")}
    assert len(colours) > 5


def test_options() -> None:
    env = FrankaInstructReachEnv(
        num_targets=2,
        colors=["magenta", "cyan"],
        instruction_template="touch the {color} block",
        success_bonus=1.0,
    )
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        assert obs["instruction"] in {"touch the magenta block", "touch the cyan block"}
        for _ in range(30):
            obs, reward, _, _, info = env.step(towards(env, obs))
        assert info["success"] and reward == pytest.approx(1.0 - info["distance"])
    finally:
        env.close()
    flat = FrankaInstructReachEnv(obs_mode="flat")  # privileged: target_pos is the reach point
    try:
        obs, _ = flat.reset(seed=0)
        assert flat.observation_space.contains(obs)
        np.testing.assert_allclose(obs[21:24], flat.target, atol=1e-6)
    finally:
        flat.close()


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"colors": ["red", "mauve"]}, "unknown cube colour"),
        ({"colors": ["red", "red"]}, "distinct"),
        ({"num_targets": 5}, "between 1 and the number of colors"),
        ({"instruction_template": "reach it"}, "must contain"),
        ({"instruction_template": "reach the {color} cube\n"}, "outside letters"),
        ({"cube_region": [[0.5, 0.1], [0.4, 0.2]]}, "minimum above maximum"),
        ({"backend": "franky"}, "twin only"),
        ({"cameras": []}, "at least one camera"),
    ],
)
def test_bad_arguments(kwargs, fragment) -> None:
    with pytest.raises(ConfigError, match=fragment):
        FrankaInstructReachEnv(**kwargs)


def test_cubes_that_do_not_fit_are_a_config_error() -> None:
    env = FrankaInstructReachEnv(num_targets=4, cube_region=[[0.45, -0.05], [0.55, 0.05]], min_separation=0.2)
    try:
        with pytest.raises(ConfigError, match="cannot place 4 cubes"):
            env.reset(seed=0)
    finally:
        env.close()


def test_colours_are_distinct() -> None:
    rgb = np.array([c[:3] for c in COLORS.values()])
    gaps = [np.linalg.norm(rgb[i] - rgb[j]) for i in range(len(rgb)) for j in range(i)]
    assert min(gaps) > 0.5


def test_frankaenv_vla_mode_on_the_twin() -> None:
    env = FrankaEnv("mujoco", obs_mode="vla", instruction="reach the green ball", image_size=(32, 32))
    try:
        assert set(env.observation_space) == {"image", "state", "instruction"}
        assert env.observation_space["state"].shape == (22,)  # with the gripper's width
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs) and obs["instruction"] == "reach the green ball"
        obs, _ = env.reset(seed=0, options={"instruction": "reach the target, slowly"})
        assert obs["instruction"] == "reach the target, slowly"
        with pytest.raises(ConfigError, match="1 to 64 characters"):
            env.reset(options={"instruction": "x" * 65})
    finally:
        env.close()


def test_a_camera_that_cannot_render_names_mujoco_gl() -> None:
    """An OpenGL platform that does not work (here MUJOCO_GL set to a value MuJoCo rejects, as a
    machine without EGL fails) is a ConfigError that says to set MUJOCO_GL=egl."""
    code = textwrap.dedent(
        """
        from rlinf_core.errors import ConfigError
        from rlinf_hw_franka.instruct import FrankaInstructReachEnv
        try:
            FrankaInstructReachEnv().reset(seed=0)
        except ConfigError as err:
            print("CONFIGERROR", err)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "MUJOCO_GL": "no-such-platform"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "CONFIGERROR" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "MUJOCO_GL=no-such-platform" in out.stdout and "set MUJOCO_GL=egl" in out.stdout


def test_privileged_entry_holds_the_target_for_an_asymmetric_critic() -> None:
    env = FrankaInstructReachEnv(privileged=True, image_size=(32, 32))
    try:
        obs, _ = env.reset(seed=3)
        assert env.observation_space.contains(obs)
        np.testing.assert_allclose(obs["privileged"][:3], env.target, atol=1e-6)
        obs, *_ = env.step(np.array([1.0, 0.0, 0.0], np.float32))
        np.testing.assert_allclose(obs["privileged"][3:], env.target - obs["state"][14:17], atol=1e-5)
    finally:
        env.close()
    with pytest.raises(ConfigError, match="privileged"):
        FrankaInstructReachEnv(privileged=True, obs_mode="flat")

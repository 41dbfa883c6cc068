"""FrankaEnv on the MuJoCo twin: gymnasium API, reach task, safety box, rotation, gripper, cameras."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

from rlinf_core.envs import register_with_gymnasium  # noqa: E402
from rlinf_core.errors import ConfigError  # noqa: E402
from rlinf_hw_franka.env import FrankaEnv  # noqa: E402
from rlinf_hw_franka.envs import env_specs  # noqa: E402


def towards(obs, gain=1.0, extra=()) -> np.ndarray:
    a = np.clip(gain * (obs["target_pos"] - obs["ee_pos"]) / 0.05, -1, 1)
    return np.concatenate([a, extra]).astype(np.float32)


@pytest.fixture
def env():
    e = FrankaEnv("mujoco")
    yield e
    e.close()


def test_gymnasium_env_checker() -> None:
    from gymnasium.utils.env_checker import check_env

    register_with_gymnasium(env_specs())
    env = gym.make("rlinf/FrankaReach-v0")
    try:
        check_env(env.unwrapped, skip_render_check=True)
        assert env.spec.max_episode_steps == 50
    finally:
        env.close()


def test_spaces_and_reset(env) -> None:
    assert env.action_space.shape == (4,)  # dx dy dz + gripper
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert set(obs) == {"joint_pos", "joint_vel", "ee_pos", "ee_quat", "gripper_width", "target_pos"}
    np.testing.assert_allclose(obs["ee_pos"], [0.3069, 0.0, 0.4869], atol=1e-3)
    assert np.all(obs["target_pos"] >= env.target_lo) and np.all(obs["target_pos"] <= env.target_hi)
    again, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs["target_pos"], again["target_pos"])
    assert info["is_success"] is False and "overruns" not in info  # unpaced: no timing in info


def test_reach_succeeds_with_a_proportional_policy(env) -> None:
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        start = np.linalg.norm(obs["target_pos"] - obs["ee_pos"])
        rewards = []
        for _ in range(40):
            obs, reward, _terminated, _truncated, info = env.step(towards(obs, extra=[1.0]))
            rewards.append(reward)
        assert info["is_success"], info
        assert info["distance"] < 0.01 < start
        assert rewards[-1] > rewards[0]  # dense reward: -distance
        assert rewards[-1] == pytest.approx(-info["distance"])


def test_terminate_on_success() -> None:
    env = FrankaEnv("mujoco", terminate_on_success=True, gripper=False)
    obs, _ = env.reset(seed=0, options={"target": [0.35, 0.05, 0.45]})
    for _ in range(30):
        obs, _, terminated, _, info = env.step(towards(obs))
        if terminated:
            break
    assert terminated and info["is_success"]
    env.close()


def test_safety_box_clips_commands() -> None:
    box = FrankaEnv("mujoco", gripper=False, safety_box=[[0.3, -0.1, 0.3], [0.5, 0.1, 0.5]])
    for corner, push in (([0.5, 0.1, 0.5], 1.0), ([0.3, -0.1, 0.3], -1.0)):
        obs, _ = box.reset(seed=0)
        clipped = False
        for _ in range(20):  # push as hard as possible towards one corner
            obs, _, _, _, info = box.step(np.full(3, push, dtype=np.float32))
            clipped |= info["safety_clipped"]
            assert np.all(obs["ee_pos"] <= box.safety_hi + 0.01) and np.all(
                obs["ee_pos"] >= box.safety_lo - 0.01
            )
        assert clipped
        np.testing.assert_allclose(obs["ee_pos"], corner, atol=0.01)
    box.close()


def test_orientation_is_held_or_rotated() -> None:
    env = FrankaEnv("mujoco", rotation=True, gripper=False)
    assert env.action_space.shape == (6,)
    obs, _ = env.reset(seed=0)
    q0 = obs["ee_quat"].copy()
    for _ in range(5):
        obs, *_ = env.step(np.array([0, 0, 0, 0, 0, 1.0], dtype=np.float32))  # yaw 0.2 rad per step
    angle = 2 * np.arccos(min(1.0, abs(float(np.dot(q0, obs["ee_quat"])))))
    # Each step's target is the measured orientation turned by 0.2 rad; the arm lags the target
    # a little within a period, so 5 steps turn it by somewhat less than 1 rad.
    assert 0.5 < angle <= 1.05
    env.close()
    env = FrankaEnv("mujoco", gripper=False)
    obs, _ = env.reset(seed=0)
    q0 = obs["ee_quat"].copy()
    for _ in range(20):
        obs, *_ = env.step(np.array([0.5, -0.5, -0.5], dtype=np.float32))
    assert abs(float(np.dot(q0, obs["ee_quat"]))) > 0.999  # held
    env.close()


def test_gripper_action(env) -> None:
    obs, _ = env.reset(seed=0)
    assert obs["gripper_width"][0] == pytest.approx(0.08, abs=1e-3)
    for _ in range(5):
        obs, *_ = env.step(np.array([0, 0, 0, -1.0], dtype=np.float32))
    assert obs["gripper_width"][0] < 0.005
    for _ in range(5):
        obs, *_ = env.step(np.array([0, 0, 0, 0.0], dtype=np.float32))
    assert obs["gripper_width"][0] == pytest.approx(0.04, abs=0.003)


def test_flat_observations() -> None:
    env = FrankaEnv("mujoco", obs_mode="flat")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs) and obs.shape == (7 + 7 + 3 + 4 + 1 + 3 + 3,)
    np.testing.assert_allclose(obs[-3:], obs[-6:-3] - obs[14:17], atol=1e-6)
    env.close()


def test_realtime_pacing_is_optional() -> None:
    env = FrankaEnv("mujoco", control_hz=50, realtime=True, gripper=False)
    env.reset(seed=0)
    import time

    t0 = time.perf_counter()
    for _ in range(10):
        _, _, _, _, info = env.step(np.zeros(3, dtype=np.float32))
    assert time.perf_counter() - t0 >= 10 / 50 - 0.03  # paced at 50 Hz
    assert info["period_s"] > 0 and "period_error_s" in info
    env.close()
    fast = FrankaEnv("mujoco", gripper=False)  # training default: no sleeping
    assert fast.realtime is False
    fast.close()


def test_hardware_info_sets_the_rate() -> None:
    env = FrankaEnv("mujoco", hardware={"control_hz": 20.0, "robot_ip": "10.0.0.1"})
    assert env.control_hz == 20.0 and env.rate.period == pytest.approx(0.05)
    env.close()


def test_cameras_render_only_when_asked() -> None:
    env = FrankaEnv("mujoco", cameras=["front", "wrist"], image_size=(48, 64))
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    for name in ("front", "wrist"):
        img = obs["images"][name]
        assert img.shape == (48, 64, 3) and img.dtype == np.uint8 and img.std() > 1
    env.close()
    plain = FrankaEnv("mujoco")
    plain.reset(seed=0)
    assert plain.backend._renderer is None
    plain.close()


def test_rendering_then_importing_triton_does_not_crash() -> None:
    """Cameras (EGL, Mesa's LLVM on a machine without a GPU) and then torch's triton (its own
    LLVM) in one process segfaulted at the triton import; the backend now loads triton first."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (torch CPU build): nothing to clash with")
    code = (
        "from rlinf_hw_franka.env import FrankaEnv\n"
        "env = FrankaEnv('mujoco', cameras=['front'], image_size=(32, 32))\n"
        "obs, _ = env.reset(seed=0)\n"
        "assert obs['images']['front'].shape == (32, 32, 3)\n"
        "import triton\n"
        "print('survived')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "survived" in out.stdout, (out.returncode, out.stderr[-2000:])


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"backend": "isaac"}, "backends: mujoco, franky"),
        ({"task": "push"}, "implements: reach"),
        ({"safety_box": [[0, 0, 0], [1, -1, 1]]}, "below its maximum"),
        ({"cameras": ["top"]}, "unknown simulated camera"),
        ({"cameras": ["front"], "obs_mode": "flat"}, "cannot carry camera images"),
        ({"backend": "franky"}, "needs robot_ip"),
    ],
)
def test_bad_arguments(kwargs, fragment) -> None:
    with pytest.raises(ConfigError, match=fragment):
        FrankaEnv(**kwargs)


def test_bad_actions(env) -> None:
    with pytest.raises(gym.error.ResetNeeded):
        env.step(np.zeros(4))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        env.step(np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.array([np.nan, 0, 0, 0]))

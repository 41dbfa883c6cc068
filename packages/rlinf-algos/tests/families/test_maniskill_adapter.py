"""ManiSkill3 as a batched vector env (:mod:`rlinf_algos.maniskill_env`) and the Vulkan driver
it needs on a CPU machine (:mod:`rlinf_algos.vulkan`).

The fast tests cover the driver cache, the errors and the checks made before ManiSkill is
imported. Everything that builds a ManiSkill env is ``slow``: importing ManiSkill alone takes
15-30 s on the 2-core machine, and the first camera env compiles shaders for up to a minute.
The driver is set up as ``rlinf env setup maniskill`` does (README set-up; .ci/run runs it
before the tests): from rlinf's cache, or fetched once from Debian's backports when missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlinf_algos import vulkan
from rlinf_algos.vulkan import SETUP_COMMAND, VulkanError, rlinf_cache_dir, setup_vulkan, vulkan_env
from rlinf_core.errors import ConfigError

# ManiSkill 3.0.1 calls np.isnan on torch tensors every step (NumPy 2's __array_wrap__ notice)
pytestmark = pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning")


def _cached_driver() -> vulkan.VulkanSetup:
    """The driver in rlinf's cache, set up as `rlinf env setup maniskill` does when missing."""
    return setup_vulkan(rlinf_cache_dir())


def setup_vulkan_offline(cache: Path) -> vulkan.VulkanSetup | None:
    icd = cache / "vulkan" / "lvp_icd.json"
    return setup_vulkan(cache) if icd.is_file() else None


# -- rlinf_algos.vulkan (fast) --------------------------------------------------------------------


def test_cache_dir_follows_rlinf_then_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RLINF_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert rlinf_cache_dir() == tmp_path / "a"
    monkeypatch.delenv("RLINF_CACHE_DIR")
    assert rlinf_cache_dir() == tmp_path / "x" / "rlinf"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert rlinf_cache_dir() == tmp_path / "h" / ".cache" / "rlinf"


def test_setup_when_cached_is_offline_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = _cached_driver()
    icd = json.loads(first.icd_file.read_text())
    assert Path(icd["ICD"]["library_path"]).is_absolute() and first.library.is_file()
    assert first.library.name == "libvulkan_lvp.so"
    before = first.icd_file.stat().st_mtime_ns
    monkeypatch.setenv("PATH", str(tmp_path))  # no apt-get, dpkg or ldd: any fetch would fail
    again = setup_vulkan(rlinf_cache_dir())
    assert again == first and again.fetched is False
    assert first.icd_file.stat().st_mtime_ns == before


def test_setup_without_apt_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(VulkanError) as err:
        setup_vulkan(tmp_path / "cache")
    message = str(err.value)
    assert "\n" not in message and "apt-get" in message and "VK_ICD_FILENAMES" in message
    assert not (tmp_path / "cache" / "vulkan" / "lvp_icd.json").exists()


def test_vulkan_env_names_the_cached_icd_unless_the_user_chose(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cached = _cached_driver()
    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    monkeypatch.delenv("VK_DRIVER_FILES", raising=False)
    if vulkan.has_gpu_driver():
        assert vulkan_env() == {}  # a GPU's driver is left alone
    else:
        assert vulkan_env() == {"VK_ICD_FILENAMES": str(cached.icd_file)}
    assert vulkan_env(tmp_path) == {}  # nothing cached there
    monkeypatch.setenv("VK_ICD_FILENAMES", str(tmp_path / "mine.json"))
    assert vulkan_env() == {}


def _child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )


def test_no_vulkan_device_is_one_line_naming_the_setup_command(tmp_path: Path) -> None:
    # a driver file that does not exist: the loader finds no device, as on a machine never set up
    missing = str(tmp_path / "nonexistent_icd.json")
    done = subprocess.run(
        [sys.executable, "-m", "rlinf_algos.vulkan", "check"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "VK_ICD_FILENAMES": missing},
    )
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert SETUP_COMMAND in lines[0] and missing in lines[0]


def test_no_vulkan_device_stops_the_env_before_maniskill_loads(tmp_path: Path) -> None:
    missing = str(tmp_path / "nonexistent_icd.json")
    code = (
        "from rlinf_algos.maniskill_env import ManiSkillVectorEnv\n"
        "from rlinf_algos.vulkan import VulkanError\n"
        "try:\n    ManiSkillVectorEnv('PushCube-v1', 2)\n"
        "except VulkanError as err:\n    print(repr(str(err)))\n"
        "import sys\nprint('mani_skill' in sys.modules)\n"
    )
    done = _child(code, VK_ICD_FILENAMES=missing)
    assert done.returncode == 0, done.stderr
    message, imported = done.stdout.strip().splitlines()[-2:]
    assert SETUP_COMMAND in message and "\\n" not in message
    assert imported == "False"


def test_bad_arguments_are_config_errors_before_maniskill_loads() -> None:
    from rlinf_algos.maniskill_env import ManiSkillVectorEnv

    with pytest.raises(ConfigError, match=r"env\.obs_mode: obs_mode 'depth' is not one of state, pixels"):
        ManiSkillVectorEnv("PushCube-v1", obs_mode="depth")
    with pytest.raises(ConfigError, match=r"env\.sim_backend: .*'cuda' is not one of cpu, gpu"):
        ManiSkillVectorEnv("PushCube-v1", sim_backend="cuda")
    with pytest.raises(ConfigError, match=r"env\.num_envs"):
        ManiSkillVectorEnv("PushCube-v1", num_envs=0)
    with pytest.raises(ConfigError, match=r"env\.instruction"):
        ManiSkillVectorEnv("PushCube-v1", instruction="pick\nit")


def test_maniskill_not_installed_names_the_extra() -> None:
    code = (
        "import sys\nsys.modules['mani_skill'] = sys.modules['sapien'] = None  # as if not installed\n"
        "from rlinf_algos.maniskill_env import ManiSkillVectorEnv\n"
        "from rlinf_core.errors import ConfigError\n"
        "try:\n    ManiSkillVectorEnv('PushCube-v1')\n"
        "except ConfigError as err:\n    print(repr(str(err)))\n"
    )
    done = _child(code)
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip().splitlines()[-1]
    assert "ManiSkill is not installed" in message and "rlinf-algos[maniskill]" in message
    assert "\\n" not in message


# -- the env (slow: importing ManiSkill takes 15-30 s here) ----------------------------------------

N = 2


@pytest.fixture(scope="module")
def push() -> Any:
    from rlinf_algos.maniskill_env import ManiSkillVectorEnv

    _cached_driver()
    env = ManiSkillVectorEnv("PushCube-v1", N, obs_mode="state", sim_backend="cpu")
    yield env
    env.close()


def _cube_to_goal(env: Any, i: int) -> None:
    """Put sub-env ``i``'s cube on its goal (ManiSkill's PushCube succeeds there)."""
    task = env.maniskill_envs[i].unwrapped
    pose = task.obj.pose
    p = pose.p.clone()
    p[..., :2] = task.goal_region.pose.p[..., :2]
    task.obj.set_pose(type(pose).create_from_pq(p, pose.q))


def _cube_away(env: Any, i: int) -> None:
    task = env.maniskill_envs[i].unwrapped
    pose = task.obj.pose
    p = pose.p.clone()
    p[..., :2] = task.goal_region.pose.p[..., :2] + 0.3
    task.obj.set_pose(type(pose).create_from_pq(p, pose.q))


@pytest.mark.slow
def test_state_spaces_and_step_shapes(push: Any) -> None:
    from gymnasium.vector import AutoresetMode

    assert push.num_envs == N and push.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert push.single_action_space.shape == (8,) and push.action_space.shape == (N, 8)
    (dim,) = push.single_observation_space.shape
    assert push.observation_space.shape == (N, dim) and push.max_episode_steps == 50
    assert push.spec.id == "PushCube-v1" and push.spec.max_episode_steps == 50
    obs, info = push.reset(seed=0)
    assert isinstance(obs, np.ndarray) and obs.shape == (N, dim) and obs.dtype == np.float32
    assert push.observation_space.contains(obs)
    obs, rewards, terminated, truncated, info = push.step(np.zeros((N, 8), np.float32))
    assert obs.shape == (N, dim) and obs.dtype == np.float32
    assert rewards.shape == (N,) and rewards.dtype == np.float32
    assert (
        terminated.dtype == bool and truncated.dtype == bool and terminated.shape == truncated.shape == (N,)
    )
    assert info["success"].dtype == bool and info["success"].shape == (N,)
    with pytest.raises(ValueError, match="expected"):
        push.step(np.zeros((N + 1, 8), np.float32))


@pytest.mark.slow
def test_same_seed_same_episodes_through_autoresets(push: Any) -> None:
    actions = np.random.default_rng(7).uniform(-1, 1, (120, N, 8)).astype(np.float32)

    def run(seed: int) -> np.ndarray:
        first, _ = push.reset(seed=seed)
        seen = [first]
        for a in actions:  # two autoresets at steps 50 and 100
            seen.append(push.step(a)[0])
        return np.stack(seen)

    a, b, c = run(3), run(3), run(4)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[0], c[0])
    assert not np.array_equal(a[0, 0], a[0, 1])  # sub-envs differ (seed + i)
    assert not np.array_equal(a[51], a[0])  # the episode after the autoreset is a new one


@pytest.mark.slow
def test_unseeded_reset_goes_on_from_the_last_seed(push: Any) -> None:
    # ManiSkill's own unseeded reset draws from torch's global RNG, which no seed here controls
    def run() -> np.ndarray:
        push.reset(seed=5)
        return push.reset()[0]

    a, b = run(), run()
    assert np.array_equal(a, b)
    assert not np.array_equal(a[0], a[1])


@pytest.mark.slow
def test_time_limit_resets_in_the_same_step_with_final_obs(push: Any) -> None:
    from gymnasium.wrappers.vector import RecordEpisodeStatistics

    from rlinf_algos.envs import final_observations

    stats = RecordEpisodeStatistics(push)
    stats.reset(seed=11)
    zeros = np.zeros((N, 8), np.float32)
    for _ in range(49):
        obs, _, terminated, truncated, info = stats.step(zeros)
        assert not (terminated | truncated).any() and "final_obs" not in info
    before = obs
    obs, _, terminated, truncated, info = stats.step(zeros)
    assert truncated.all() and not terminated.any()
    assert info["_final_obs"].all() and info["final_obs"].dtype == object
    final = final_observations(obs, info, terminated | truncated)
    assert final.shape == obs.shape and not np.array_equal(final, obs)
    # the last observation continues the episode (zero actions: the arm barely moves) and the
    # returned one is a new episode's first
    assert np.abs(final - before).max() < np.abs(obs - before).max()
    assert list(info["episode"]["l"]) == [50] * N
    fin = info["final_info"]
    assert fin["_success"].all() and fin["_success_once"].all()
    assert not fin["success"].any() and not fin["success_once"].any()


@pytest.mark.slow
def test_success_ends_the_episode_and_is_reported(push: Any) -> None:
    push.reset(seed=1)
    _cube_to_goal(push, 0)
    _, _, terminated, truncated, info = push.step(np.zeros((N, 8), np.float32))
    assert list(terminated) == [True, False] and not truncated.any()
    fin = info["final_info"]
    assert list(fin["_success"]) == [True, False] and bool(fin["success"][0])
    assert bool(fin["success_once"][0]) and info["final_obs"][1] is None


@pytest.mark.slow
def test_ignore_terminations_tracks_success_once_to_the_time_limit() -> None:
    from rlinf_algos.maniskill_env import ManiSkillVectorEnv

    env = ManiSkillVectorEnv("PushCube-v1", N, ignore_terminations=True, max_episode_steps=10, seed=2)
    try:
        zeros = np.zeros((N, 8), np.float32)
        _cube_to_goal(env, 0)
        _, _, terminated, _, info = env.step(zeros)
        assert not terminated.any() and bool(info["success"][0])
        _cube_away(env, 0)
        for _ in range(9):
            _, _, terminated, truncated, info = env.step(zeros)
        assert truncated.all() and not terminated.any()
        fin = info["final_info"]
        assert list(fin["success_once"]) == [True, False]  # reached once, by sub-env 0
        assert not fin["success"].any()  # not at the end
        # the next episode starts with its flag cleared
        for _ in range(10):
            _, _, _, truncated, info = env.step(zeros)
        assert truncated.all() and not info["final_info"]["success_once"].any()
    finally:
        env.close()


@pytest.mark.slow
def test_unknown_and_asset_tasks_are_one_line_config_errors(push: Any) -> None:
    from rlinf_algos.maniskill_env import ManiSkillVectorEnv

    with pytest.raises(ConfigError, match=r"env\.id: 'PushCub-v1' is not a ManiSkill .*'PushCube-v1'") as err:
        ManiSkillVectorEnv("PushCub-v1")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"env\.id: 'PickSingleYCB-v1' needs ManiSkill assets") as err:
        ManiSkillVectorEnv("PickSingleYCB-v1")
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_rgb_images_at_the_configured_size_and_the_right_way_up() -> None:
    from rlinf_algos.maniskill_env import ManiSkillVectorEnv

    _cached_driver()
    env = ManiSkillVectorEnv(
        "PickCube-v1", N, obs_mode="rgb", image_size=(64, 80), instruction="pick up the red cube", seed=0
    )
    try:
        space = env.single_observation_space
        assert space["image"].shape == (64, 80, 3) and space["image"].dtype == np.uint8
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        image, state = obs["image"], obs["state"]
        assert image.shape == (N, 64, 80, 3) and image.dtype == np.uint8
        assert state.shape == (N, *space["state"].shape) and state.dtype == np.float32
        assert list(obs["instruction"]) == ["pick up the red cube"] * N
        # the base camera looks down at a wooden table under a grey backdrop: the bottom rows
        # are the table (red well above blue), the top rows are not; upside down it is reversed
        px = image.astype(np.float32)
        bottom, top = px[:, -16:], px[:, :8]
        assert (bottom[..., 0] - bottom[..., 2]).mean() > 40
        assert (top[..., 0] - top[..., 2]).mean() < 20
        next_obs, *_ = env.step(np.zeros((N, 8), np.float32))
        assert next_obs["image"].shape == image.shape
    finally:
        env.close()

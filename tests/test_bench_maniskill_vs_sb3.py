"""``benchmarks/maniskill_vs_sb3.py`` (PPO on ManiSkill3's PushCube-v1 through rlinf beside
Stable-Baselines3): SB3's ``VecEnv`` adapter steps the very env rlinf trains on (same seed and
actions, same observations, rewards and episode ends), and the SB3 side runs end to end, one
rollout and the 50-episode evaluation, so the benchmark cannot rot. Slow: importing ManiSkill
takes 15-30 s here and a PushCube step about 2 ms."""

from __future__ import annotations

import json

import numpy as np
import pytest

BENCHMARK = "maniskill_vs_sb3"  # the `bench` fixture (tests/conftest.py) imports it

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning"),
]


@pytest.fixture(scope="module", autouse=True)
def maniskill_and_sb3() -> None:
    """Before ``bench`` imports the benchmark: SB3 (the ``bench`` dependency group) and
    ManiSkill's interpreter."""
    pytest.importorskip("stable_baselines3")
    from rlinf_algos.families import get_family
    from rlinf_algos.families.venvs import setup_family

    setup_family(get_family("maniskill"), log=lambda *_: None)


def test_the_sb3_adapter_steps_the_env_rlinf_trains_on(bench):
    from _sb3 import SameStepVecEnv

    ours = bench.make_envs(2, 3)
    adapter = SameStepVecEnv(bench.make_envs(2, 3).unwrapped, seed=3)
    try:
        assert type(ours.unwrapped).__name__ == "ManiSkillVectorEnv"
        ref, _ = ours.reset(seed=3)
        np.testing.assert_array_equal(adapter.reset(), ref)
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(60):  # past PushCube's 50-step time limit
            actions = rng.uniform(-1, 1, (2, 8)).astype(np.float32)
            adapter.step_async(actions)
            obs, rew, done, infos = adapter.step_wait()
            r_obs, r_rew, term, trunc, info = ours.step(actions)
            np.testing.assert_array_equal(obs, r_obs)
            np.testing.assert_array_equal(rew, r_rew)
            np.testing.assert_array_equal(done, term | trunc)
            for i in np.flatnonzero(done):
                ends += 1
                np.testing.assert_array_equal(infos[i]["terminal_observation"], info["final_obs"][i])
                assert infos[i]["TimeLimit.truncated"] == bool(trunc[i] and not term[i])
                assert infos[i]["is_success"] == bool(info["final_info"]["success"][i])
                assert 1 <= infos[i]["episode"]["l"] <= 50
        assert ends >= 2  # every sub-env reached an episode end
    finally:
        ours.close()
        adapter.close()


def test_the_sb3_side_trains_and_is_evaluated_like_rlinf(bench, tmp_path):
    out = tmp_path / "sb3.json"
    bench.sb3_child(seed=0, steps=800, wall=300.0, out=str(out))  # one rollout of 100 x 8 envs
    res = json.loads(out.read_text())
    assert res["env_steps"] == 800
    assert res["episodes"] == bench.EVAL_EPISODES
    for key in ("success_at_end", "success_once"):
        lo, hi = res[key]["ci95"]
        assert res[key]["rate"] == pytest.approx(min(max(res[key]["rate"], lo), hi), abs=1e-12)  # inside
        assert 0.0 <= res[key]["rate"] <= 1.0 and hi - lo > 0.0
    assert res["curve"] and res["curve"][-1]["step"] == 800
    assert res["curve"][-1]["success_rate"] is not None  # 50-step episodes ended in the rollout

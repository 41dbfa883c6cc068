"""``benchmarks/vla_pixels.py`` (PPO on the Franka twin's pixels and instruction, rlinf beside
SB3): its rlinf peers build the example's ``vla`` policy through the model-type registry and
collect a timed rollout, so the benchmark cannot rot (a model section the registry no longer
took once broke every one of its rlinf rows). Slow: 16 rendered envs, about 25 s here."""

from __future__ import annotations

import pytest

BENCHMARK = "vla_pixels"  # the `bench` fixture (tests/conftest.py) imports it

pytestmark = pytest.mark.slow


def test_the_rlinf_collector_builds_the_examples_vla_policy_and_times_a_rollout(bench, monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.setenv("PYOPENGL_PLATFORM", "egl")
    result = bench.peer_rlinf_rollout_inprocess(0, 1, 1, 0)
    assert result["steps"] == bench.BATCH and result["sps"] > 0
    assert result["runner"].startswith("in-process")

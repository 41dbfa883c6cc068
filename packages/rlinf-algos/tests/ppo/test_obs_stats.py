"""PPO's observation statistics during RL (``algorithm.obs_norm_steps``), on a real in-process
run (Pendulum-v1, a few dozen env steps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import rlinf_algos


def test_obs_norm_steps_stops_folding_rl_batches_into_the_statistics(tmp_path: Path) -> None:
    """``algorithm.obs_norm_steps``: the running observation statistics take RL's batches until
    they hold that many steps, then stay as they are (three 32-step iterations, limit 32: the
    statistics hold 32 steps, not 96, and the run's last two iterations left them unchanged)."""

    def run(limit: int | None, name: str) -> Any:
        algo: dict[str, Any] = {"name": "ppo", "rollout_steps": 16, "minibatch_size": 16, "update_epochs": 1}
        if limit is not None:
            algo["obs_norm_steps"] = limit
        cfg = {
            "algorithm": algo,
            "env": {"id": "Pendulum-v1", "num_envs": 2},
            "model": {"hidden_sizes": [8, 8]},
            "runner": {"scheduler": "local", "total_steps": 96, "log_interval": 96, "loggers": ["csv"]},
        }
        rlinf_algos.train(cfg, tmp_path / name)
        return rlinf_algos.load_policy(tmp_path / name).module.obs_norm

    assert float(run(32, "limited").count) == pytest.approx(32)
    assert float(run(None, "running").count) == pytest.approx(96)

"""Shared by the fault tests of the placed runtime (``test_learner_restart.py``,
``test_wait_faults.py``): one small placed PPO run and its metrics rows."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest


class PlacedPPO:
    """PPO on InvertedPendulum-v5 with an env, a rollout and an actor worker on one node:
    :attr:`batch` env steps per iteration (64 rollout steps x 4 envs, two pipeline stages), a
    checkpoint every two iterations, seed 3, metrics to CSV."""

    batch = 64 * 4

    def config(self, iterations: int, **runner: Any) -> dict[str, Any]:
        """The run of ``iterations`` iterations; ``runner`` adds to (or overrides) its ``runner``
        section."""
        return {
            "cluster": {
                "num_nodes": 1,
                "component_placement": {
                    "env": {"node_group": "node", "placement": "0"},
                    "rollout": {"node_group": "node", "placement": "0"},
                    "actor": {"node_group": "node", "placement": "0"},
                },
            },
            "algorithm": {"name": "ppo", "rollout_steps": 64, "update_epochs": 2, "minibatch_size": 64},
            "env": {"id": "InvertedPendulum-v5", "num_envs": 4},
            "model": {"hidden_sizes": [16, 16]},
            "rollout": {"pipeline_stages": 2},
            "runner": {
                "total_steps": iterations * self.batch,
                "log_interval": self.batch,
                "checkpoint_interval": 2 * self.batch,
                "seed": 3,
                "loggers": ["csv"],
                **runner,
            },
        }

    @staticmethod
    def rows(run_dir: Path) -> list[int]:
        """The ``step`` of each row of the run's ``metrics.csv``."""
        with (run_dir / "metrics.csv").open() as f:
            return [int(r["step"]) for r in csv.DictReader(f)]


@pytest.fixture(scope="session")
def placed_ppo() -> PlacedPPO:
    """``placed_ppo.config(iterations, **runner)``, ``placed_ppo.rows(run_dir)``,
    ``placed_ppo.batch`` (see :class:`PlacedPPO`)."""
    return PlacedPPO()

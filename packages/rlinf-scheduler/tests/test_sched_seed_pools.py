"""Seed 003's worker-pool configs (examples/seed003) plan to the layouts their comments describe,
through :func:`rlinf_core.pools.expand_pools` and the planner, and through ``rlinf cluster plan``
run as a user runs it."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlinf_core.config import load_yaml
from rlinf_core.errors import ConfigError
from rlinf_core.pools import expand_pools
from rlinf_scheduler.placement import plan_placement

SEED = Path(__file__).resolve().parents[3] / "examples" / "seed003"
CASES = [
    ("ppo_vla_8gpu", "inventory_1node"),
    ("ppo_vla_32gpu", "inventory_4node"),
    ("ppo_vla_256gpu", "inventory_32node"),
]


def plan_of(name: str, inventory: str | None) -> Any:
    expansion = expand_pools(load_yaml(SEED / f"{name}.yaml"))
    assert expansion.problems == []
    inv = load_yaml(SEED / f"{inventory}.yaml") if inventory else expansion.inventory
    return plan_placement(expansion.cluster, inv)


def per_node(plan: Any, component: str) -> dict[int, int]:
    return dict(collections.Counter(p.node_rank for p in plan[component].processes))


@pytest.mark.parametrize("implied", [False, True], ids=["inventory", "implied"])
def test_8gpu_is_4_rollout_4_trainer_gpus_and_4_cpu_reward_workers(implied: bool) -> None:
    plan = plan_of("ppo_vla_8gpu", None if implied else "inventory_1node")
    assert [p.visible_accelerators for p in plan["actor"].processes] == [(0,), (1,), (2,), (3,)]
    assert [p.visible_accelerators for p in plan["rollout"].processes] == [(4,), (5,), (6,), (7,)]
    assert plan["env"].world_size == 4  # the reward workers: PPO's env workers compute the reward
    assert {p.hardware_type for p in plan["env"].processes} == {"node"}
    assert per_node(plan, "env") == {0: 4}


@pytest.mark.parametrize("implied", [False, True], ids=["inventory", "implied"])
def test_32gpu_trainer_on_node0_rollout_on_nodes_1_to_3(implied: bool) -> None:
    plan = plan_of("ppo_vla_32gpu", None if implied else "inventory_4node")
    assert per_node(plan, "actor") == {0: 8}
    assert sorted(p.visible_accelerators[0] for p in plan["actor"].processes) == list(range(8))
    assert per_node(plan, "rollout") == {1: 8, 2: 8, 3: 8}
    assert all(len(p.visible_accelerators) == 1 for p in plan["rollout"].processes)
    assert plan["env"].world_size == 16
    assert per_node(plan, "env") == {1: 6, 2: 5, 3: 5}


def test_256gpu_8_trainer_gpus_248_rollout_workers_64_reward_workers() -> None:
    plan = plan_of("ppo_vla_256gpu", "inventory_32node")
    assert per_node(plan, "actor") == {0: 8}
    assert plan["rollout"].world_size == 248
    assert per_node(plan, "rollout") == {n: 8 for n in range(1, 32)}
    assert plan["env"].world_size == 64
    assert 0 not in per_node(plan, "env") and sum(per_node(plan, "env").values()) == 64


def test_a_reward_component_takes_the_reward_workers() -> None:
    data = load_yaml(SEED / "ppo_vla_32gpu.yaml")
    expansion = expand_pools(data, ("env", "rollout", "reward", "reference", "actor"))
    plan = plan_placement(expansion.cluster, load_yaml(SEED / "inventory_4node.yaml"))
    assert plan["reward"].world_size == 16 and plan["env"].world_size == 24
    assert per_node(plan, "env") == per_node(plan, "rollout")  # one env worker beside each rollout worker


def test_mistyped_seed_key_names_itself_and_the_close_one() -> None:
    data = load_yaml(SEED / "ppo_vla_8gpu.yaml")
    data["rollout_worker"]["num_worker"] = data["rollout_worker"].pop("num_workers")
    problems = {p.path: p.message for p in expand_pools(data).problems}
    assert "did you mean 'num_workers'?" in problems["rollout_worker.num_worker"]


def test_pools_that_do_not_fit_name_the_seed_key() -> None:
    data = load_yaml(SEED / "ppo_vla_32gpu.yaml")
    data["trainer"]["num_gpus"] = 16
    data["reward_worker"]["device"] = "cuda"
    problems = {p.path: p.message for p in expand_pools(data).problems}
    assert "head node's 8" in problems["trainer.num_gpus"]
    assert "not supported" in problems["reward_worker.device"]


def test_planner_problems_are_renamed_to_the_seed_key() -> None:
    data = load_yaml(SEED / "ppo_vla_32gpu.yaml")
    expansion = expand_pools(data)
    with pytest.raises(ConfigError) as err:  # 3 nodes of 4 GPUs cannot hold 24 rollout workers
        plan_placement(expansion.cluster, {"nodes": [{"node_ranks": "0-3", "gpus": 4}]})
    renamed = [p.path for p in expansion.translate(err.value.problems)]
    assert any(path.startswith("trainer (became cluster.component_placement.actor") for path in renamed), (
        renamed
    )
    assert any(path.startswith("rollout_worker (became") for path in renamed), renamed


def rlinf(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RLINF_LOAD_PLUGINS": "scheduler,algos"}
    return subprocess.run(
        [sys.executable, "-m", "rlinf_core", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_cluster_plan_shows_the_expansion_then_the_plan() -> None:
    res = rlinf(
        "cluster", "plan", str(SEED / "ppo_vla_32gpu.yaml"), "--inventory", str(SEED / "inventory_4node.yaml")
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert (
        out.index("# the cluster section it became")
        < out.index("component_placement")
        < out.index("placement plan")
    )
    assert "rollout: 24 processes on nodes 1-3" in out
    res = rlinf("cluster", "plan", str(SEED / "ppo_vla_256gpu.yaml"), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["cluster"]["component_placement"]["rollout"] == {
        "node_group": "workers",
        "placement": "0-247",
    }
    assert len(data["plan"]["components"]["rollout"]) == 248


def test_cluster_plan_of_a_mistyped_seed_key_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((SEED / "ppo_vla_8gpu.yaml").read_text().replace("reward_worker:", "reward_workers:"))
    res = rlinf("cluster", "plan", str(bad))
    assert res.returncode == 2
    assert "reward_workers" in res.stderr and "did you mean 'reward_worker'" in res.stderr
    assert "Traceback" not in res.stderr

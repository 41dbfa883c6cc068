"""The worker-pool form (seed 003) -> ``cluster`` section: :mod:`rlinf_core.pools`, pure."""

from __future__ import annotations

import pytest

from rlinf_core.cluster import resolve_cluster
from rlinf_core.errors import ConfigProblem
from rlinf_core.pools import expand_pools, is_seed_form, spread


@pytest.mark.parametrize(
    ("count", "nodes", "text"),
    [
        (4, range(0, 1), "0:0-3"),
        (24, range(1, 4), "1-3:0-23"),
        (16, range(1, 4), "1:0-5,2-3:6-15"),
        (64, range(1, 32), "1-2:0-5,3-31:6-63"),
        (2, range(1, 4), "1-2:0-1"),
        (1, range(0, 1), "0:0"),
    ],
)
def test_spread_is_even_and_compact(count: int, nodes: range, text: str) -> None:
    assert spread(count, nodes) == text


def test_seed_form_is_recognised() -> None:
    assert is_seed_form({"algorithm": "ppo"})
    assert is_seed_form({"algorithm": {"name": "ppo"}, "rollout_worker": {}})
    assert not is_seed_form({"algorithm": {"name": "ppo"}, "cluster": {"num_nodes": 1}})
    assert not is_seed_form({"algorithm": "ppo", "cluster": {"num_nodes": 1}})


def test_the_pools_become_a_valid_cluster_section() -> None:
    out = expand_pools(
        {
            "ray_cluster": {"num_nodes": 4, "head_node_gpus": 8},
            "rollout_worker": {"num_workers": 12, "num_gpus": 2},
            "trainer": {"num_gpus": 4},
            "reward_worker": {"num_workers": 3},
        }
    )
    assert out.problems == []
    assert out.cluster["component_placement"] == {
        "actor": {"node_group": "head", "placement": "0-3"},
        "rollout": {"node_group": "workers", "placement": "0-23:0-11"},  # two GPUs per worker
        "env": {"node_group": "node", "placement": "1-3:0-2"},
    }
    assert out.inventory == {"nodes": [{"node_ranks": "0", "gpus": 8}, {"node_ranks": "1-3", "gpus": 8}]}
    assert any("4 of the head node's 8 GPUs stay idle" in n for n in out.notes)
    resolve_cluster(out.cluster)


def test_cpu_pools_need_no_gpus() -> None:
    out = expand_pools(
        {"rollout_worker": {"num_workers": 2, "device": "cpu"}, "trainer": {"num_gpus": 0}},
        ("env", "rollout", "actor"),
    )
    assert out.problems == []
    assert out.cluster == {
        "num_nodes": 1,
        "component_placement": {
            "actor": {"node_group": "node", "placement": "0"},
            "rollout": {"node_group": "node", "placement": "0:0-1"},
            "env": {"node_group": "node", "placement": "0:0-1"},
        },
    }


def paths(data: dict, **kw: object) -> dict[str, str]:
    return {p.path: p.message for p in expand_pools(data, **kw).problems}


def test_every_problem_names_the_seed_key() -> None:
    found = paths(
        {
            "ray_cluster": {"num_nodes": 1, "head_node_gpus": 4},
            "rollout_worker": {"num_workers": 4, "device": "cpu", "num_gpus": 1, "num_env_per_worker": 2},
            "trainer": {"num_gpus": 8, "gradient_accumulation_steps": 0},
            "reward_worker": {"device": "cuda"},
        }
    )
    assert "head node's 4" in found["trainer.num_gpus"]
    assert "device cpu takes no GPUs" in found["rollout_worker.num_gpus"]
    assert "did you mean 'num_envs_per_worker'?" in found["rollout_worker.num_env_per_worker"]
    assert "greater than or equal to 1" in found["trainer.gradient_accumulation_steps"]
    assert "not supported" in found["reward_worker.device"]


def test_gpus_of_one_node_are_counted_together() -> None:
    found = paths(
        {
            "ray_cluster": {"num_nodes": 1, "head_node_gpus": 8},
            "rollout_worker": {"num_workers": 6},
            "trainer": {"num_gpus": 4},
        }
    )
    assert "need 10 GPUs" in found["rollout_worker.num_workers"]


def test_top_level_typo_is_named_when_the_sections_are_known() -> None:
    found = paths({"algorithm": "ppo", "rolout_worker": {}}, sections=("cluster", "algorithm", "env"))
    assert "did you mean 'rollout_worker'?" in found["rolout_worker"]


def test_translate_names_the_seed_key() -> None:
    out = expand_pools({"rollout_worker": {"num_workers": 2}})
    (p,) = out.translate([ConfigProblem("cluster.component_placement.rollout.placement", "bad")])
    assert p.path == "rollout_worker (became cluster.component_placement.rollout.placement)"
    (q,) = out.translate([ConfigProblem("env.id", "x")])
    assert q.path == "env.id"


def test_a_task_section_of_a_language_model_run_is_not_the_worker_pool_form() -> None:
    lm = {"cluster": {"num_nodes": 1}, "algorithm": {"name": "grpo_lm"}, "task": {"name": "arith"}}
    assert not is_seed_form(lm)
    assert is_seed_form({"task": "embodied_vla", "algorithm": "ppo"})

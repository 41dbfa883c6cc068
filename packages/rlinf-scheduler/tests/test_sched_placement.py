"""The placement planner on the seeds' examples and on every placement rule.

Hardware comes from a real PluginHost with an in-process test plugin ("Franka" stand-in: same
name and config shape as rlinf-hw-franka's type; no robot exists here). GPUs come from the
inventory (no GPU exists here either; planning never touches one).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlinf_core import HardwareConfig, HardwarePlugin, HardwareResource, hookimpl, load_plugins
from rlinf_core.config import load_yaml
from rlinf_core.errors import ConfigError
from rlinf_scheduler.placement import (
    ComponentPlacement,
    Inventory,
    Plan,
    ProcessPlacement,
    load_inventory,
    plan_placement,
    render_table,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


class FrankaTestConfig(HardwareConfig):
    robot_ip: str
    camera_serials: list[str] = []


class FrankaTest(HardwarePlugin):
    """Stand-in for rlinf-hw-franka's "Franka" type; contacting it during planning fails the test."""

    PLUGIN_NAME = "Franka"
    config_model = FrankaTestConfig

    @classmethod
    def validate(cls, resource, *, timeout=5.0):
        raise AssertionError("planning must never contact hardware")


class CamRigConfig(HardwareConfig):
    gpus: list[int]


class CamRig(HardwarePlugin):
    """A type whose processes see only the accelerators the hardware names."""

    PLUGIN_NAME = "CamRig"
    config_model = CamRigConfig
    isolates_accelerators = True

    @classmethod
    def enumerate(cls, node_rank, configs):
        mine = [c for c in configs if c.node_rank == node_rank]
        return [
            HardwareResource(cls.PLUGIN_NAME, node_rank, i, c, {"accelerators": list(c.gpus)})
            for i, c in enumerate(mine)
        ]


class _TestHardware:
    @hookimpl
    def rlinf_register_hardware(self):
        return [FrankaTest, CamRig]


@pytest.fixture(scope="module")
def host():
    return load_plugins(entry_points=[], extra=[("test-hw", _TestHardware())])


@pytest.fixture(scope="module")
def seed18():
    return load_yaml(EXAMPLES / "cluster_heterogeneous_18node.yaml")["cluster"]


@pytest.fixture(scope="module")
def inv18():
    return load_inventory(EXAMPLES / "inventory_18node.yaml", 18)


def problems_of(*args, **kw):
    with pytest.raises(ConfigError) as info:
        plan_placement(*args, **kw)
    return [str(p) for p in info.value.problems]


# -- the seeds' examples -------------------------------------------------------------------------
def test_seed_18_node_heterogeneous_example(host, seed18, inv18):
    plan = plan_placement(copy.deepcopy(seed18), inv18, hardware=host)
    assert isinstance(plan, Plan) and plan.num_nodes == 18
    assert {n: c.world_size for n, c in plan.components.items()} == {
        "actor": 64,
        "rollout": 64,
        "env": 2,
        "agent": 400,
    }

    actor = plan["actor"]
    assert isinstance(actor, ComponentPlacement) and isinstance(actor[0], ProcessPlacement)
    for p in actor:
        assert p.node_rank == p.rank // 8 and p.node_group == "a800" and p.hardware_type == "accelerator"
        assert p.hardware_ranks == (p.rank,) and p.local_hardware_ranks == (p.rank % 8,)
        assert p.visible_accelerators == (p.rank % 8,)
        assert p.python == "/opt/venv/openpi/bin/python3" and dict(p.env) == {"GLOO_SOCKET_IFNAME": "eth0"}

    rollout = plan["rollout"]
    assert [p.node_rank for p in rollout] == [8 + r // 8 for r in range(64)]
    assert all(p.python is None and dict(p.env) == {"GLOO_SOCKET_IFNAME": "eth1"} for p in rollout)
    assert rollout[63].to_dict() == {
        "rank": 63,
        "node_rank": 15,
        "node_group": "4090",
        "hardware_type": "accelerator",
        "hardware_ranks": [63],
        "local_hardware_ranks": [7],
        "visible_accelerators": [7],
        "python": None,
        "env": {"GLOO_SOCKET_IFNAME": "eth1"},
    }

    env = plan["env"]
    assert [(p.node_rank, p.hardware_type, p.hardware_ranks, p.local_hardware_ranks) for p in env] == [
        (16, "Franka", (0,), (0,)),
        (17, "Franka", (1,), (0,)),
    ]
    assert env[1].visible_accelerators == ()  # nodes 16-17 have no GPUs
    # an env worker on a Franka group receives its robot's config
    assert env[0].hardware[0].config.robot_ip == "10.10.10.1"
    assert env[1].to_dict()["hardware"][0]["config"] == {
        "node_rank": 17,
        "robot_ip": "10.10.10.2",
        "camera_serials": ["322142001232", "322142001233"],
    }

    agent = plan["agent"]
    nodes = [p.node_rank for p in agent]
    assert nodes == [0] * 100 + [1] * 100 + [2] * 100 + [3] * 100
    assert all(p.hardware_type == "node" and p.node_group == "node" for p in agent)
    assert agent[150].hardware_ranks == (1,) and agent[150].local_hardware_ranks == (0,)
    assert agent[0].visible_accelerators == tuple(range(8))  # a whole-node process sees every GPU
    assert agent[0].python is None and dict(agent[0].env) == {}  # placed through `node`: no env config


def test_seed_18_node_plan_never_validates_hardware(host, seed18, inv18):
    plan_placement(seed18, inv18, hardware=host)  # FrankaTest.validate would raise


def test_seed_cloud_edge_example_json_shape(host):
    cfg = load_yaml(EXAMPLES / "cluster_cloud_edge.yaml")["cluster"]
    inv = load_inventory(EXAMPLES / "inventory_cloud_edge.yaml", 2)
    out = json.loads(plan_placement(cfg, inv, hardware=host).to_json())
    assert out["num_nodes"] == 2
    assert out["components"]["actor"][0] == {
        "rank": 0,
        "node_rank": 0,
        "node_group": "cloud",
        "hardware_type": "accelerator",
        "hardware_ranks": [0],
        "local_hardware_ranks": [0],
        "visible_accelerators": [0],
        "python": None,
        "env": {},
    }
    assert [p["visible_accelerators"] for p in out["components"]["actor"]] == [[0], [1], [2], [3]]
    for name in ("rollout", "env"):
        assert out["components"][name] == [
            {
                "rank": 0,
                "node_rank": 1,
                "node_group": "edge",
                "hardware_type": "node",
                "hardware_ranks": [0],
                "local_hardware_ranks": [0],
                "visible_accelerators": [],
                "python": None,
                "env": {},
            }
        ]


def test_cloud_edge_without_inventory_explains_the_missing_accelerators():
    cfg = load_yaml(EXAMPLES / "cluster_cloud_edge.yaml")["cluster"]
    (msg,) = problems_of(cfg, None)
    assert msg.startswith(
        "cluster.component_placement.actor.placement: part '0-3': resource rank 1 is outside 0..0"
    )
    assert "no inventory was given" in msg and "--inventory" in msg


# -- hardware ranks of a group -------------------------------------------------------------------
def _cfg(groups, placement, num_nodes=4):
    return {"num_nodes": num_nodes, "node_groups": groups, "component_placement": placement}


def test_accelerators_are_numbered_densely_in_node_order():
    inv = Inventory.from_data({"nodes": [{"node_ranks": 0, "gpus": 8}, {"node_ranks": 1, "gpus": 4}]}, 2)
    plan = plan_placement(
        _cfg([{"label": "g", "node_ranks": "0-1"}], {"a": {"node_group": "g", "placement": "0-11"}}, 2), inv
    )
    assert [(p.node_rank, p.local_hardware_ranks[0]) for p in plan["a"]] == [(0, i) for i in range(8)] + [
        (1, i) for i in range(4)
    ]
    assert plan["a"][8].hardware_ranks == (8,) and plan["a"][8].visible_accelerators == (0,)


def test_a_node_without_accelerators_owns_none_and_the_error_says_so():
    inv = Inventory.from_data({"nodes": [{"node_ranks": "0-1", "gpus": 2}]}, 4)
    groups = [{"label": "mixed", "node_ranks": "0-3"}]
    plan = plan_placement(_cfg(groups, {"a": {"node_group": "mixed", "placement": "0-3"}}), inv)
    assert [p.node_rank for p in plan["a"]] == [0, 0, 1, 1]
    (msg,) = problems_of(_cfg(groups, {"a": {"node_group": "mixed", "placement": "0-5"}}), inv)
    assert msg == (
        "cluster.component_placement.a.placement: part '0-5': resource rank 4 is outside 0..3 "
        "(group 'mixed' has 4 accelerators (ranks 0-3) on nodes 0-1; nodes 2-3 have no accelerators and own none in it)"
    )


def test_without_accelerators_each_node_is_a_resource_ranked_by_its_index_in_the_group():
    plan = plan_placement(
        _cfg([{"label": "cpu", "node_ranks": "2-3"}], {"a": {"node_group": "cpu", "placement": "0-1"}}), None
    )
    assert [(p.hardware_type, p.hardware_ranks, p.node_rank, p.local_hardware_ranks) for p in plan["a"]] == [
        ("node", (0,), 2, (0,)),
        ("node", (1,), 3, (0,)),
    ]


def test_reserved_node_group_ignores_accelerators_and_uses_node_ranks():
    plan = plan_placement(
        _cfg([], {"agent": {"node_group": "node", "placement": "1-2"}}), Inventory.uniform(8)
    )
    assert [
        (p.node_rank, p.hardware_ranks, p.hardware_type, p.visible_accelerators) for p in plan["agent"]
    ] == [
        (1, (1,), "node", tuple(range(8))),
        (2, (2,), "node", tuple(range(8))),
    ]


def test_default_cluster_group_is_every_node():
    plan = plan_placement(_cfg([], {"actor": "0-15", "ref": "all:0-3"}, 2), Inventory.uniform(8))
    assert plan["actor"][15].node_rank == 1 and plan["actor"][15].node_group == "cluster"
    assert [p.hardware_ranks for p in plan["ref"]] == [
        (0, 1, 2, 3),
        (4, 5, 6, 7),
        (8, 9, 10, 11),
        (12, 13, 14, 15),
    ]
    cpu = plan_placement(_cfg([], {"actor": "all"}, 3), None)
    assert [p.node_rank for p in cpu["actor"]] == [0, 1, 2]


def test_hardware_groups_rank_their_devices(host):
    groups = [
        {
            "label": "arms",
            "node_ranks": "1-2",
            "hardware": {
                "type": "franka",
                "configs": [
                    {"robot_ip": "b", "node_rank": 2},
                    {"robot_ip": "a1", "node_rank": 1},
                    {"robot_ip": "a2", "node_rank": 1},
                ],
            },
        }
    ]
    plan = plan_placement(
        _cfg(groups, {"env": {"node_group": "arms", "placement": "all"}}), Inventory.uniform(2), hardware=host
    )
    got = [
        (p.node_rank, p.hardware_ranks, p.local_hardware_ranks, p.hardware[0].config.robot_ip)
        for p in plan["env"]
    ]
    assert got == [(1, (0,), (0,), "a1"), (1, (1,), (1,), "a2"), (2, (2,), (0,), "b")]
    assert all(p.hardware_type == "franka" and p.visible_accelerators == (0, 1) for p in plan["env"])
    (msg,) = problems_of(
        _cfg(groups, {"env": {"node_group": "arms", "placement": "0-3"}}), None, hardware=host
    )
    assert (
        "resource rank 3 is outside 0..2 (group 'arms' has 3 franka devices (ranks 0-2) on nodes 1-2)" in msg
    )


def test_hardware_that_isolates_accelerators(host):
    groups = [
        {
            "label": "rig",
            "node_ranks": 0,
            "hardware": {"type": "CamRig", "configs": [{"node_rank": 0, "gpus": [2, 3]}]},
        }
    ]
    plan = plan_placement(
        _cfg(groups, {"cam": {"node_group": "rig", "placement": "0"}}), Inventory.uniform(4), hardware=host
    )
    assert plan["cam"][0].visible_accelerators == (2, 3)


def test_several_groups_concatenate_in_the_order_listed(host):
    groups = [{"label": "a", "node_ranks": 0}, {"label": "b", "node_ranks": 1}]
    inv = Inventory.from_data({"nodes": [{"node_ranks": 0, "gpus": 2}, {"node_ranks": 1, "gpus": 4}]}, 2)
    plan = plan_placement(_cfg(groups, {"x": {"node_group": "b,a", "placement": "0-5"}}, 2), inv)
    assert [(p.node_rank, p.node_group, p.hardware_ranks, p.local_hardware_ranks) for p in plan["x"]] == [
        (1, "b", (0,), (0,)),
        (1, "b", (1,), (1,)),
        (1, "b", (2,), (2,)),
        (1, "b", (3,), (3,)),
        (0, "a", (4,), (0,)),
        (0, "a", (5,), (1,)),
    ]
    # robot hardware and accelerators in one rank space
    groups.append(
        {
            "label": "arm",
            "node_ranks": 1,
            "hardware": {"type": "Franka", "configs": [{"robot_ip": "r", "node_rank": 1}]},
        }
    )
    plan = plan_placement(
        _cfg(groups, {"x": {"node_group": ["a", "arm"], "placement": "0-2"}}, 2), inv, hardware=host
    )
    assert [p.hardware_type for p in plan["x"]] == ["accelerator", "accelerator", "Franka"]


def test_a_process_may_not_span_two_groups():
    groups = [{"label": "a", "node_ranks": 0}, {"label": "b", "node_ranks": 1}]
    inv = Inventory.uniform(2)
    (msg,) = problems_of(_cfg(groups, {"x": {"node_group": "a,b", "placement": "0-3:0"}}, 2), inv)
    assert "processes 0 would span two node" in msg


def test_listed_groups_must_not_overlap():
    groups = [{"label": "a", "node_ranks": "0-1"}, {"label": "b", "node_ranks": "1-2"}]
    (msg,) = problems_of(_cfg(groups, {"x": {"node_group": "a,b", "placement": "0"}}), Inventory.uniform(1))
    assert msg.startswith(
        "cluster.component_placement.x.node_group: groups 'a' and 'b' share node 1's resources"
    )


# -- placement strings on real rank spaces ------------------------------------------------------
def test_sharing_and_blocks():
    plan = plan_placement(_cfg([], {"share": "0-3:0-7", "blocks": "0-7:0-3"}, 1), Inventory.uniform(8))
    assert [p.hardware_ranks[0] for p in plan["share"]] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [p.visible_accelerators for p in plan["blocks"]] == [(0, 1), (2, 3), (4, 5), (6, 7)]


def test_one_process_may_not_span_two_nodes():
    (msg,) = problems_of(_cfg([], {"actor": "0-5:0-1"}, 2), Inventory.uniform(4))
    assert msg.startswith("cluster.component_placement.actor: processes 1 would span two nodes")
    assert plan_placement(_cfg([], {"actor": "0-7:0-1"}, 2), Inventory.uniform(4))["actor"][1].node_rank == 1


@pytest.mark.parametrize(
    ("placement", "fragment"),
    [
        ("4-7,0-3", "resource ranks must be unique and ascending"),
        ("0-3:1-4", "must start at 0, not 1"),
        ("0-1:0-1,2-3:5-6", "must continue from 2, not 5"),
        ("0-2:0-1", "one count must divide the other"),
        ("0-8", "resource rank 8 is outside 0..7"),
    ],
)
def test_placement_rule_failures(placement, fragment):
    (msg,) = problems_of(_cfg([], {"actor": placement}, 1), Inventory.uniform(8))
    assert msg.startswith("cluster.component_placement.actor: ") and fragment in msg


def test_every_component_problem_is_reported(host, seed18, inv18):
    cfg = copy.deepcopy(seed18)
    cfg["component_placement"]["actor"]["placement"] = "0-64"
    cfg["component_placement"]["rollout"]["placement"] = "0-2:0-1"
    cfg["component_placement"]["env"]["placement"] = "0-2"
    msgs = problems_of(cfg, inv18, hardware=host)
    assert [m.split(":")[0] for m in msgs] == [
        "cluster.component_placement.actor.placement",
        "cluster.component_placement.rollout.placement",
        "cluster.component_placement.env.placement",
    ]


def test_group_and_placement_problems_are_reported_together(host, seed18, inv18):
    cfg = copy.deepcopy(seed18)
    cfg["node_groups"][2]["hardware"]["configs"][1]["node_rank"] = 3  # breaks group 'franka'
    cfg["component_placement"]["actor"]["placement"] = "0-64"  # a800 is sound: planned and checked
    msgs = problems_of(cfg, inv18, hardware=host)
    assert [m.split(":")[0] for m in msgs] == [
        "cluster.node_groups[2].hardware.configs[1].node_rank",
        "cluster.component_placement.actor.placement",
    ]


def test_invalid_inventory_mapping_is_reported_with_config_problems():
    msgs = problems_of({"num_nodes": 0}, {"nodes": [{"node_ranks": "x", "gpus": 1}]})
    assert msgs[0] == "cluster.num_nodes: must be a positive integer (got 0)"
    assert msgs[1].startswith("inventory.nodes[0].node_ranks: 'x' is not a rank or range")


def test_shared_key_places_each_component_identically():
    plan = plan_placement(_cfg([], {"actor,rollout": "0-3"}, 1), Inventory.uniform(4))
    assert [p.hardware_ranks for p in plan["actor"]] == [p.hardware_ranks for p in plan["rollout"]]
    assert plan["rollout"][0].component == "rollout" and plan["actor"][0].component == "actor"


def test_env_comes_from_the_group_placed_through():
    groups = [
        {
            "label": "g",
            "node_ranks": "0-1",
            "env_configs": [
                {"node_ranks": 0, "env_vars": {"A": "0"}, "python_interpreter_path": "/p0"},
                {"node_ranks": 1, "env_vars": [{"A": "1"}]},
            ],
        },
    ]
    plan = plan_placement(
        _cfg(
            groups,
            {"x": {"node_group": "g", "placement": "0-1"}, "y": {"node_group": "node", "placement": "0"}},
            2,
        ),
        Inventory.uniform(1),
    )
    assert [(dict(p.env), p.python) for p in plan["x"]] == [({"A": "0"}, "/p0"), ({"A": "1"}, None)]
    assert dict(plan["y"][0].env) == {} and plan["y"][0].python is None


# -- inventory -----------------------------------------------------------------------------------
def test_inventory_forms():
    inv = Inventory.from_data(
        {"nodes": [{"node_ranks": "0-7", "gpus": 8}, {"node_ranks": [16, 17], "gpus": 0}]}, 18
    )
    assert inv.gpus(3) == 8 and inv.gpus(16) == 0 and inv.gpus(10) == 0
    assert Inventory.uniform(2).gpus(99) == 2 and Inventory().gpus(0) == 0


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"nodes": [{"node_ranks": "0-19", "gpus": 8}]},
            "inventory.nodes[0].node_ranks: range 0-19: node ranks 18-19 are outside 0..17",
        ),
        (
            {"nodes": [{"node_ranks": "0-3", "gpus": 8}, {"node_ranks": 3, "gpus": 1}]},
            "inventory.nodes[1].node_ranks: node ranks 3 are already listed in nodes[0]",
        ),
        (
            {"nodes": [{"node_ranks": 0, "gpus": -1}]},
            "inventory.nodes[0].gpus: Input should be greater than or equal to 0 (got -1)",
        ),
        (
            {"nodes": [{"node_ranks": 0, "gpu": 1}]},
            "inventory.nodes[0].gpu: unknown key (check its spelling; it is not a setting here)",
        ),
        ({"node": []}, "inventory.node: unknown key (valid keys: nodes)"),
    ],
)
def test_inventory_errors(data, expected):
    with pytest.raises(ConfigError) as info:
        Inventory.from_data(data, 18)
    assert expected in [str(p) for p in info.value.problems]


def test_inventory_beyond_num_nodes_is_rejected_by_the_planner():
    inv = Inventory.from_data({"nodes": [{"node_ranks": 5, "gpus": 1}]})
    assert problems_of(_cfg([], {"a": "0"}, 2), inv) == [
        "inventory.nodes: node ranks 5 are outside 0..1 (cluster.num_nodes is 2)"
    ]


@pytest.mark.parametrize("n", [-1, 5000, True])
def test_gpus_per_node_must_be_in_range(n):
    with pytest.raises(ConfigError, match="--gpus-per-node: must be a whole number from 0 to 4096"):
        Inventory.uniform(n)
    with pytest.raises(ConfigError, match=r"inventory.nodes\[0\].gpus: "):
        Inventory.from_data({"nodes": [{"node_ranks": 0, "gpus": n}]})


# -- output and import hygiene -------------------------------------------------------------------
def test_table_lists_every_process(host, seed18, inv18):
    text = render_table(plan_placement(seed18, inv18, hardware=host))
    lines = text.splitlines()
    header = next(line for line in lines if "component" in line)
    for col in (
        "rank",
        "node rank",
        "group",
        "hardware type",
        "hardware ranks",
        "visible GPUs",
        "interpreter",
        "env",
    ):
        assert col in header
    assert sum(1 for line in lines if line.strip().startswith("agent ")) == 400
    assert "agent: 400 processes on nodes 0-3" in text
    assert any("Franka" in line and " 17 " in line for line in lines)


def test_planner_imports_no_ray():
    code = (
        "import sys; import rlinf_scheduler.placement, rlinf_scheduler.cli, rlinf_scheduler.plugin;"
        "bad = [m for m in ('ray', 'torch') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr

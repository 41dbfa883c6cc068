"""The ``cluster`` section: every rule of the seeds' YAML, with a passing and a failing case.

Hardware types come from a real :class:`PluginHost` built by ``load_plugins`` with a test plugin
registered in-process: a stand-in "Franka" type (robot_ip, camera_serials), since the real
rlinf-hw-franka is developed separately and no robot exists here.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlinf_core import HardwareConfig, HardwarePlugin, HardwareResource, hookimpl, load_plugins
from rlinf_core.cluster import ClusterConfig, resolve_cluster, resolve_cluster_partial
from rlinf_core.errors import ConfigError


class FrankaTestConfig(HardwareConfig):
    robot_ip: str
    camera_serials: list[str] = []


class FrankaTest(HardwarePlugin):
    """Stand-in for rlinf-hw-franka's type: same name and config shape; never contacts a robot."""

    PLUGIN_NAME = "Franka"
    config_model = FrankaTestConfig

    @classmethod
    def validate(cls, resource, *, timeout=5.0):
        raise AssertionError("planning must never contact hardware")


class GripperConfig(HardwareConfig):
    port: int


class Gripper(HardwarePlugin):
    """A second type, to check that (node, type) pairs are per type."""

    PLUGIN_NAME = "Gripper"
    config_model = GripperConfig


class _TestHardware:
    @hookimpl
    def rlinf_register_hardware(self):
        return [FrankaTest, Gripper]


@pytest.fixture(scope="module")
def host():
    h = load_plugins(entry_points=[], extra=[("test-hw", _TestHardware())])
    assert not h.failures
    return h


SEED = {
    "num_nodes": 18,
    "component_placement": {
        "actor": {"node_group": "a800", "placement": "0-63"},
        "rollout": {"node_group": 4090, "placement": "0-63"},
        "env": {"node_group": "franka", "placement": "0-1"},
        "agent": {"node_group": "node", "placement": "0-1:0-199,2-3:200-399"},
    },
    "node_groups": [
        {
            "label": "a800",
            "node_ranks": "0-7",
            "env_configs": [
                {
                    "node_ranks": "0-7",
                    "python_interpreter_path": "/opt/venv/openpi/bin/python3",
                    "env_vars": [{"GLOO_SOCKET_IFNAME": "eth0"}],
                }
            ],
        },
        {
            "label": 4090,
            "node_ranks": "8-15",
            "env_configs": [{"node_ranks": "8-15", "env_vars": [{"GLOO_SOCKET_IFNAME": "eth1"}]}],
        },
        {
            "label": "franka",
            "node_ranks": "16-17",
            "hardware": {
                "type": "Franka",
                "configs": [
                    {
                        "robot_ip": "10.10.10.1",
                        "node_rank": 16,
                        "camera_serials": ["322142001230", "322142001231"],
                    },
                    {
                        "robot_ip": "10.10.10.2",
                        "node_rank": 17,
                        "camera_serials": ["322142001232", "322142001233"],
                    },
                ],
            },
        },
    ],
}


def seed():
    return copy.deepcopy(SEED)


def problems_of(raw, host, **kw):
    with pytest.raises(ConfigError) as info:
        resolve_cluster(raw, host, **kw)
    return [str(p) for p in info.value.problems]


def test_seed_example_resolves(host):
    rc = resolve_cluster(seed(), host)
    assert rc.num_nodes == 18
    assert list(rc.groups) == ["cluster", "node", "a800", "4090", "franka"]
    a800 = rc.groups["a800"]
    assert a800.node_ranks == tuple(range(8))
    assert a800.env_for(3).python == "/opt/venv/openpi/bin/python3"
    assert dict(a800.env_for(3).env) == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert dict(rc.groups["4090"].env_for(8).env) == {"GLOO_SOCKET_IFNAME": "eth1"}
    franka = rc.groups["franka"]
    assert franka.hardware_type == "Franka" and franka.hardware_plugin is FrankaTest
    assert [(h.node_rank, h.local_rank, h.config.robot_ip) for h in franka.hardware] == [
        (16, 0, "10.10.10.1"),
        (17, 0, "10.10.10.2"),
    ]
    assert all(isinstance(h, HardwareResource) for h in franka.hardware)
    assert [c.names for c in rc.components] == [("actor",), ("rollout",), ("env",), ("agent",)]
    assert rc.components[1].node_groups == ("4090",)
    assert isinstance(rc.config, ClusterConfig)
    assert rc.groups["cluster"].reserved and rc.groups["node"].node_ranks == tuple(range(18))


def test_a_cluster_config_model_is_accepted_too(host):
    model = ClusterConfig.model_validate(seed())
    assert resolve_cluster(model, host).groups["franka"].hardware


def test_seed_cloud_edge_resolves_without_loading_plugins():
    raw = {
        "num_nodes": 2,
        "node_groups": [{"label": "cloud", "node_ranks": 0}, {"label": "edge", "node_ranks": 1}],
        "component_placement": {
            "actor": {"node_group": "cloud", "placement": "0-3"},
            "rollout": {"node_group": "edge", "placement": "0-0"},
            "env": {"node_group": "edge", "placement": "0-0"},
        },
    }
    rc = resolve_cluster(raw, hardware={})  # no group names hardware: the registry is never needed
    assert rc.groups["edge"].node_ranks == (1,)


# -- num_nodes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -3, "18", True, 2.0, None])
def test_num_nodes_must_be_a_positive_integer(host, bad):
    raw = {"num_nodes": bad}
    assert problems_of(raw, host) == [f"cluster.num_nodes: must be a positive integer (got {bad!r})"]


def test_num_nodes_has_a_sane_upper_bound(host):
    assert problems_of({"num_nodes": 10**12}, host) == [
        "cluster.num_nodes: must be at most 1000000 (got 1000000000000)"
    ]


def test_num_nodes_is_required(host):
    assert problems_of({}, host) == ["cluster.num_nodes: required: the total number of nodes in the cluster"]


def test_unknown_top_level_key_and_non_mapping(host):
    assert any(
        "cluster.num_node: unknown key" in p for p in problems_of({"num_nodes": 1, "num_node": 2}, host)
    )
    assert problems_of([1], host)[0].startswith("cluster: expected a mapping")


# -- node groups ---------------------------------------------------------------------------------
@pytest.mark.parametrize("label", ["cluster", "node"])
def test_reserved_labels_are_rejected(host, label):
    raw = {"num_nodes": 2, "node_groups": [{"label": label, "node_ranks": 0}]}
    (msg,) = problems_of(raw, host)
    assert msg.startswith(f"cluster.node_groups[0].label: {label!r} is reserved")


def test_labels_are_unique_and_case_sensitive(host):
    ok = {
        "num_nodes": 2,
        "node_groups": [{"label": "gpu", "node_ranks": 0}, {"label": "GPU", "node_ranks": 1}],
    }
    assert set(resolve_cluster(ok, host).groups) >= {"gpu", "GPU"}
    bad = {
        "num_nodes": 2,
        "node_groups": [{"label": "gpu", "node_ranks": 0}, {"label": "gpu", "node_ranks": 1}],
    }
    (msg,) = problems_of(bad, host)
    assert msg.startswith("cluster.node_groups[1].label: label 'gpu' is already used by node_groups[0]")


@pytest.mark.parametrize("label", ["", "a,b", " pad"])
def test_label_text_is_checked(host, label):
    raw = {"num_nodes": 2, "node_groups": [{"label": label, "node_ranks": 0}]}
    assert problems_of(raw, host)[0].startswith("cluster.node_groups[0].label: ")


def test_node_ranks_out_of_range_message_matches_the_issue(host):
    raw = seed()
    raw["node_groups"][1]["node_ranks"] = "8-15,19"
    raw["node_groups"][1]["env_configs"] = []
    assert problems_of(raw, host) == ["cluster.node_groups[1].node_ranks: rank 19 is outside 0..17"]


@pytest.mark.parametrize(
    ("ranks", "expected"), [(3, (3,)), ("0-1,3", (0, 1, 3)), ([0, "2-3"], (0, 2, 3)), ("all", (0, 1, 2, 3))]
)
def test_node_ranks_forms(host, ranks, expected):
    rc = resolve_cluster({"num_nodes": 4, "node_groups": [{"label": "g", "node_ranks": ranks}]}, host)
    assert rc.groups["g"].node_ranks == expected


def test_node_group_structure_errors_name_their_path(host):
    raw = {"num_nodes": 2, "node_groups": [{"label": "g", "node_ranks": 0, "hardwar": {}}, {"node_ranks": 1}]}
    msgs = problems_of(raw, host)
    assert (
        "cluster.node_groups[0].hardwar: unknown key (check its spelling; it is not a setting here)" in msgs
    )
    assert "cluster.node_groups[1].label: Field required" in msgs
    assert problems_of({"num_nodes": 1, "node_groups": {"a": 1}}, host) == [
        "cluster.node_groups: expected a list of node groups, got dict"
    ]


# -- env configs ---------------------------------------------------------------------------------
def _group_with_envs(*env_configs, ranks="0-3"):
    return {
        "num_nodes": 4,
        "node_groups": [{"label": "g", "node_ranks": ranks, "env_configs": list(env_configs)}],
    }


def test_env_vars_forms_and_per_node_uniqueness(host):
    raw = _group_with_envs(
        {
            "node_ranks": "0-1",
            "env_vars": [{"A": "1"}, {"B": 2}],
            "python_interpreter_path": "/venv/bin/python",
        },
        {
            "node_ranks": "2-3",
            "env_vars": {"A": "other", "C": True},
        },  # a plain mapping; A again on other nodes
    )
    g = resolve_cluster(raw, host).groups["g"]
    assert dict(g.env_for(0).env) == {"A": "1", "B": "2"} and g.env_for(1).python == "/venv/bin/python"
    assert dict(g.env_for(2).env) == {"A": "other", "C": "true"} and g.env_for(3).python is None


def test_nodes_without_env_config_get_an_empty_env(host):
    g = resolve_cluster(_group_with_envs({"node_ranks": 0, "env_vars": [{"A": "1"}]}), host).groups["g"]
    assert dict(g.env_for(1).env) == {} and g.env_for(1).python is None


def test_env_key_twice_for_the_same_nodes(host):
    raw = _group_with_envs({"node_ranks": "0-1", "env_vars": [{"A": "1"}, {"B": "2"}, {"A": "3"}]})
    (msg,) = problems_of(raw, host)
    assert msg.startswith("cluster.node_groups[0].env_configs[0].env_vars: env var set more than once")
    assert "A (entries 0 and 2)" in msg


def test_env_vars_entry_with_two_keys(host):
    (msg,) = problems_of(_group_with_envs({"node_ranks": 0, "env_vars": [{"A": "1", "B": "2"}]}), host)
    assert "exactly one key" in msg and msg.startswith("cluster.node_groups[0].env_configs[0].env_vars")


@pytest.mark.parametrize("env", [[{"A=B": "1"}], [{"": "1"}], [{"A": None}], [{"A": [1]}], "A=1"])
def test_env_vars_bad_names_and_values(host, env):
    (msg,) = problems_of(_group_with_envs({"node_ranks": 0, "env_vars": env}), host)
    assert msg.startswith("cluster.node_groups[0].env_configs[0].env_vars")


def test_env_config_must_be_a_subset_of_its_group(host):
    (msg,) = problems_of(_group_with_envs({"node_ranks": "2-3"}, ranks="0-2"), host)
    assert msg == (
        "cluster.node_groups[0].env_configs[0].node_ranks: node ranks 3 are not in the group's node_ranks "
        "(0-2); an env config covers a subset of its group"
    )


def test_env_configs_of_a_group_must_not_overlap(host):
    (msg,) = problems_of(_group_with_envs({"node_ranks": "0-2"}, {"node_ranks": "2-3"}), host)
    assert msg.startswith("cluster.node_groups[0].env_configs[1].node_ranks: node ranks 2 are also covered")


def test_blank_interpreter_is_rejected(host):
    (msg,) = problems_of(_group_with_envs({"node_ranks": 0, "python_interpreter_path": " "}), host)
    assert msg.startswith("cluster.node_groups[0].env_configs[0].python_interpreter_path: must not be blank")


# -- hardware ------------------------------------------------------------------------------------
def test_hardware_type_is_case_insensitive_and_kept_as_written(host):
    raw = seed()
    raw["node_groups"][2]["hardware"]["type"] = "franka"
    g = resolve_cluster(raw, host).groups["franka"]
    assert g.hardware_type == "franka" and g.hardware_plugin is FrankaTest


def test_unknown_hardware_type_lists_installed_types_and_their_package(host):
    raw = seed()
    raw["node_groups"][2]["hardware"]["type"] = "Frankie"
    (msg,) = problems_of(raw, host)
    assert msg.startswith(
        "cluster.node_groups[2].hardware.type: unknown hardware type 'Frankie'; installed: "
    )
    assert "Franka, Gripper" in msg and "Franka from (in-process)" in msg


def test_unknown_known_type_says_which_package_provides_it():
    empty = load_plugins(entry_points=[], extra=[])
    (msg,) = problems_of(seed(), empty)
    assert "unknown hardware type 'Franka'; installed: none" in msg
    assert "provided by rlinf-hw-franka: pip install rlinf-hw-franka" in msg


def test_hardware_configs_are_validated_by_the_plugin_model(host):
    raw = seed()
    configs = raw["node_groups"][2]["hardware"]["configs"]
    del configs[0]["robot_ip"]
    configs[1]["robot_ipp"] = "x"
    msgs = problems_of(raw, host)
    assert "cluster.node_groups[2].hardware.configs[0].robot_ip: Field required" in msgs
    assert any(
        m.startswith("cluster.node_groups[2].hardware.configs[1].robot_ipp: unknown key") for m in msgs
    )


def test_hardware_config_needs_a_node_rank_of_the_group(host):
    raw = seed()
    configs = raw["node_groups"][2]["hardware"]["configs"]
    del configs[0]["node_rank"]
    configs[1]["node_rank"] = 3
    msgs = problems_of(raw, host)
    assert "cluster.node_groups[2].hardware.configs[0].node_rank: Field required" in msgs
    assert (
        "cluster.node_groups[2].hardware.configs[1].node_rank: node 3 is not in this group's node_ranks (16-17)"
        in msgs
    )


def test_duplicate_hardware_configs(host):
    raw = seed()
    configs = raw["node_groups"][2]["hardware"]["configs"]
    configs.append(copy.deepcopy(configs[0]))
    assert problems_of(raw, host) == [
        "cluster.node_groups[2].hardware.configs[2]: duplicate of configs[0]; each device is listed once"
    ]


def test_hardware_needs_at_least_one_config_and_a_type(host):
    raw = seed()
    raw["node_groups"][2]["hardware"] = {"type": "Franka", "configs": []}
    assert problems_of(raw, host)[0].startswith(
        "cluster.node_groups[2].hardware.configs: List should have at least 1"
    )
    raw["node_groups"][2]["hardware"] = {"type": " ", "configs": [{"node_rank": 16}]}
    assert problems_of(raw, host)[0].startswith("cluster.node_groups[2].hardware.type: ")


def test_hardware_ranks_are_in_node_order_then_config_order(host):
    raw = seed()
    configs = raw["node_groups"][2]["hardware"]["configs"]
    configs.reverse()
    configs.append({"robot_ip": "10.10.10.3", "node_rank": 16})
    hw = resolve_cluster(raw, host).groups["franka"].hardware
    assert [(h.node_rank, h.local_rank, h.config.robot_ip) for h in hw] == [
        (16, 0, "10.10.10.1"),
        (16, 1, "10.10.10.3"),
        (17, 0, "10.10.10.2"),
    ]


def test_a_node_and_hardware_type_belong_to_one_group(host):
    raw = seed()
    raw["node_groups"].append(
        {
            "label": "franka2",
            "node_ranks": "17",
            "hardware": {"type": "FRANKA", "configs": [{"robot_ip": "x", "node_rank": 17}]},
        }
    )
    (msg,) = problems_of(raw, host)
    assert msg.startswith(
        "cluster.node_groups[3].node_ranks: nodes 17 already have hardware type 'FRANKA' through group 'franka'"
    )
    # another type on the same node is fine
    raw["node_groups"][3]["hardware"] = {"type": "Gripper", "configs": [{"port": 1, "node_rank": 17}]}
    assert resolve_cluster(raw, host).groups["franka2"].hardware[0].type == "Gripper"


# -- component placement ------------------------------------------------------------------------
def test_placement_string_value_uses_the_cluster_group(host):
    rc = resolve_cluster({"num_nodes": 1, "component_placement": {"actor": "0-3", "ref": 0}}, host)
    assert [(c.names, c.node_groups, c.placement) for c in rc.components] == [
        (("actor",), ("cluster",), "0-3"),
        (("ref",), ("cluster",), "0"),
    ]
    assert rc.components[0].path == "cluster.component_placement.actor"


def test_several_components_share_one_key(host):
    rc = resolve_cluster({"num_nodes": 1, "component_placement": {"actor, rollout,ref": "all"}}, host)
    assert rc.components[0].names == ("actor", "rollout", "ref")


@pytest.mark.parametrize("groups", ["a800,4090", ["a800", 4090], "a800 , 4090"])
def test_node_group_lists(host, groups):
    raw = seed()
    raw["component_placement"]["actor"]["node_group"] = groups
    assert resolve_cluster(raw, host).components[0].node_groups == ("a800", "4090")


def test_component_placed_twice(host):
    raw = {"num_nodes": 1, "component_placement": {"actor,rollout": "0", "actor": "0", "env,env": "0"}}
    msgs = problems_of(raw, host)
    assert (
        "cluster.component_placement.actor: component 'actor' is placed twice (also by 'actor,rollout'); each component has one placement"
        in msgs
    )
    assert any("component 'env' is placed twice (twice in this key)" in m for m in msgs)


def test_unknown_node_group_lists_the_defined_ones(host):
    raw = seed()
    raw["component_placement"]["actor"]["node_group"] = "A800"
    (msg,) = problems_of(raw, host)
    assert msg.startswith(
        "cluster.component_placement.actor.node_group: unknown node group 'A800' (labels are case-sensitive: did you mean 'a800'?)"
    )
    assert "defined: a800, 4090, franka" in msg


@pytest.mark.parametrize(
    ("value", "path_fragment"),
    [
        ({"node_group": "a800"}, "cluster.component_placement.actor.placement: Field required"),
        (
            {"node_group": "a800", "placement": "0-3", "x": 1},
            "cluster.component_placement.actor.x: unknown key",
        ),
        ({"node_group": "a800,a800", "placement": "0"}, "cluster.component_placement.actor.node_group: "),
        ({"node_group": "", "placement": "0"}, "cluster.component_placement.actor.node_group: "),
        (
            {"node_group": "a800", "placement": "0-3:x"},
            "cluster.component_placement.actor.placement: part '0-3:x'",
        ),
        ("3-1", "cluster.component_placement.actor: part '3-1': resource range 3-1 is descending"),
        ([1, 2], "cluster.component_placement.actor: "),
    ],
)
def test_component_placement_value_errors(host, value, path_fragment):
    raw = seed()
    raw["component_placement"]["actor"] = value
    msgs = problems_of(raw, host)
    assert any(m.startswith(path_fragment) for m in msgs), msgs


def test_empty_component_name(host):
    (msg,) = problems_of({"num_nodes": 1, "component_placement": {"actor,": "0"}}, host)
    assert msg.startswith("cluster.component_placement.actor,: empty component name")


def test_every_problem_is_reported_at_once(host):
    raw = seed()
    raw["num_nodes"] = 18
    raw["node_groups"][0]["label"] = "node"  # reserved
    raw["node_groups"][1]["node_ranks"] = "8-15,19"  # out of range
    raw["node_groups"][2]["hardware"]["configs"][0]["node_rank"] = 1  # not in group
    raw["component_placement"]["actor"]["node_group"] = "nope"  # unknown
    raw["component_placement"]["rollout"]["placement"] = "x"  # bad syntax
    raw["component_placement"]["env, agent"] = "0"  # placed twice
    msgs = problems_of(raw, host)
    assert len(msgs) >= 6, msgs
    assert [m.split(":")[0] for m in msgs[:3]] == [
        "cluster.node_groups[0].label",
        "cluster.node_groups[1].node_ranks",
        "cluster.node_groups[2].hardware.configs[0].node_rank",
    ]


def test_a_broken_group_does_not_cascade_into_unknown_group_errors(host):
    raw = seed()
    raw["node_groups"][0]["node_ranks"] = "0-99"
    msgs = problems_of(raw, host)
    assert len(msgs) == 1 and "node_groups[0].node_ranks" in msgs[0]


def test_partial_resolution_keeps_the_sound_groups(host):
    raw = seed()
    raw["node_groups"][1]["env_configs"][0]["node_ranks"] = "7-15"  # 7 is not in group 4090
    resolved, problems = resolve_cluster_partial(raw, host)
    assert [str(p) for p in problems] == [
        "cluster.node_groups[1].env_configs[0].node_ranks: node ranks 7 are not in the group's node_ranks "
        "(8-15); an env config covers a subset of its group"
    ]
    assert set(resolved.groups) == {"cluster", "node", "a800", "franka"} and resolved.config is None
    assert [c.names[0] for c in resolved.components] == ["actor", "rollout", "env", "agent"]
    good, none = resolve_cluster_partial(seed(), host)
    assert none == [] and isinstance(good.config, ClusterConfig)


def test_planning_never_calls_hardware_validate(host):
    # FrankaTest.validate raises; resolving must not call it
    assert resolve_cluster(seed(), host).groups["franka"].hardware


def test_a_prefix_can_be_given(host):
    assert problems_of({"num_nodes": 0}, host, prefix="run.cluster") == [
        "run.cluster.num_nodes: must be a positive integer (got 0)"
    ]


_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 30), st.text(alphabet="0123456789-,:al abcnodeFrk", max_size=8)
)
_keys = st.sampled_from(
    [
        "num_nodes",
        "node_groups",
        "component_placement",
        "label",
        "node_ranks",
        "env_configs",
        "hardware",
        "type",
        "configs",
        "node_rank",
        "robot_ip",
        "env_vars",
        "placement",
        "node_group",
        "actor",
        "x",
    ]
)
_values = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.dictionaries(_keys, _values, max_size=4), _values))
def test_random_invalid_input_raises_only_config_error(host, raw):
    try:
        resolve_cluster(raw, host)
    except ConfigError as err:
        assert err.problems
        assert all(p.path.startswith("cluster") for p in err.problems)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_random_mutations_of_the_seed_raise_only_config_error(host, data):
    raw = seed()
    target = data.draw(
        st.sampled_from(["num_nodes", "group", "env", "hardware", "config", "placement", "node_group"])
    )
    value = data.draw(_values)
    if target == "num_nodes":
        raw["num_nodes"] = value
    elif target == "group":
        raw["node_groups"][data.draw(st.integers(0, 2))][data.draw(_keys)] = value
    elif target == "env":
        raw["node_groups"][0]["env_configs"][0][data.draw(_keys)] = value
    elif target == "hardware":
        raw["node_groups"][2]["hardware"][data.draw(_keys)] = value
    elif target == "config":
        raw["node_groups"][2]["hardware"]["configs"][0][data.draw(_keys)] = value
    elif target == "placement":
        raw["component_placement"]["actor"]["placement"] = value
    else:
        raw["component_placement"]["actor"]["node_group"] = value
    try:
        resolve_cluster(raw, host)
    except ConfigError as err:
        assert err.problems

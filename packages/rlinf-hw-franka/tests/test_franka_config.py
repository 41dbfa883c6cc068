"""The Franka config model, enumeration (hardware ranks) and the environment-variable fallback."""

from __future__ import annotations

import pytest

from rlinf_core.config import load_yaml
from rlinf_core.errors import ConfigError
from rlinf_core.plugins import load_plugins
from rlinf_hw_franka.config import FrankaConfig, robot_ip_from_env
from rlinf_hw_franka.hardware import Franka


def parse(raw, path="cluster.node_groups[2].hardware.configs[0]"):
    return Franka.parse_config(raw, path)


def test_fields_and_defaults() -> None:
    cfg = parse({"node_rank": 16, "robot_ip": "10.10.10.1", "camera_serials": ["322142001230"]})
    assert cfg.robot_ip == "10.10.10.1"
    assert cfg.cameras == "realsense"  # serials given, no camera_type
    assert cfg.gripper_type == "franka"
    assert cfg.control_hz == 10.0
    assert cfg.controller_node == 16
    assert not cfg.disable_validate
    cfg = parse({"node_rank": 1, "robot_ip": "::1", "camera_type": "None", "gripper_type": "NONE"})
    assert (cfg.cameras, cfg.gripper_type, cfg.robot_ip) == ("none", "none", "::1")
    assert parse({"node_rank": 0, "controller_node_rank": 3}).controller_node == 3


@pytest.mark.parametrize(
    ("raw", "path", "fragment"),
    [
        ({"node_rank": 0, "robot_ip": "10.10.10.300"}, ".robot_ip", "IPv4 or IPv6 address"),
        ({"node_rank": 0, "robot_ip": "robot.lab"}, ".robot_ip", "not a hostname"),
        ({"node_rank": 0, "camera_serials": [322142001230]}, ".camera_serials", 'write "322142001230"'),
        ({"node_rank": 0, "camera_serials": ["a", "a"]}, ".camera_serials", "twice"),
        ({"node_rank": 0, "camera_type": "zed"}, ".camera_type", "'realsense' or 'none'"),
        ({"node_rank": 0, "gripper_type": "robotiq"}, ".gripper_type", "'franka' or 'none'"),
        ({"node_rank": 0, "control_hz": 0}, ".control_hz", "greater than 0"),
        ({"node_rank": -1}, ".node_rank", "greater than or equal to 0"),
        ({"robot_ip": "10.0.0.1"}, ".node_rank", "required"),
        ({"node_rank": 0, "robot_ipp": "10.0.0.1"}, ".robot_ipp", "unknown key"),
        ({"node_rank": 0, "camera_type": "none", "camera_serials": ["x"]}, "", "camera_type is 'none'"),
    ],
)
def test_invalid_entries_name_the_yaml_path(raw, path, fragment) -> None:
    with pytest.raises(ConfigError) as info:
        parse(raw)
    problem = info.value.problems[0]
    assert problem.path == "cluster.node_groups[2].hardware.configs[0]" + path
    assert fragment in problem.message


def test_enumerate_orders_by_config_and_fills_from_env() -> None:
    configs = [
        parse({"node_rank": 5, "camera_serials": ["c"]}),
        parse({"node_rank": 4, "robot_ip": "10.0.0.9"}),
        parse({"node_rank": 5}),
    ]
    env = {"ROBOT_IP": "10.0.0.1, 10.0.0.2", "CAMERA_SERIALS": "s1|s2,s3"}
    res = Franka.enumerate(5, configs, environ=env)
    assert [r.local_rank for r in res] == [0, 1]
    assert [r.info["robot_ip"] for r in res] == ["10.0.0.1", "10.0.0.2"]
    # an explicit field wins over the environment
    assert res[0].info["camera_serials"] == ["c"]
    assert res[1].info["camera_serials"] == ["s3"]
    assert res[1].info["camera_type"] == "realsense"
    assert res[0].info["node_rank"] == 5 and res[0].type == "Franka"
    assert [r.info["robot_ip"] for r in Franka.enumerate(4, configs, environ={})] == ["10.0.0.9"]
    assert Franka.enumerate(7, configs, environ=env) == []


def test_env_count_mismatch_is_a_clear_error() -> None:
    configs = [parse({"node_rank": 16}), parse({"node_rank": 16})]
    with pytest.raises(ConfigError) as info:
        Franka.enumerate(16, configs, environ={"ROBOT_IP": "10.0.0.1"})
    msg = str(info.value)
    assert "ROBOT_IP" in msg and "1 value(s)" in msg and "2 Franka robot(s)" in msg and "node 16" in msg
    with pytest.raises(ConfigError, match="CAMERA_SERIALS"):
        Franka.enumerate(16, configs, environ={"CAMERA_SERIALS": "a,b,c"})
    with pytest.raises(ConfigError, match=r"ROBOT_IP/CAMERA_SERIALS.*hostname"):
        Franka.enumerate(16, configs, environ={"ROBOT_IP": "a.b,10.0.0.2"})


def test_missing_ip_resolves_on_the_robot_node() -> None:
    # Planning (on the driver) does not need the address ...
    res = Franka.enumerate(16, [parse({"node_rank": 16})], environ={})
    assert res[0].info["robot_ip"] is None
    # ... the robot's node takes it from its ROBOT_IP, and says what to do if it is missing.
    assert robot_ip_from_env(1, 16, {"ROBOT_IP": "10.0.0.1,10.0.0.2"}) == "10.0.0.2"
    with pytest.raises(ConfigError, match=r"robot 0 on node 16 has no robot_ip.*export ROBOT_IP"):
        robot_ip_from_env(0, 16, {})
    checks = Franka.checks(res[0], timeout=0.1)
    assert checks[0].ok is False and "no robot_ip" in checks[0].detail


def test_seed_config_gives_each_robot_node_its_robot(examples_dir) -> None:
    """Placement: the env worker on robot rank r gets that robot's IP, cameras and controller."""
    data = load_yaml(examples_dir / "franka_heterogeneous_18node.yaml")
    host = load_plugins()
    assert host.hardware.get("franka") is Franka  # matched case-insensitively
    hw = data["cluster"]["node_groups"][2]["hardware"]
    configs = [Franka.parse_config(c) for c in hw["configs"]]
    ranks = [r for node in (16, 17) for r in Franka.enumerate(node, configs, environ={})]
    assert [(r.node_rank, r.local_rank) for r in ranks] == [(16, 0), (17, 0)]
    assert ranks[1].info == {
        "type": "Franka",
        "node_rank": 17,
        "robot_ip": "10.10.10.2",
        "camera_serials": ["322142001232", "322142001233"],
        "camera_type": "realsense",
        "gripper_type": "franka",
        "controller_node_rank": 17,
        "control_hz": 10.0,
        "local_rank": 0,
    }
    assert isinstance(ranks[0].config, FrankaConfig)

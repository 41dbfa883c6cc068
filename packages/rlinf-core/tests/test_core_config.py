"""Config helpers: YAML loading, overrides, and pydantic errors as YAML-path problems."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from rlinf_core import ConfigError, HardwareConfig, HardwarePlugin
from rlinf_core.config import apply_overrides, load_yaml, validate_model
from rlinf_core.errors import ConfigProblem, format_path, join_path


class Group(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str
    gpus: int = Field(ge=0)


class Cluster(BaseModel):
    model_config = ConfigDict(extra="forbid")
    num_nodes: int = Field(gt=0)
    mode: Literal["collocated", "disaggregated"] = "collocated"
    node_groups: list[Group] = []


def test_validation_errors_name_yaml_paths_values_and_valid_choices():
    with pytest.raises(ConfigError) as info:
        validate_model(
            Cluster,
            {
                "num_nodes": 0,
                "mode": "mixed",
                "node_groups": [{"label": "a", "gpus": 1}, {"label": "b", "gpus": -2, "typo": 1}],
            },
            prefix="cluster",
        )
    problems = {p.path: p.message for p in info.value.problems}
    assert problems["cluster.num_nodes"] == "Input should be greater than 0 (got 0)"
    assert (
        "'collocated' or 'disaggregated'" in problems["cluster.mode"]
        and "(got 'mixed')" in problems["cluster.mode"]
    )
    assert problems["cluster.node_groups[1].gpus"] == "Input should be greater than or equal to 0 (got -2)"
    assert problems["cluster.node_groups[1].typo"].startswith("unknown key")
    assert str(info.value).splitlines()[0].startswith("cluster.")
    assert info.value.exit_code == 2


def test_missing_field():
    with pytest.raises(ConfigError, match=r"^num_nodes: Field required$"):
        validate_model(Cluster, {})


def test_paths_helpers():
    assert format_path(["cluster", "node_groups", 1, "label"]) == "cluster.node_groups[1].label"
    assert join_path("a", "[0]") == "a[0]" and join_path("", "b") == "b" and join_path("a", "") == "a"
    err = ConfigError([ConfigProblem("x", "bad")]).prefixed("cluster")
    assert str(err) == "cluster.x: bad"


def test_load_yaml(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("cluster:\n  num_nodes: 2\n")
    assert load_yaml(good) == {"cluster": {"num_nodes": 2}}
    with pytest.raises(ConfigError, match="config file not found"):
        load_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster:\n  num_nodes: [1\n")
    with pytest.raises(ConfigError, match=r"invalid YAML at line \d+, column \d+"):
        load_yaml(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("- 1\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_yaml(scalar)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_yaml(empty) == {}


def test_overrides():
    data = {"runner": {"max_steps": 10}, "groups": [{"n": 1}, {"n": 2}]}
    out = apply_overrides(
        data, ["runner.max_steps=20", "runner.name=run a", "new.deep.key=[1, 2]", "groups.1.n=5"]
    )
    assert out["runner"] == {"max_steps": 20, "name": "run a"}
    assert out["new"] == {"deep": {"key": [1, 2]}}
    assert out["groups"][1]["n"] == 5
    assert data["runner"]["max_steps"] == 10  # the input is not modified
    for bad, message in [
        ("novalue", "not of the form"),
        ("groups.x.n=1", "is a list; use an index"),
        ("groups.7=1", "outside the list"),
        ("runner.max_steps.x=1", "not a mapping"),
        ("a=[1", "not valid YAML"),
    ]:
        with pytest.raises(ConfigError, match=message):
            apply_overrides(data, [bad])


def test_hardware_config_validation_paths():
    class ArmConfig(HardwareConfig):
        robot_ip: str

    class Arm(HardwarePlugin):
        PLUGIN_NAME = "Arm"
        config_model = ArmConfig

    path = "cluster.node_groups[2].hardware.configs[0]"
    with pytest.raises(ConfigError) as info:
        Arm.parse_config({"node_rank": -1}, path)
    assert {p.path for p in info.value.problems} == {f"{path}.node_rank", f"{path}.robot_ip"}
    with pytest.raises(ConfigError, match=r"configs\[0\]: expected a mapping of Arm settings, got list"):
        Arm.parse_config([1], path)
    cfgs = [Arm.parse_config({"node_rank": n, "robot_ip": ip}) for n, ip in [(1, "a"), (0, "b"), (1, "c")]]
    devices = Arm.enumerate(1, cfgs)
    assert [(d.local_rank, d.config.robot_ip) for d in devices] == [(0, "a"), (1, "c")]
    assert Arm.validate(devices[0]) is None

"""``rlinf cluster plan`` run as a user runs it: the real ``rlinf`` CLI in a subprocess.

Plugins are filtered with RLINF_LOAD_PLUGINS so other packages' plugins do not interfere. For the
18-node seed example a stand-in "Franka" hardware type is installed as a real distribution
(dist-info with an ``rlinf`` entry point in a temporary site folder), since rlinf-hw-franka is
developed separately; a second test uses the real one when it is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SEED18 = str(EXAMPLES / "cluster_heterogeneous_18node.yaml")
INV18 = str(EXAMPLES / "inventory_18node.yaml")
CLOUD_EDGE = str(EXAMPLES / "cluster_cloud_edge.yaml")
INV_CLOUD_EDGE = str(EXAMPLES / "inventory_cloud_edge.yaml")

FRANKA_PLUGIN = """
from rlinf_core import HardwareConfig, HardwarePlugin, hookimpl

class FrankaConfig(HardwareConfig):
    robot_ip: str
    camera_serials: list[str] = []

class Franka(HardwarePlugin):
    PLUGIN_NAME = "Franka"
    config_model = FrankaConfig

    @classmethod
    def validate(cls, resource, *, timeout=5.0):
        raise RuntimeError("planning must never contact hardware")

@hookimpl
def rlinf_register_hardware():
    return [Franka]
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    (root / "rlinf_test_franka_plugin.py").write_text(textwrap.dedent(FRANKA_PLUGIN))
    info = root / "rlinf_hw_testfranka-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlinf-hw-testfranka\nVersion: 9.9.9\n")
    (info / "entry_points.txt").write_text("[rlinf]\nhw-testfranka = rlinf_test_franka_plugin\n")
    return root


def rlinf(*args, site=None, plugins="scheduler", cwd=None):
    env = {**os.environ}
    env.pop("RLINF_DEBUG", None)
    env.pop("RLINF_DISABLE_PLUGINS", None)
    if plugins is None:
        env.pop("RLINF_LOAD_PLUGINS", None)
    else:
        env["RLINF_LOAD_PLUGINS"] = plugins
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "rlinf_core", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=cwd,
    )


def assert_clean_failure(res, code=2):
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    return [line for line in res.stderr.splitlines() if not line.startswith("warning: ")]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_cluster_group_lists_plan():
    res = rlinf("cluster", "--help")
    assert res.returncode == 0, res.stderr
    assert "plan" in res.stdout


def test_cloud_edge_table(tmp_path):
    res = rlinf("cluster", "plan", CLOUD_EDGE, "--inventory", INV_CLOUD_EDGE)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
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
    actor = [line.split() for line in lines if line.strip().startswith("actor ")]
    assert [row[:7] for row in actor] == [
        ["actor", str(i), "0", "cloud", "accelerator", str(i), str(i)] for i in range(4)
    ]
    edge = [line.split() for line in lines if line.strip().startswith(("rollout ", "env "))]
    assert [row[:7] for row in edge] == [
        ["rollout", "0", "1", "edge", "node", "0", "-"],
        ["env", "0", "1", "edge", "node", "0", "-"],
    ]


def test_cloud_edge_json_with_gpus_per_node():
    res = rlinf("cluster", "plan", CLOUD_EDGE, "--gpus-per-node", "4", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
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
    # with 4 GPUs on the edge node too, the edge group's resources are accelerators
    assert out["components"]["env"][0]["hardware_type"] == "accelerator"
    assert out["components"]["env"][0]["visible_accelerators"] == [0]


def test_seed_18_node_with_an_installed_franka_type(site):
    res = rlinf(
        "cluster",
        "plan",
        SEED18,
        "--inventory",
        INV18,
        "--json",
        site=site,
        plugins="scheduler,hw-testfranka",
    )
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr
    comps = json.loads(res.stdout)["components"]
    assert {k: len(v) for k, v in comps.items()} == {"actor": 64, "rollout": 64, "env": 2, "agent": 400}
    env1 = comps["env"][1]
    assert (env1["node_rank"], env1["hardware_type"], env1["hardware_ranks"]) == (17, "Franka", [1])
    assert env1["hardware"][0]["config"]["robot_ip"] == "10.10.10.2"
    assert comps["actor"][8]["python"] == "/opt/venv/openpi/bin/python3"
    assert [p["node_rank"] for p in comps["agent"]] == [0] * 100 + [1] * 100 + [2] * 100 + [3] * 100
    table = rlinf(
        "cluster", "plan", SEED18, "--inventory", INV18, site=site, plugins="scheduler,hw-testfranka"
    )
    assert table.returncode == 0 and "agent: 400 processes on nodes 0-3" in table.stdout


def test_seed_18_node_with_the_real_franka_plugin_if_installed():
    from rlinf_core import load_plugins

    host = load_plugins()
    try:
        present = "Franka" in host.hardware
    except Exception:
        present = False
    if not present:
        pytest.skip("no installed plugin provides hardware type 'Franka' (install rlinf-hw-franka)")
    res = rlinf("cluster", "plan", SEED18, "--inventory", INV18, "--json", plugins=None)
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["components"]["env"]) == 2


def test_unknown_hardware_type_lists_installed_types_and_their_package(site, tmp_path):
    text = Path(SEED18).read_text().replace("type: Franka", "type: Frank")
    cfg = write(tmp_path, "c.yaml", text)
    lines = assert_clean_failure(
        rlinf("cluster", "plan", cfg, "--inventory", INV18, site=site, plugins="scheduler,hw-testfranka")
    )
    assert len(lines) == 1
    assert lines[0].startswith(
        "cluster.node_groups[2].hardware.type: unknown hardware type 'Frank'; installed: Franka"
    )
    assert "Franka from rlinf-hw-testfranka 9.9.9" in lines[0]


def test_without_franka_the_error_says_what_to_install():
    lines = assert_clean_failure(rlinf("cluster", "plan", SEED18, "--inventory", INV18))
    assert lines == [
        "cluster.node_groups[2].hardware.type: unknown hardware type 'Franka'; installed: none. 'Franka' is "
        "provided by rlinf-hw-franka: pip install rlinf-hw-franka (or uv add rlinf-hw-franka)"
    ]


def test_every_problem_one_line_each_starting_with_its_path(tmp_path):
    cfg = write(
        tmp_path,
        "bad.yaml",
        """
        runner: {max_steps: 3}
        cluster:
          num_nodes: 18
          node_groups:
            - label: a800
              node_ranks: 0-7
            - label: 4090
              node_ranks: 8-15,19
            - label: node
              node_ranks: 16
          component_placement:
            actor: {node_group: a800, placement: "0-3:1-4"}
            rollout: {node_group: nope, placement: "0-3"}
        """,
    )
    lines = assert_clean_failure(rlinf("cluster", "plan", cfg, "--gpus-per-node", "8"))
    assert "cluster.node_groups[1].node_ranks: rank 19 is outside 0..17" in lines
    assert any(line.startswith("cluster.node_groups[2].label: 'node' is reserved") for line in lines)
    assert any(
        line.startswith("cluster.component_placement.rollout.node_group: unknown node group 'nope'")
        for line in lines
    )
    # the placement string of a component on a sound group is checked in the same run
    assert (
        "cluster.component_placement.actor.placement: part '0-3:1-4': process ranks must be contiguous and "
        "ascending from 0; this part must start at 0, not 1" in lines
    )
    assert len(lines) == 4, lines
    # once the others are fixed, only the placement string's problem is left
    text = (
        Path(cfg).read_text().replace(",19", "").replace("label: node", "label: cpu").replace("nope", "4090")
    )
    Path(cfg).write_text(text)
    lines = assert_clean_failure(rlinf("cluster", "plan", cfg, "--gpus-per-node", "8"))
    assert lines == [
        "cluster.component_placement.actor.placement: part '0-3:1-4': process ranks must be contiguous and "
        "ascending from 0; this part must start at 0, not 1"
    ]


def test_inventory_and_config_problems_are_reported_together(tmp_path):
    inv = write(tmp_path, "inv.yaml", "nodes:\n  - {node_ranks: 5, gpus: 4}\n")
    cfg = write(
        tmp_path, "c.yaml", "cluster:\n  num_nodes: 2\n  node_groups: [{label: node, node_ranks: 0}]\n"
    )
    lines = assert_clean_failure(rlinf("cluster", "plan", cfg, "--inventory", inv))
    assert lines[0].startswith("cluster.node_groups[0].label: 'node' is reserved")
    assert lines[1] == "inventory.nodes[0].node_ranks: node rank 5 is outside 0..1"


def test_bad_inventory(tmp_path):
    inv = write(
        tmp_path, "inv.yaml", "nodes:\n  - {node_ranks: 0-2, gpus: 4}\n  - {node_ranks: 2, gpus: -1}\n"
    )
    lines = assert_clean_failure(rlinf("cluster", "plan", CLOUD_EDGE, "--inventory", inv))
    assert "inventory.nodes[0].node_ranks: range 0-2: node rank 2 is outside 0..1" in lines
    assert "inventory.nodes[1].gpus: Input should be greater than or equal to 0 (got -1)" in lines


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--inventory", INV_CLOUD_EDGE, "--gpus-per-node", "2"], "not both"),
        (["--gpus-per-node", "-1"], "--gpus-per-node"),
    ],
)
def test_bad_options(args, fragment):
    lines = assert_clean_failure(rlinf("cluster", "plan", CLOUD_EDGE, *args))
    assert any(fragment in line for line in lines), lines


def test_missing_file_and_missing_section(tmp_path):
    lines = assert_clean_failure(rlinf("cluster", "plan", str(tmp_path / "nope.yaml")))
    assert lines == [f"config file not found: {tmp_path / 'nope.yaml'}"]
    cfg = write(tmp_path, "nocluster.yaml", "runner: {max_steps: 1}\n")
    lines = assert_clean_failure(rlinf("cluster", "plan", cfg))
    assert lines == [f"cluster: {cfg} has no `cluster` section (top-level keys: runner)"]
    cfg = write(tmp_path, "notmap.yaml", "cluster: [1, 2]\n")
    lines = assert_clean_failure(rlinf("cluster", "plan", cfg))
    assert lines == [
        "cluster: expected a mapping with num_nodes, node_groups and component_placement, got list"
    ]


@pytest.mark.parametrize("key", ["''", "' , '", "'actor,'", "',rollout'"])
def test_an_empty_component_name_is_a_config_error_not_a_crash(tmp_path, key):
    # a key without a name used to reach the planner and crash it (IndexError)
    cfg = write(
        tmp_path,
        "c.yaml",
        f"""
        cluster:
          num_nodes: 1
          component_placement:
            {key}: {{node_group: node, placement: "0"}}
            env: "0"
        """,
    )
    lines = assert_clean_failure(rlinf("cluster", "plan", cfg))
    assert len(lines) == 1, lines
    path, _, message = lines[0].partition(": ")
    assert path.startswith("cluster.component_placement") and message.startswith("empty component name in")
    assert "write names separated by commas" in message


def test_the_cluster_model_refuses_empty_component_names():
    from pydantic import ValidationError

    from rlinf_core.cluster import ClusterConfig

    with pytest.raises(ValidationError, match="empty component name"):
        ClusterConfig.model_validate({"num_nodes": 1, "component_placement": {"": "0"}})


def test_rlinf_only_cluster_keys_are_accepted_with_one_warning(tmp_path):
    """A cluster section written for RLinf (profiling, auto_scheduler...) plans, naming the keys
    it ignores once; a key neither rlinf nor RLinf has stays an error."""
    cfg = write(
        tmp_path,
        "rlinf.yaml",
        """\
        cluster:
          num_nodes: 1
          profiling: {enabled: true}
          auto_scheduler: false
          component_placement: {actor: {node_group: node, placement: "0"}}
        """,
    )
    res = rlinf("cluster", "plan", cfg)
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1
    assert "cluster.profiling" in warnings[0] and "cluster.auto_scheduler" in warnings[0]
    bad = write(tmp_path, "bad.yaml", Path(cfg).read_text().replace("profiling", "profilng"))
    lines = assert_clean_failure(rlinf("cluster", "plan", bad))
    assert any(line.startswith("cluster.profilng") for line in lines)


def test_the_ray_scheduler_plans_without_starting_anything() -> None:
    from rlinf_core.scheduler import PlacementPlan
    from rlinf_scheduler.runtime.scheduler import RayScheduler

    config = {
        "cluster": {
            "num_nodes": 2,
            "component_placement": {"actor": {"node_group": "gpu", "placement": "0-3"}},
            "node_groups": [{"label": "gpu", "node_ranks": "0-1"}],
        }
    }
    plan = RayScheduler.plan_placement(config, 2)  # --gpus-per-node 2
    assert isinstance(plan, PlacementPlan)
    assert [p.node_rank for p in plan["actor"]] == [0, 0, 1, 1]
    assert [p.visible_accelerators for p in plan["actor"]] == [(0,), (1,), (0,), (1,)]
    assert "actor" in plan.render() and plan.to_dict()["num_nodes"] == 2

"""``rlinf hw check``: config errors with YAML paths (exit 2), the check table, exit 1 on a failure.

Reachability is checked against real TCP listeners on loopback addresses (test_franka_sim.py
runs the same command against the franka-sim protocol simulator).
"""

from __future__ import annotations

import json
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlinf_core.cli import main

pytestmark = pytest.mark.xdist_group("loopback")  # fixed loopback addresses: see conftest.py


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def listener() -> Iterator[tuple[str, list[int]]]:
    """TCP listeners on 127.0.0.61:1337 and :1338, standing in for a control box's ports."""
    host = "127.0.0.61"
    socks = []
    for port in (1337, 1338):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(8)
        socks.append(s)
    yield host, [1337, 1338]
    for s in socks:
        s.close()


CONFIG = """
cluster:
  num_nodes: 3
  node_groups:
    - label: gpu
      node_ranks: 0
    - label: franka
      node_ranks: 1-2
      hardware:
        type: franka
        configs:
          - node_rank: 1
            robot_ip: "{ok_ip}"
            camera_type: none
          - node_rank: 1
            robot_ip: "127.0.0.77"
            gripper_type: none
          - node_rank: 2
            robot_ip: "{ok_ip}"
            gripper_type: none
"""


def test_config_errors_have_yaml_paths_and_exit_2(tmp_path, capsys) -> None:
    path = write(
        tmp_path,
        """
        cluster:
          node_groups:
            - label: a
              node_ranks: 0-1
            - label: b
              node_ranks: 0
            - label: franka
              node_ranks: 16-17
              hardware:
                type: Franka
                configs:
                  - node_rank: 16
                    robot_ip: "10.10.10.300"
                  - node_rank: 18
                    robot_ip: "10.10.10.2"
                    camera_serials: [322142001232]
            - label: other
              hardware:
                type: Kuka
                configs: [{node_rank: 0}]
        """,
    )
    code, out, err = run(["hw", "check", str(path)], capsys)
    assert code == 2, (out, err)
    assert "cluster.node_groups[2].hardware.configs[0].robot_ip: robot_ip must be an IPv4 or IPv6" in err
    assert "cluster.node_groups[2].hardware.configs[1].camera_serials" in err
    assert "cluster.node_groups[3].hardware.type: unknown hardware type 'Kuka'" in err
    assert "Traceback" not in err


def test_missing_file_and_bad_node_rank(tmp_path, capsys, monkeypatch) -> None:
    code, _, err = run(["hw", "check", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2 and "config file not found" in err
    path = write(tmp_path, CONFIG.format(ok_ip="127.0.0.61"))
    monkeypatch.setenv("RLINF_NODE_RANK", "one")
    code, _, err = run(["hw", "check", str(path)], capsys)
    assert code == 2 and "RLINF_NODE_RANK must be a non-negative integer, got 'one'" in err


def test_check_table_and_exit_status(tmp_path, capsys, monkeypatch, listener) -> None:
    host, _ = listener
    path = write(tmp_path, CONFIG.format(ok_ip=host))
    # node 2: its one robot answers -> exit 0
    monkeypatch.setenv("RLINF_NODE_RANK", "2")
    code, out, err = run(["hw", "check", str(path)], capsys)
    assert code == 0, (out, err)
    assert "all checks passed" in out and host in out
    # node 1 (the option wins over RLINF_NODE_RANK): robot 1 refuses -> exit 1, named in the table
    code, out, _ = run(["hw", "check", str(path), "--node-rank", "1", "--json", "--timeout", "1"], capsys)
    assert code == 1
    report = json.loads(out)
    rows = {(r["device"], r["check"]): r for r in report["checks"]}
    assert rows[(host, "robot")]["ok"] is True
    assert rows[(host, "gripper")]["ok"] is True
    assert rows[("127.0.0.77", "robot")]["ok"] is False
    assert "refused" in rows[("127.0.0.77", "robot")]["detail"]
    assert report["node_rank"] == 1 and report["ok"] is False
    code, out, _ = run(["hw", "check", str(path), "--node-rank", "1", "--timeout", "1"], capsys)
    assert code == 1 and "FAILED" in out and "1 check(s) failed" in out
    # a node without hardware
    code, out, _ = run(["hw", "check", str(path), "--node-rank", "0"], capsys)
    assert code == 0 and "no hardware" in out


def test_controller_node_checks_the_robot_and_camera_sdk_is_required(tmp_path, capsys, listener) -> None:
    host, _ = listener
    path = write(
        tmp_path,
        f"""
        cluster:
          node_groups:
            - label: franka
              node_ranks: 0-1
              hardware:
                type: Franka
                configs:
                  - node_rank: 1
                    controller_node_rank: 0
                    robot_ip: "{host}"
                    camera_serials: ["322142001230"]
        """,
    )
    code, out, _ = run(["hw", "check", str(path), "--node-rank", "0", "--json"], capsys)
    checks = {r["check"]: r for r in json.loads(out)["checks"]}
    assert code == 0 and checks["robot"]["ok"] is True and "camera sdk" not in checks
    # On the robot's own node: the robot is checked from node 0; the cameras here.
    # pyrealsense2 is not installed on development machines or in CI.
    try:
        import pyrealsense2  # noqa: F401

        pytest.skip("pyrealsense2 is installed here; this case checks the message when it is missing")
    except ImportError:
        pass
    code, out, _ = run(["hw", "check", str(path), "--node-rank", "1", "--json"], capsys)
    checks = {r["check"]: r for r in json.loads(out)["checks"]}
    assert code == 1
    assert checks["robot"]["ok"] is None and "controller node 0" in checks["robot"]["detail"]
    assert (
        checks["camera sdk"]["ok"] is False and "pip install pyrealsense2" in checks["camera sdk"]["detail"]
    )
    assert checks["camera 322142001230"]["ok"] is False


def test_validate_raises_hardware_error_naming_robot_and_node(listener) -> None:
    from rlinf_core.errors import HardwareError
    from rlinf_hw_franka.hardware import Franka

    host, _ = listener
    Franka.validate(Franka.resource_for({"node_rank": 3, "robot_ip": host}), timeout=1)
    bad = Franka.resource_for({"node_rank": 3, "robot_ip": "127.0.0.78", "gripper_type": "none"})
    with pytest.raises(HardwareError, match=r"Franka robot 0 on node 3 \(127\.0\.0\.78\): robot: connection"):
        Franka.validate(bad, timeout=1)
    Franka.validate(Franka.resource_for({"node_rank": 3, "robot_ip": "127.0.0.78", "disable_validate": True}))


def test_seed_examples_parse(examples_dir, capsys) -> None:
    for name in ("franka_heterogeneous_18node.yaml", "franka_real_2node.yaml"):
        code, out, err = run(["hw", "check", str(examples_dir / name), "--node-rank", "0", "--json"], capsys)
        assert code == 0, err
        assert json.loads(out)["checks"] == []

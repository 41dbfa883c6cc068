"""The real driver against franka-sim, a simulator of the Franka robot's network protocol.

franka-sim (PyPI) runs in its own environment created by uvx (it pins mujoco<3.3 and
numpy==1.26.4), bound to a loopback address and loaded with this package's Panda MJCF. franky
talks to it exactly as to a robot. These tests skip only when uv is missing or the package
registry is unreachable (and uv has no cached copy).
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from rlinf_core.errors import HardwareError
from rlinf_hw_franka.franka_sim import FrankaSimServer, FrankaSimUnavailable, prepare
from rlinf_hw_franka.hardware import Franka

pytestmark = pytest.mark.network

franky = pytest.importorskip("franky", reason="franky-control is installed by the [robot] extra")


@pytest.fixture(scope="module")
def franka_sim():
    try:
        prepare()
    except FrankaSimUnavailable as err:
        pytest.skip(str(err))
    server = FrankaSimServer("127.0.0.2", gripper=True)
    try:
        server.start()
    except FrankaSimUnavailable as err:
        server.close()
        pytest.skip(str(err))
    yield server
    server.close()


def test_franky_connects_reads_state_and_moves(franka_sim) -> None:
    robot = franky.Robot(franka_sim.host, realtime_config=franky.RealtimeConfig.Ignore)
    robot.relative_dynamics_factor = 0.3
    q = np.asarray(robot.current_joint_state.position)
    np.testing.assert_allclose(q, [0, 0, 0, -1.57, 0, 1.57, 0.785], atol=1e-3)  # franka-sim's initial pose
    target = [0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398]
    robot.move(franky.JointMotion(target))
    np.testing.assert_allclose(robot.current_joint_state.position, target, atol=5e-3)
    # franka-sim reports O_T_EE at link7 of this package's MJCF: 0.107 m above the flange.
    pose = robot.current_cartesian_state.pose.end_effector_pose
    np.testing.assert_allclose(pose.translation, [0.3069, 0.0, 0.5903 + 0.107], atol=5e-3)
    gripper = franky.Gripper(franka_sim.host)
    assert gripper.width == pytest.approx(gripper.width)  # answers
    del robot


def test_frankaenv_reaches_a_target_through_franky(franka_sim) -> None:
    from rlinf_hw_franka.env import FrankaEnv

    # What an env worker placed on this robot receives: its config entry's info.
    resource = Franka.enumerate(
        0, [Franka.parse_config({"node_rank": 0, "robot_ip": franka_sim.host})], environ={}
    )[0]
    env = FrankaEnv("franky", hardware=resource.info, control_hz=10)  # reset to the ready pose
    try:
        assert env.realtime and env.gripper
        obs, info = env.reset(options={"target": [0.45, 0.1, 0.6]})
        assert info["overruns"] == 0
        for _ in range(40):
            a = np.clip((obs["target_pos"] - obs["ee_pos"]) / 0.05, -1, 1)
            obs, reward, _, _, info = env.step(np.append(a, 1.0).astype(np.float32))
            if info["is_success"]:
                break
        assert info["is_success"], info
        assert reward > -0.03
        assert info["period_s"] > 0.05  # paced at 10 Hz, not free-running
        assert obs["gripper_width"][0] > 0.07
    finally:
        env.close()


def test_validate_and_hw_check_against_franka_sim(franka_sim, tmp_path, capsys) -> None:
    from rlinf_core.cli import main

    Franka.validate(Franka.resource_for({"node_rank": 0, "robot_ip": franka_sim.host}), timeout=2)
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text(
        textwrap.dedent(
            f"""
            cluster:
              num_nodes: 1
              node_groups:
                - label: franka
                  node_ranks: 0
                  hardware:
                    type: Franka
                    configs:
                      - node_rank: 0
                        robot_ip: "{franka_sim.host}"
                      - node_rank: 0
                        robot_ip: "127.0.0.79"
            """
        )
    )
    with pytest.raises(SystemExit) as info:
        main(["hw", "check", str(cfg), "--node-rank", "0", "--json", "--timeout", "2"])
    out = capsys.readouterr().out
    rows = json.loads(out)["checks"]
    assert info.value.code == 1
    assert [(r["device"], r["check"], r["ok"]) for r in rows] == [
        (franka_sim.host, "robot", True),
        (franka_sim.host, "gripper", True),
        ("127.0.0.79", "robot", False),
        ("127.0.0.79", "gripper", False),
    ]


def test_robot_errors_surface_as_exceptions() -> None:
    """A motion the robot aborts (a reflex) is a HardwareError naming the robot; reset recovers."""
    from rlinf_hw_franka.backends.franky_backend import FrankyBackend

    try:
        prepare()
    except FrankaSimUnavailable as err:
        pytest.skip(str(err))
    with FrankaSimServer("127.0.0.3", enforce_motion_limits=True) as sim:
        backend = FrankyBackend(sim.host, gripper=False, dynamics_factor=0.3)
        home = np.array([0, 0, 0, -1.57, 0, 1.57, 0.785])
        beyond = home.copy()
        beyond[3] = 0.3  # joint 4's range ends at -0.0698 rad
        with pytest.raises(
            HardwareError, match=r"Franka robot at 127\.0\.0\.3: .*(reflex|abort|limit)"
        ) as info:
            backend.reset(beyond)
        assert "error recovery" in str(info.value)
        backend.reset(home)  # automatic error recovery, then home
        np.testing.assert_allclose(
            backend.read().q, home, atol=0.02
        )  # joint impedance: a little friction error
        backend.close()


def test_connection_refused_is_a_hardware_error() -> None:
    from rlinf_hw_franka.backends.franky_backend import FrankyBackend

    with pytest.raises(HardwareError, match=r"Franka robot at 127\.0\.0\.81: cannot connect"):
        FrankyBackend("127.0.0.81", gripper=False)

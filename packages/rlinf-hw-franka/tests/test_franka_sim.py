"""The real driver against franka-sim, a simulator of the Franka robot's network protocol.

franka-sim (PyPI) runs in its own environment created by uvx (it pins mujoco<3.3 and
numpy==1.26.4), bound to a loopback address and loaded with this package's Panda MJCF. franky
talks to it exactly as to a robot. These tests skip only when uv is missing or the package
registry is unreachable (and uv has no cached copy).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rlinf_core.errors import HardwareError
from rlinf_hw_franka.cameras import Camera
from rlinf_hw_franka.franka_sim import FrankaSimServer, FrankaSimUnavailable, prepare
from rlinf_hw_franka.hardware import Franka

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.xdist_group("loopback")]

franky = pytest.importorskip("franky", reason="franky-control is installed by the [robot] extra")


def _require_franka_sim() -> None:
    """Skip when franka-sim's environment cannot be created (no uv, registry unreachable)."""
    try:
        prepare()
    except FrankaSimUnavailable as err:
        pytest.skip(str(err))


def _resource(host: str):
    """What an env worker placed on the robot at ``host`` receives: its config entry's resource."""
    return Franka.enumerate(0, [Franka.parse_config({"node_rank": 0, "robot_ip": host})], environ={})[0]


#: Niceness of the simulated robot and of this process's control loop while a test drives it. A
#: real arm's controller has its own computer and franky's loop runs under a realtime kernel; here
#: both share two busy cores. On a CI machine under load a step of FrankaEnv left the arm 0.53 m
#: from its target (franka-sim fell behind and the arm sagged) and a move was refused at a singular
#: pose. With six CPU-bound processes beside them, 2 of 3 runs of the reach test failed at the
#: default priority, 1 of 5 runs of three franky tests at -10, and none of 6 at -20.
ROBOT_NICE = -20


@contextlib.contextmanager
def _control_priority():
    """Raise this thread's priority (and that of the threads it starts: franky's control loop)
    where privileges allow, and restore it after."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, ROBOT_NICE)
    except OSError:
        pass  # not root: the default priority
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


@pytest.fixture
def franka_sim():
    """A franka-sim server per test, not per module: an idle server still steps its physics at
    1 kHz (about 40% of a core), and one left running beside the motion-fault tests' own servers
    starved franky's control loop on a 2-core CI machine until every retry of a move aborted."""
    _require_franka_sim()
    server = FrankaSimServer("127.0.0.2", gripper=True, nice=ROBOT_NICE)
    try:
        server.start()
    except FrankaSimUnavailable as err:
        server.close()
        pytest.skip(str(err))
    with _control_priority():
        yield server
    server.close()


def test_franky_connects_reads_state_and_moves(franka_sim) -> None:
    robot = franky.Robot(franka_sim.host, realtime_config=franky.RealtimeConfig.Ignore)
    try:
        robot.relative_dynamics_factor = 0.3
        q = np.asarray(robot.current_joint_state.position)
        np.testing.assert_allclose(
            q, [0, 0, 0, -1.57, 0, 1.57, 0.785], atol=1e-3
        )  # franka-sim's initial pose
        target = [0.0, -0.785398, 0.0, -2.356194, 0.0, 1.570796, 0.785398]
        robot.move(franky.JointMotion(target))
        # The motion ends when its last command is sent; the arm settles onto it a little later
        # (later still in wall time when a loaded machine slows franka-sim's 1 kHz loop).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if np.allclose(robot.current_joint_state.position, target, atol=5e-3):
                break
            time.sleep(0.05)
        np.testing.assert_allclose(robot.current_joint_state.position, target, atol=5e-3)
        # franka-sim reports O_T_EE at link7 of this package's MJCF: 0.107 m above the flange.
        pose = robot.current_cartesian_state.pose.end_effector_pose
        np.testing.assert_allclose(pose.translation, [0.3069, 0.0, 0.5903 + 0.107], atol=5e-3)
        gripper = franky.Gripper(franka_sim.host)
        assert gripper.width == pytest.approx(gripper.width)  # answers
    finally:
        del robot  # the robot serves one client at a time: release it even when an assertion failed


def test_frankaenv_reaches_a_target_through_franky(franka_sim) -> None:
    from rlinf_hw_franka.env import FrankaEnv

    resource = _resource(franka_sim.host)
    env = FrankaEnv("franky", hardware=resource.info, control_hz=10)  # reset to the ready pose
    try:
        assert env.realtime and env.gripper
        obs, info = env.reset(options={"target": [0.45, 0.1, 0.6]})
        assert info["overruns"] == 0
        for _ in range(100):  # 17 to 40 steps measured; a loaded machine slows franka-sim
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


class SyntheticCamera(Camera):
    """A stand-in for a RealSense camera (no camera exists on a development machine or in CI;
    this is the one simulated part of the test): frame ``k`` is a deterministic pattern."""

    def __init__(self, name: str, height: int, width: int) -> None:
        self.name, self.shape, self.reads, self.closed = name, (height, width, 3), 0, False

    def frame(self, k: int) -> np.ndarray:
        return ((np.arange(np.prod(self.shape)).reshape(self.shape) + 7 * k) % 256).astype(np.uint8)

    def read(self) -> np.ndarray:
        self.reads += 1
        return self.frame(self.reads - 1)

    def close(self) -> None:
        self.closed = True


def test_frankaenv_vla_observations_through_franky(franka_sim) -> None:
    """The real-arm path emits the same observation dict as the twin's instruction task: the
    first camera as ``image``, the others as ``image_<name>`` (resized to ``image_size``),
    proprioception as ``state``, the instruction as a str."""
    from rlinf_hw_franka.env import FrankaEnv, resize_nearest

    main, side = SyntheticCamera("main", 32, 32), SyntheticCamera("side", 48, 64)
    resource = _resource(franka_sim.host)
    env = FrankaEnv(
        "franky",
        hardware=resource.info,
        cameras=[main, side],
        obs_mode="vla",
        image_size=(32, 32),
        instruction="reach the red cube",
    )
    try:
        space = env.observation_space
        assert set(space) == {"image", "image_side", "state", "instruction"}
        assert space["image"].shape == space["image_side"].shape == (32, 32, 3)
        assert space["state"].shape == (22,) and space["state"].dtype == np.float32  # 7+7+3+4+gripper
        obs, _ = env.reset()
        for k in range(3):
            assert space.contains(obs) and obs["instruction"] == "reach the red cube"
            np.testing.assert_array_equal(obs["image"], main.frame(k))
            np.testing.assert_array_equal(obs["image_side"], resize_nearest(side.frame(k), 32, 32))
            np.testing.assert_allclose(obs["state"][:7], env._state.q, atol=1e-6)
            np.testing.assert_allclose(obs["state"][14:17], env._state.ee_pos, atol=1e-6)
            obs, *_ = env.step(np.array([0.0, 0.2, 0.0, 1.0], dtype=np.float32))
    finally:
        env.close()
    assert main.closed and side.closed


def test_reset_while_the_last_step_is_still_moving(franka_sim) -> None:
    """An episode ends while its last Cartesian target is still being approached; the next reset
    (a joint motion, which franky will not start over a running Cartesian one) waits for it."""
    from rlinf_hw_franka.env import FrankaEnv

    resource = _resource(franka_sim.host)
    env = FrankaEnv("franky", hardware=resource.info, control_hz=20)
    try:
        for episode in range(2):
            obs, _ = env.reset(options={"target": [0.45, 0.1, 0.6]})
            np.testing.assert_allclose(obs["joint_pos"], env.home_q, atol=0.02, err_msg=f"episode {episode}")
            for _ in range(3):  # 5 cm per 50 ms step: faster than the arm follows at this dynamics factor
                obs, *_ = env.step(np.array([1.0, 0.0, -1.0, 1.0], dtype=np.float32))
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

    _require_franka_sim()
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
        # franka-sim reports the infeasible move as a velocity reflex (a real arm: a position-limit
        # reflex, which is never retried), so reset tried it home_attempts times before giving up.
        assert backend.home_retries == backend.home_attempts - 1
        assert f"failed {backend.home_attempts} times" in str(info.value)
        # automatic error recovery, then home; franky's control loop runs in this process, and on
        # a loaded 2-core machine it misses cycles, so several moves in a row can abort with an
        # acceleration-discontinuity reflex (CI saw 3 of 3): retries enough for that here
        backend.home_attempts = 10
        backend.reset(home)
        np.testing.assert_allclose(
            backend.read().q, home, atol=0.02
        )  # joint impedance: a little friction error
        backend.close()


# A client that resets its robot twice, announcing the second (the move home) on stdout.
_STALLED_CLIENT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from rlinf_hw_franka.backends.franky_backend import FrankyBackend

    home = np.array([0, 0, 0, -1.57, 0, 1.57, 0.785])
    away = home.copy()
    away[0], away[3] = 0.6, -2.0
    backend = FrankyBackend(sys.argv[1], gripper=False, dynamics_factor=0.3)
    backend.reset(away)
    retries_before = backend.home_retries
    print("moving home", flush=True)
    backend.reset(home)
    state = backend.read()
    print(json.dumps({"q": state.q.tolist(), "retries": backend.home_retries - retries_before}), flush=True)
    backend.close()
    """
)


def test_reset_retries_a_move_home_that_a_stalled_control_loop_aborted() -> None:
    """franky's 1 kHz control loop runs in the client's process. Stopping that process for 150 ms
    mid-motion (what a loaded machine without a realtime kernel does on a smaller scale) makes the
    robot abort the move with a velocity reflex; reset recovers and tries again, and arrives."""
    _require_franka_sim()
    with FrankaSimServer("127.0.0.5", enforce_motion_limits=True) as sim:
        client = subprocess.Popen(
            [sys.executable, "-c", _STALLED_CLIENT, sim.host],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert client.stdout is not None
            line = client.stdout.readline()  # bounded by the client's own motion timeouts
            assert line.strip() == "moving home", client.stderr.read() if client.stderr else ""
            time.sleep(0.4)  # the move home is under way (it takes about 2 s)
            os.kill(client.pid, signal.SIGSTOP)
            time.sleep(0.15)
            os.kill(client.pid, signal.SIGCONT)
            out, err = client.communicate(timeout=120)
        finally:
            client.kill()
            client.wait(timeout=10)
    assert client.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["retries"] >= 1
    np.testing.assert_allclose(result["q"], [0, 0, 0, -1.57, 0, 1.57, 0.785], atol=0.02)


def test_a_robot_busy_with_another_client_is_a_bounded_hardware_error() -> None:
    """A robot serves one client at a time and never answers a second one's handshake:
    connecting gives up after connect_timeout with an error that says why, instead of hanging."""
    from rlinf_hw_franka.backends.franky_backend import FrankyBackend

    _require_franka_sim()
    with FrankaSimServer("127.0.0.6") as sim:
        first = FrankyBackend(sim.host, gripper=False)
        try:
            t0 = time.monotonic()
            with pytest.raises(
                HardwareError,
                match=r"127\.0\.0\.6: cannot connect: no answer .* within 3s.*one client at a time",
            ):
                FrankyBackend(sim.host, gripper=False, connect_timeout=3)
            assert time.monotonic() - t0 < 30
        finally:
            first.close()


def test_connection_refused_is_a_hardware_error() -> None:
    from rlinf_hw_franka.backends.franky_backend import FrankyBackend

    with pytest.raises(HardwareError, match=r"Franka robot at 127\.0\.0\.81: cannot connect"):
        FrankyBackend("127.0.0.81", gripper=False)


def test_the_server_stops_when_started_with_sigint_ignored() -> None:
    """A shell's background job (``cmd &``) hands its children SIGINT ignored; the server still
    stops on stop()'s SIGINT at once, not at the SIGKILL 20 s later (every franka-sim test of a
    suite run in the background took 20 s more)."""
    _require_franka_sim()
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the children inherit it
    try:
        sim = FrankaSimServer("127.0.0.7")
        sim.start()
    finally:
        signal.signal(signal.SIGINT, before)
    try:
        t0 = time.monotonic()
        sim.stop(timeout=10)
        assert time.monotonic() - t0 < 5
    finally:
        sim.close()

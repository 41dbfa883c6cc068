"""Run ``franka-sim`` (PyPI), a simulator of the Franka robot's network protocol, as a subprocess.

franka-sim speaks libfranka's FCI protocol (TCP 1337 commands, UDP 1 kHz state; gripper on
1338) over a MuJoCo model, so franky, pylibfranka and :meth:`Franka.validate` talk to it exactly
as to a robot. It pins ``mujoco<3.3`` and ``numpy==1.26.4``, so it runs in an environment of its
own, created by ``uvx`` (``uv tool run``) from the package registry and cached by uv.

It loads this package's own Panda MJCF (written to a temporary directory and passed through
``FR3_MJCF``), so the protocol simulation and the MuJoCo twin of :class:`FrankaEnv` are the same
robot. The server binds one loopback address only (``127.0.0.1`` by default; any ``127.x.y.z``
works, which lets several servers run side by side: libfranka always uses port 1337).

Used by the tests and ``benchmarks/franka_control.py``; usable by hand::

    with FrankaSimServer() as sim:
        robot = franky.Robot(sim.host, realtime_config=franky.RealtimeConfig.Ignore)
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from rlinf_core.errors import HardwareError, WaitTimeout
from rlinf_hw_franka.mjcf import write_mjcf

__all__ = ["FRANKA_SIM_VERSION", "FrankaSimServer", "FrankaSimUnavailable", "uvx_command"]

#: The franka-sim release these tools are tested against.
FRANKA_SIM_VERSION = "1.1.7"
COMMAND_PORT = 1337
GRIPPER_PORT = 1338

# Runs inside franka-sim's own environment: the single-arm server bound to one address. It stops
# by itself when the process that started it is gone (killed without cleaning up).
_SERVER_SCRIPT = """
import os, signal, sys, threading, time
from franka_sim import FrankaSimServer
host, gripper, owner = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
# A shell's background job hands its children SIGINT ignored, and Python then never raises
# KeyboardInterrupt: stop() and the owner watch below would not stop the server.
signal.signal(signal.SIGINT, signal.default_int_handler)

def watch_owner():
    while True:
        time.sleep(0.5)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            os.kill(os.getpid(), signal.SIGINT)
            return

threading.Thread(target=watch_owner, daemon=True).start()
server = FrankaSimServer(host=host, enable_gripper=gripper)
print(f"franka-sim serving on {host}:1337 (gripper {'on' if gripper else 'off'})", flush=True)
try:
    server.start()
except KeyboardInterrupt:
    pass
finally:
    server.stop()
"""

# Output of uv that means the registry could not be reached (as opposed to a broken package).
_NETWORK_MARKERS = (
    "failed to fetch",
    "dns error",
    "error sending request",
    "connection refused",
    "network is unreachable",
    "timed out",
    "could not connect",
    "temporary failure in name resolution",
    "because there is no network",
    "offline",
)


class FrankaSimUnavailable(HardwareError):
    """franka-sim cannot be run here: no ``uvx``/``uv`` on PATH, or the package registry is
    unreachable and uv has no cached copy. Tests skip on this error and on nothing else."""


def uvx_command(version: str = FRANKA_SIM_VERSION) -> list[str]:
    """The command prefix that runs programs from franka-sim's isolated environment."""
    uvx = shutil.which("uvx")
    if uvx:
        return [uvx, "--from", f"franka-sim=={version}"]
    uv = shutil.which("uv")
    if uv:
        return [uv, "tool", "run", "--from", f"franka-sim=={version}"]
    raise FrankaSimUnavailable(
        "franka-sim runs in its own environment created by uv, but neither `uvx` nor `uv` is on PATH; "
        "install uv (pip install uv) to run the protocol simulator"
    )


def _looks_like_network_failure(text: str) -> bool:
    low = text.lower()
    return any(marker in low for marker in _NETWORK_MARKERS)


def prepare(version: str = FRANKA_SIM_VERSION, timeout: float = 600.0) -> None:
    """Create (or reuse from uv's cache) franka-sim's environment, so a later :meth:`start`
    does not count the download against its startup timeout.

    Raises :class:`FrankaSimUnavailable` if the registry cannot be reached, and
    :class:`HardwareError` for any other failure (with uv's output).
    """
    cmd = [*uvx_command(version), "python", "-c", "import franka_sim, mujoco; print(mujoco.__version__)"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise WaitTimeout(
            f"uv did not finish creating franka-sim {version}'s environment within {timeout:.0f}s"
        ) from None
    if proc.returncode != 0:
        output = (proc.stderr or "") + (proc.stdout or "")
        tail = "\n".join(output.strip().splitlines()[-15:])
        if _looks_like_network_failure(output):
            raise FrankaSimUnavailable(
                f"cannot install franka-sim {version}: the package registry is unreachable:\n{tail}"
            )
        raise HardwareError(f"cannot set up franka-sim {version} with uv (exit {proc.returncode}):\n{tail}")


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds within ``timeout``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _group_gone(pgid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until no process of group ``pgid`` is left."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # the group id was reused by another user's processes: not ours
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


class FrankaSimServer:
    """One franka-sim single-arm server in a subprocess (its own process group).

    Parameters:
        host: the loopback address to bind (libfranka's ports 1337/1338 are fixed, so use a
            distinct ``127.x.y.z`` per concurrent server).
        gripper: also serve the Franka Hand on port 1338.
        version: the franka-sim release.
        enforce_motion_limits: abort a motion that breaks the FCI's joint position, velocity,
            acceleration, jerk or torque limits with the robot's error, as the real robot does
            (franka-sim only logs them by default).
        startup_timeout: seconds to wait for the command port to accept connections.
        log_path: where the server's stdout/stderr go (default: a file in its temp directory,
            quoted in errors).
        nice: a niceness increment for the server process and its threads. A real robot's
            controller runs on its own computer; a simulated one shares the host's cores, and on
            a loaded host its 1 kHz physics loop falls behind until motions abort or the arm
            sags. A negative value (it needs root or ``CAP_SYS_NICE``; without them the server
            runs at the default priority) keeps it on time.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        gripper: bool = False,
        version: str = FRANKA_SIM_VERSION,
        enforce_motion_limits: bool = False,
        startup_timeout: float = 120.0,
        log_path: str | os.PathLike[str] | None = None,
        nice: int = 0,
    ) -> None:
        if not host.startswith("127."):
            raise ValueError(f"franka-sim is only started on loopback addresses (127.x.y.z), not {host!r}")
        self.host = host
        self.gripper = gripper
        self.version = version
        self.enforce_motion_limits = enforce_motion_limits
        self.startup_timeout = startup_timeout
        self.nice = nice
        self._tmp = tempfile.TemporaryDirectory(prefix="rlinf-franka-sim-")
        self.mjcf_path = write_mjcf(Path(self._tmp.name) / "panda_arm.xml", hand=False, scene=False)
        self.log_path = Path(log_path) if log_path else Path(self._tmp.name) / "franka-sim.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def start(self) -> FrankaSimServer:
        """Start the server and wait until its command port accepts connections."""
        if self._proc is not None:
            return self
        if port_open(self.host, COMMAND_PORT, timeout=0.2):
            raise HardwareError(
                f"{self.host}:{COMMAND_PORT} is already in use (another franka-sim or robot server?); "
                "stop it or pick another 127.x.y.z address"
            )
        env = dict(os.environ)
        env["FR3_MJCF"] = str(self.mjcf_path)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env["FRANKA_SIM_ENFORCE_MOTION_LIMITS"] = "1" if self.enforce_motion_limits else "0"
        cmd = [
            *uvx_command(self.version),
            "python",
            "-c",
            _SERVER_SCRIPT,
            self.host,
            "1" if self.gripper else "0",
            str(os.getpid()),
        ]
        log = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child, closed below
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=self._renice if self.nice else None,
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.startup_timeout
        ports = [COMMAND_PORT] + ([GRIPPER_PORT] if self.gripper else [])
        while True:
            if self._proc.poll() is not None:
                tail = self.log_tail()
                self._proc = None
                if _looks_like_network_failure(tail):
                    raise FrankaSimUnavailable(
                        f"franka-sim {self.version} could not be installed (registry unreachable):\n{tail}"
                    )
                raise HardwareError(f"franka-sim exited during startup; its log ({self.log_path}):\n{tail}")
            if all(port_open(self.host, p, timeout=0.2) for p in ports):
                return self
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise WaitTimeout(
                    f"franka-sim did not open {self.host}:{'/'.join(map(str, ports))} within "
                    f"{self.startup_timeout:.0f}s; its log:\n{tail}"
                )
            time.sleep(0.2)

    def _renice(self) -> None:
        """In the child before exec: lower its niceness by :attr:`nice` where privileges allow."""
        try:
            os.nice(self.nice)
        except OSError:
            pass  # no privilege to raise the priority: run at the default one

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server: SIGINT to its process group (a clean shutdown), SIGKILL after
        ``timeout`` seconds.

        Returns once the whole group is gone, not only the ``uvx`` launcher: its Python child can
        outlive it by a moment, still holding the ports, and a server started at once on the same
        address would find them taken."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        pgid = proc.pid
        if proc.poll() is None:
            try:
                os.killpg(pgid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(pgid)
                proc.wait(timeout=5)
        if not _group_gone(pgid, timeout=5.0):
            _kill_group(pgid)
            _group_gone(pgid, timeout=5.0)

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def __enter__(self) -> FrankaSimServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

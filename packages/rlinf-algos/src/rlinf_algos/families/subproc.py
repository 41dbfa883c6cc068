"""A simulator in its own interpreter, as a gymnasium vector env of this process.

:class:`SimProcess` starts ``python child/server.py BACKEND`` in the interpreter a family needs
(``env.python``, or the venv ``rlinf env setup FAMILY`` made), with no Ray, torch or rlinf in
it, and exchanges :mod:`~rlinf_algos.families.child.wire` frames over two pipes: messages (plain
data and numpy arrays, no pickle) for the rare requests, and for each step an 8-byte frame each
way while actions, observations, rewards and flags sit in a shared-memory block the parent made
(an anonymous ``memfd``, so nothing outlives the two processes). Every wait is bounded: building
the simulator by ``start_timeout``, each reset, step or render by ``timeout``; on expiry the
process is killed and a :class:`SimulatorError` names the family, its pid and interpreter, the
request it did not answer and for how long. A process that dies is reported with its exit code
and the last lines it wrote to stderr.

:class:`RemoteVectorEnv` is the vector env the runtime steps (gymnasium's ``SAME_STEP``
autoreset contract, ``info["final_obs"]``, per-step ``info["success"]`` and, for finished
episodes, ``info["final_info"]`` with ``success`` (at the last step) and ``success_once``).
After a :class:`SimulatorError` the env is dead until its next ``reset``, which starts a new
process: the env worker drops the partial batch and resets (RLinf's issue #432, where one
simulator's EOFError ended every worker, is what this avoids).
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from rlinf_algos.families import SimulatorError
from rlinf_algos.families.child import wire

__all__ = ["CHILD_DIR", "RemoteVectorEnv", "SimProcess", "SimulatorError", "space_from_spec"]

CHILD_DIR = Path(__file__).with_name("child")
"""The folder of the code the simulator's interpreter runs (``server.py``, ``wire.py``, the
backends)."""


class SimProcess:
    """One simulator process: ``python child/server.py backend`` in ``python``.

    Args:
        family: the family's name (for messages).
        python: the interpreter to run.
        backend: the backend file (under :data:`CHILD_DIR`).
        timeout: seconds each request may take.
        env: extra environment variables of the process (``MUJOCO_GL``...).
    """

    def __init__(
        self,
        family: str,
        python: str,
        backend: Path,
        *,
        timeout: float = 60.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.family, self.python, self.timeout = family, python, timeout
        p_read, c_write = os.pipe()
        c_read, p_write = os.pipe()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (the process writes to it until closed)
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        child_env.update(env or {})
        self.shared = _shared_file()
        self.block: mmap.mmap | None = None
        self.views: dict[str, np.ndarray] = {}
        child_env["RLINF_SIM_FDS"] = f"{c_read},{c_write},{self.shared.fileno()}"
        try:
            self.proc = subprocess.Popen(
                [python, "-s", "-u", str(CHILD_DIR / "server.py"), str(backend)],
                pass_fds=(c_read, c_write, self.shared.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=self.stderr,
                stderr=self.stderr,
                env=child_env,
                cwd=str(CHILD_DIR),
                start_new_session=True,
            )
        except OSError as err:
            for fd in (p_read, c_write, c_read, p_write):
                os.close(fd)
            self.shared.close()
            raise SimulatorError(f"{family}: cannot start its interpreter {python}: {err.strerror}") from None
        os.close(c_read)
        os.close(c_write)
        self.rfd, self.wfd = p_read, p_write
        self.pid = self.proc.pid

    def describe(self) -> str:
        return f"the {self.family} simulator (pid {self.pid}, {self.python})"

    def stderr_tail(self, lines: int = 3) -> str:
        try:
            self.stderr.seek(0)
            text = self.stderr.read()[-8192:].decode(errors="replace")
        except (OSError, ValueError):
            return ""
        kept = [ln for ln in text.splitlines() if ln.strip() and "Warning" not in ln and "warn(" not in ln]
        return " | ".join(kept[-lines:])

    def request(self, cmd: str, timeout: float | None = None, **payload: Any) -> dict[str, Any]:
        """Send ``cmd`` and wait for its reply (at most ``timeout``, default :attr:`timeout`)."""
        return self._exchange(cmd, timeout, lambda: wire.write_message(self.wfd, {"cmd": cmd, **payload}))

    def share(self, layout: wire.Layout) -> dict[str, np.ndarray]:
        """Size the shared block for ``layout``, map it here and in the process; its views."""
        self.shared.truncate(layout.size)
        self.request("share", layout=layout.to_plain())
        self.block = mmap.mmap(self.shared.fileno(), layout.size)
        self.views = layout.views(self.block)
        return self.views

    def step(self) -> dict[str, Any]:
        """Step with the actions in the shared block; the ``STEPPED`` body's value (text
        leaves) or ``{}``, the results being in the block."""
        return self._exchange("step", None, lambda: wire.write_frame(self.wfd, wire.STEP))

    def _exchange(self, cmd: str, timeout: float | None, send: Any) -> dict[str, Any]:
        wait = self.timeout if timeout is None else timeout
        started = time.monotonic()
        deadline = started + wait
        what = f"the answer to {cmd!r}"
        try:
            send()
            kind, size = wire.read_frame(self.rfd, deadline, what)
            if kind == wire.STEPPED:
                body = wire.read_body(self.rfd, size, deadline, what)
                reply = json.loads(body) if body else {}
            elif kind == wire.MSG:
                reply = wire.read_value(self.rfd, size, deadline, what)
            else:
                raise wire.WireError(f"a frame of kind {kind} in {what}")
        except wire.WireTimeout:
            self.kill()
            raise SimulatorError(
                f"{self.describe()} did not answer {cmd!r} within {wait:.0f} s (env.timeout_s); it was killed"
            ) from None
        except (wire.WireError, OSError, ValueError):
            code = self._reap()
            tail = self.stderr_tail()
            self.kill()
            raise SimulatorError(
                f"{self.describe()} died during {cmd!r} after {time.monotonic() - started:.1f} s "
                f"(exit {code})" + (f": {tail}" if tail else "")
            ) from None
        if "error" in reply:
            raise SimulatorError(
                f"{self.describe()}: {cmd!r} failed at {reply.get('where', '?')}: {reply['error']}"
            )
        return reply

    def _reap(self) -> int | None:
        try:
            return self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._reap()
        self._close_fds()

    def close(self, timeout: float = 10.0) -> None:
        """Ask the process to close its simulator and exit; kill it if it does not."""
        if self.proc.poll() is None and self.wfd >= 0:
            try:
                self.request("close", timeout=timeout)
            except SimulatorError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self.stderr.close()

    def _close_fds(self) -> None:
        self.views = {}
        if self.block is not None:
            try:
                self.block.close()
            except BufferError:  # a view of it is still alive: the mapping goes with the views
                pass
            self.block = None
        self.shared.close()
        for name in ("rfd", "wfd"):
            fd = getattr(self, name, -1)
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, -1)


def _shared_file() -> Any:
    """An anonymous file for the shared block: a ``memfd`` (Linux), else an unlinked temporary
    file; either way no name is left to clean up."""
    if hasattr(os, "memfd_create"):
        try:
            return os.fdopen(os.memfd_create("rlinf-sim-block"), "r+b", buffering=0)
        except OSError:
            pass
    return tempfile.TemporaryFile(buffering=0)


def space_from_spec(spec: dict[str, Any]) -> Any:
    """A gymnasium space from a backend's plain description (``box``, ``text``, ``dict``)."""
    from gymnasium import spaces

    kind = spec["kind"]
    if kind == "box":
        dtype = np.dtype(spec.get("dtype", "float32"))
        low = spec.get("low", -np.inf if dtype.kind == "f" else 0)
        high = spec.get("high", np.inf if dtype.kind == "f" else 255)
        shape = tuple(spec["shape"])
        return spaces.Box(
            np.broadcast_to(np.asarray(low, dtype), shape),
            np.broadcast_to(np.asarray(high, dtype), shape),
            dtype=dtype,
        )
    if kind == "text":
        return spaces.Text(int(spec.get("max_length", 128)), charset=_PRINTABLE)
    if kind == "dict":
        return spaces.Dict({k: space_from_spec(v) for k, v in spec["keys"].items()})
    raise ValueError(f"unknown space kind {kind!r}")


_PRINTABLE = frozenset(chr(c) for c in range(32, 127))


def _as_obs(obs: Any) -> Any:
    """A reply's observations as the vector env gives them (text keys as a tuple of strings)."""
    if isinstance(obs, dict):
        return {k: tuple(v) if isinstance(v, list) else v for k, v in obs.items()}
    return obs


def _row(obs: Any, j: int) -> Any:
    return {k: _row(v, j) for k, v in obs.items()} if isinstance(obs, dict) else obs[j]


class RemoteVectorEnv(VectorEnv):
    """``num_envs`` copies of a simulator in one :class:`SimProcess`, as a gymnasium vector env
    (``SAME_STEP`` autoreset). Built lazily again by :meth:`reset` after a failure.

    Args:
        family: the family's name; ``python``: its interpreter; ``backend``: the backend file;
        spec: what the backend's ``make`` takes (``tasks``, one per copy; ``obs_mode``...);
        timeout / start_timeout: seconds a request / building the simulator may take;
        env: extra environment variables of the simulator process.
    """

    def __init__(
        self,
        family: str,
        python: str,
        backend: Path,
        spec: dict[str, Any],
        *,
        timeout: float = 60.0,
        start_timeout: float = 300.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.family, self.python, self.backend = family, python, backend
        self.spec, self.timeout, self.start_timeout, self.env = dict(spec), timeout, start_timeout, env
        self.num_envs = len(spec["tasks"])
        self.restarts = 0
        self.proc: SimProcess | None = None
        spaces = self._start()
        self.spaces = spaces
        self.tasks: list[dict[str, Any]] = list(spaces.get("tasks") or [])
        self.single_observation_space = space_from_spec(spaces["obs"])
        low = np.asarray(spaces["action"]["low"], np.float32)
        high = np.asarray(spaces["action"]["high"], np.float32)
        self.single_action_space = gymnasium.spaces.Box(low, high, dtype=np.float32)
        self.observation_space = gymnasium.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = {
            "autoreset_mode": AutoresetMode.SAME_STEP,
            "render_fps": spaces.get("render_fps", 20),
        }
        self.spec_max_episode_steps = spaces.get("max_episode_steps")
        self.render_mode = "rgb_array"
        self.closed = False

    def _start(self) -> dict[str, Any]:
        self.proc = SimProcess(self.family, self.python, self.backend, timeout=self.timeout, env=self.env)
        try:
            spaces = self.proc.request("make", timeout=self.start_timeout, spec=self.spec)["spaces"]
            action_dim = int(np.asarray(spaces["action"]["low"]).size)
            try:
                self.layout = wire.Layout.for_step(self.num_envs, action_dim, spaces["obs"])
            except (wire.WireError, KeyError, TypeError, ValueError) as err:
                raise SimulatorError(f"{self.proc.describe()}: its observation space {err}") from None
            self.proc.share(self.layout)
            self.obs_paths = [k[len("obs/") :] for k in self.layout.fields if k.startswith("obs/")]
            return spaces
        except BaseException:
            self.proc.kill()
            self.proc = None
            raise

    def _live(self) -> SimProcess:
        if self.proc is None:
            raise SimulatorError(
                f"the {self.family} simulator failed before; reset the env to start a new one"
            )
        return self.proc

    def _call(self, cmd: str, **payload: Any) -> dict[str, Any]:
        proc = self._live()
        try:
            return proc.request(cmd, **payload)
        except SimulatorError:
            if not proc.alive():
                proc.kill()
                self.proc = None
            raise

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None) -> Any:
        """Reset every copy: ``seed`` an int (copy ``i`` gets ``seed + i``), one per copy, or
        ``None``; ``options={"init": [k0, k1, ...]}`` picks each copy's fixed initial state."""
        if self.proc is None:  # after a failure: a new process
            self.restarts += 1
            self._start()
        if seed is None:
            seeds: list[Any] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = [None if s is None else int(s) for s in seed]
        inits = list((options or {}).get("init") or [None] * self.num_envs)
        if len(seeds) != self.num_envs or len(inits) != self.num_envs:
            raise ValueError(f"reset: {self.num_envs} seeds and inits expected")
        reply = self._call("reset", seeds=seeds, inits=[None if k is None else int(k) for k in inits])
        return _as_obs(reply["obs"]), {}

    def step(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        proc = self._live()
        v = proc.views
        np.copyto(v["actions"], np.asarray(actions).reshape(v["actions"].shape), casting="same_kind")
        try:
            text = proc.step()
        except SimulatorError:
            if not proc.alive():
                proc.kill()
                self.proc = None
            raise
        obs = self._gather(v, "obs/", text.get("obs"))
        info: dict[str, Any] = {"success": v["success"].copy(), "_success": np.ones(self.num_envs, bool)}
        done = v["done"]
        if done.any():
            mask = done.copy()
            finals = self._gather(v, "final_obs/", text.get("final_obs"))
            final_obs = np.empty(self.num_envs, dtype=object)
            for i in np.flatnonzero(mask):
                final_obs[i] = _row(finals, i)
            info.update(
                final_obs=final_obs,
                _final_obs=mask,
                final_info={
                    "success": np.where(mask, v["final_success"], False),
                    "_success": mask.copy(),
                    "success_once": np.where(mask, v["final_success_once"], False),
                    "_success_once": mask.copy(),
                },
                _final_info=mask.copy(),
            )
        return obs, v["reward"].copy(), v["terminated"].copy(), v["truncated"].copy(), info

    def _gather(self, views: dict[str, np.ndarray], prefix: str, text: dict[str, list[Any]] | None) -> Any:
        """The observations under ``prefix`` in the block (copies), with the text leaves of a
        ``STEPPED`` body, in the shape the observation space has."""
        paths, text = self.obs_paths, text or {}
        if paths == [""] and not text:
            return views[prefix].copy()
        tree: dict[str, Any] = {}
        for p in paths:
            wire.tree_set(tree, p, views[prefix + p].copy())
        for p, rows in text.items():
            wire.tree_set(tree, p, tuple(rows))
        return tree

    def render(self) -> np.ndarray:
        """``[N, H, W, 3]`` uint8 frames of every copy's camera."""
        return np.asarray(self._call("render")["frames"])

    def expert_actions(self) -> np.ndarray:
        """``[N, A]``: the simulator's scripted expert's actions (where it has one)."""
        return np.asarray(self._call("expert")["actions"], np.float32)

    def close(self, **_: Any) -> None:
        if self.proc is not None:
            self.proc.close()
            self.proc = None
        self.closed = True

    def __del__(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None:
            proc.kill()

"""Where running instances keep their files, and how other processes find them.

Every instance ``NAME`` has, under ``<state dir>/net/``:

``NAME.lock``
    held (``flock``) by the node process for its whole life; whether it is held is the test of
    "running", immune to stale pidfiles and recycled PIDs.
``NAME.pid``
    the node process's PID (for ``rlinf net down``).
``NAME.status.json``
    the node's status, rewritten atomically (temp file + ``os.replace``) every second while it
    runs: ``state`` (``starting``/``up``/``failed``/``stopped``), ``ipv4``, ``device``,
    ``peers``, ``routes``, ``problems``, ``updated_at``. A file rather than a socket so that any
    process that can read the directory sees it, from any network namespace, without a
    socket-path length limit.
``NAME.log``
    stdout/stderr of a detached node (never contains the secret).
``NAME.spec.json``
    the validated settings a detached node was started with (no secret, only its source).

The state directory is ``$RLINF_STATE_DIR``, else ``$XDG_STATE_HOME/rlinf``, else
``~/.local/state/rlinf``, computed when called.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinf_core.errors import NetworkError
from rlinf_core.io import atomic_write_text

__all__ = ["InstancePaths", "atomic_write", "instance_paths", "list_instances", "read_status", "state_dir"]

STALE_AFTER_S = 10.0


def state_dir() -> Path:
    """The rlinf state directory of this user (not created)."""
    env = os.environ.get("RLINF_STATE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "rlinf"
    return Path.home() / ".local" / "state" / "rlinf"


@dataclass(frozen=True)
class InstancePaths:
    name: str
    root: Path

    @property
    def lock(self) -> Path:
        return self.root / f"{self.name}.lock"

    @property
    def pid(self) -> Path:
        return self.root / f"{self.name}.pid"

    @property
    def status(self) -> Path:
        return self.root / f"{self.name}.status.json"

    @property
    def log(self) -> Path:
        return self.root / f"{self.name}.log"

    @property
    def spec(self) -> Path:
        return self.root / f"{self.name}.spec.json"

    @property
    def core_config(self) -> Path:
        return self.root / f"{self.name}.core.toml"

    def ensure(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as err:
            raise NetworkError(
                f"cannot create the state directory {self.root}: {err.strerror or err}; "
                "set RLINF_STATE_DIR to a writable directory"
            ) from None

    def is_running(self) -> bool:
        """Whether a process holds this instance's lock."""
        try:
            fd = os.open(self.lock, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops the lock if we took it
        return False

    def read_pid(self) -> int | None:
        try:
            return int(self.pid.read_text().strip())
        except (OSError, ValueError):
            return None

    def remove_files(self, *, keep_log: bool = True) -> None:
        for p in (self.pid, self.status, self.spec, self.core_config):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        if not keep_log:
            with contextlib.suppress(FileNotFoundError):
                self.log.unlink()


def instance_paths(name: str) -> InstancePaths:
    return InstancePaths(name, state_dir() / "net")


class InstanceLock:
    """The lock a node process holds while it runs (see module docstring)."""

    def __init__(self, paths: InstancePaths) -> None:
        self.paths = paths
        self.fd: int | None = None

    def acquire(self) -> None:
        self.paths.ensure()
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = self.paths.read_pid()
            raise NetworkError(
                f"instance {self.paths.name!r} is already running"
                + (f" (pid {pid})" if pid else "")
                + f"; stop it with `rlinf net down --name {self.paths.name}` or pick another --name"
            ) from None
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def atomic_write(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same directory + ``os.replace``)."""
    atomic_write_text(path, text, perms=mode)


def write_status(paths: InstancePaths, data: dict[str, Any]) -> None:
    data = {**data, "updated_at": time.time()}
    atomic_write(paths.status, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=0o644)


def read_status(name: str) -> dict[str, Any]:
    """The status of running instance ``name`` as its node process last wrote it.

    Raises :class:`NetworkError` when the instance is not running (listing those that are), or
    when it runs but has not written a status yet. Adds a ``problems`` entry when the status is
    older than expected (a hung node).
    """
    paths = instance_paths(name)
    if not paths.is_running():
        running = list_instances()
        hint = f"running instances: {', '.join(running)}" if running else "no instance is running"
        raise NetworkError(
            f"overlay instance {name!r} is not running ({hint}; state directory {paths.root}); "
            f"start it with `rlinf net up --name {name} ...`"
        )
    try:
        data = json.loads(paths.status.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise NetworkError(
            f"overlay instance {name!r} is running but has not reported its status yet ({paths.status}); "
            "try again in a second"
        ) from None
    age = time.time() - float(data.get("updated_at", 0))
    if age > STALE_AFTER_S:
        data.setdefault("problems", []).append(
            f"status is {age:.0f} s old; the node process (pid {data.get('pid')}) may be hung"
        )
    return data


def list_instances() -> list[str]:
    """Names of running instances in the state directory."""
    root = state_dir() / "net"
    if not root.is_dir():
        return []
    names = sorted(p.name[: -len(".lock")] for p in root.glob("*.lock"))
    return [n for n in names if InstancePaths(n, root).is_running()]

"""Running an instance: in the foreground, or detached with a pidfile, a log and a status file.

A detached instance is ``python -m rlinf_net_easytier.daemon SPEC`` in a new session; SPEC is
the validated settings (no secret, only where it comes from), so the secret is never on any
command line. The process holds the instance lock, writes its pidfile and rewrites its status
file every second until SIGTERM/SIGINT, then stops the node and removes its files.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rlinf_core.errors import NetworkError, RlinfError, WaitTimeout
from rlinf_net_easytier.config import EasyTierConfig
from rlinf_net_easytier.provider import EasyTierProvider
from rlinf_net_easytier.state import InstanceLock, InstancePaths, atomic_write, instance_paths, write_status

__all__ = ["run_instance", "start_detached", "stop_instance"]

STATUS_INTERVAL_S = 1.0


def _log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} rlinf-net: {msg}", file=sys.stderr, flush=True)


_EVENT_KINDS = (
    "PeerAdded",
    "PeerRemoved",
    "TunDeviceReady",
    "ConnectError",
    "ConnectionError",
    "ListenerAdded",
)


def _describe_event(ev: dict[str, Any]) -> str | None:
    for kind in _EVENT_KINDS:
        if kind in ev:
            payload = ev[kind]
            if isinstance(payload, list | tuple):
                payload = " ".join(" ".join(str(x).split()) for x in payload)
            return f"event {kind}: {str(payload)[:300]}"
    return None


def run_instance(
    cfg: EasyTierConfig,
    *,
    on_up: Callable[[dict[str, Any]], None] | None = None,
    stop_event: threading.Event | None = None,
) -> int:
    """Run one overlay node until SIGTERM/SIGINT (or ``stop_event``); returns the exit status.

    Holds the instance lock, writes pidfile and status file (see :mod:`rlinf_net_easytier.state`),
    calls ``on_up(status)`` once the node is up. Raises :class:`RlinfError` if it cannot come up
    (after recording ``state: failed`` and the error in the status file).
    """
    paths = instance_paths(cfg.name)
    lock = InstanceLock(paths)
    lock.acquire()
    stop = stop_event or threading.Event()
    old_handlers: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            old_handlers[sig] = signal.signal(sig, lambda *_: stop.set())
    provider = EasyTierProvider(cfg)
    base = {"name": cfg.name, "pid": os.getpid(), "backend": cfg.backend, "role": cfg.role}
    failed = False
    try:
        atomic_write(paths.pid, f"{os.getpid()}\n", mode=0o644)
        write_status(paths, {**base, "state": "starting"})
        _log(
            f"starting {cfg.role} {cfg.name!r} ({cfg.backend}) on network {cfg.network_name!r}, overlay "
            f"{cfg.ipv4}, device {cfg.device or 'none (--no-tun)'}, listen {cfg.listen or 'none'}, "
            f"peers {cfg.peers or 'none'}, private mode {'on' if cfg.private_mode else 'off'}"
        )
        try:
            provider.up()
        except RlinfError as err:
            failed = True  # keep the status file: it tells `net up --detach` why
            write_status(paths, {**base, "state": "failed", "error": str(err)})
            raise
        base["up_seconds"] = provider.up_seconds
        base["first_peer_seconds"] = provider.first_peer_seconds
        status = {**base, **provider.status_dict(), "state": "up"}
        write_status(paths, status)
        assert provider.backend is not None
        for ev in list(provider.backend.event_log):
            line = _describe_event(ev) if isinstance(ev, dict) else None
            if line:
                _log(provider.backend.redact(line))
        _log(f"up in {provider.up_seconds:.3f} s: {status['ipv4']} on {status['device'] or 'no device'}")
        if on_up is not None:
            on_up(status)
        while not stop.wait(STATUS_INTERVAL_S):
            for ev in provider.backend.poll_events():
                line = _describe_event(ev) if isinstance(ev, dict) else None
                if line:
                    _log(provider.backend.redact(line))
            snap = provider.snapshot()
            status = {**base, **provider.status_dict(snap), "state": "up" if snap.running else "failed"}
            write_status(paths, status)
            if not snap.running:
                _log(f"node stopped unexpectedly: {snap.error or 'no reason given'}")
                return 1
        _log("stopping")
        return 0
    finally:
        provider.down()
        if failed:
            for p in (paths.pid, paths.spec, paths.core_config):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
        else:
            paths.remove_files()
        lock.release()
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)


def start_detached(cfg: EasyTierConfig, *, timeout: float | None = None) -> dict[str, Any]:
    """Start the instance in a new session with its output in the log file; return its status
    once it is up. Raises :class:`NetworkError` with the node's own error if it fails, or
    :class:`WaitTimeout` if it neither comes up nor fails in time (the process is then stopped)."""
    paths = instance_paths(cfg.name)
    paths.ensure()
    if paths.is_running():
        pid = paths.read_pid()
        raise NetworkError(
            f"instance {cfg.name!r} is already running"
            + (f" (pid {pid})" if pid else "")
            + f"; stop it with `rlinf net down --name {cfg.name}` or pick another --name"
        )
    paths.remove_files()
    atomic_write(paths.spec, cfg.model_dump_json(indent=2) + "\n")
    wait = (cfg.ready_timeout if timeout is None else timeout) + 10.0
    with open(paths.log, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlinf_net_easytier.daemon", str(paths.spec)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        data = _read_json(paths)
        if data and data.get("pid") == proc.pid:
            if data.get("state") == "up":
                return data
            if data.get("state") == "failed":
                _reap(proc, 5.0)
                raise NetworkError(str(data.get("error") or f"the node failed; see {paths.log}"))
        rc = proc.poll()
        if rc is not None:
            data = _read_json(paths)
            if data and data.get("state") == "failed":
                raise NetworkError(str(data.get("error")))
            raise NetworkError(
                f"the detached node exited with status {rc} before it came up; see {paths.log}"
            )
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    _reap(proc, 10.0)
    raise WaitTimeout(
        f"instance {cfg.name!r} did not report being up within {wait:g} s; it was stopped (log: {paths.log})"
    )


def _read_json(paths: InstancePaths) -> dict[str, Any] | None:
    try:
        return json.loads(paths.status.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _reap(proc: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def stop_instance(name: str, *, timeout: float = 10.0) -> int | None:
    """Stop running instance ``name`` (SIGTERM, then SIGKILL after ``timeout``); return its PID,
    or ``None`` if it was not running (its stale files are removed)."""
    paths = instance_paths(name)
    if not paths.is_running():
        paths.remove_files()
        return None
    pid = paths.read_pid()
    if pid is None:
        raise NetworkError(
            f"instance {name!r} is running but its pidfile {paths.pid} is missing; stop it by hand"
        )
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not paths.is_running():
            return pid
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and paths.is_running():
        time.sleep(0.05)
    if paths.is_running():
        raise WaitTimeout(f"instance {name!r} (pid {pid}) did not stop within {timeout + 5:g} s")
    paths.remove_files()
    return pid


def _main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m rlinf_net_easytier.daemon SPEC.json", file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8") as fh:
            cfg = EasyTierConfig.model_validate_json(fh.read())
        return run_instance(cfg)
    except RlinfError as err:
        _log(f"error: {err}")
        return err.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

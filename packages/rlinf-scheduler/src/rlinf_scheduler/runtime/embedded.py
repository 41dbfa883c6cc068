"""The embedded Ray: a single-node Ray head on 127.0.0.1, started for this process when no
cluster runs.

:func:`start_local_node` starts it with the ports of the node's agents named (see its docstring);
:func:`embedded_start_failure` explains a start that failed, with the fatal line of the raylet's
log that Ray's own message leaves out; :func:`machine_load` and :func:`start_attempts` make the
start-up's waits grow with the machine's load (a start on a busy laptop is retried, not refused).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
from collections.abc import Iterator, Mapping
from typing import Any

from rlinf_core.errors import ConfigError
from rlinf_scheduler.runtime._ray import import_ray, short_error
from rlinf_scheduler.runtime.auth import prepare_local_token
from rlinf_scheduler.runtime.node import WORKER_NICENESS_ENV

__all__ = [
    "LOOPBACK",
    "embedded_start_failure",
    "free_tcp_ports",
    "gcs_port_wait_s",
    "loopback_node_ip",
    "machine_load",
    "raylet_fatal_line",
    "remove_session_dir",
    "start_attempts",
    "start_local_node",
]

KEEP_SESSION_ENV = "RLINF_KEEP_RAY_SESSION"
"""Set to ``1`` to keep an embedded Ray's session folder (its logs) after the run, for debugging."""

LOOPBACK = "127.0.0.1"
"""The embedded Ray's address: it serves this machine only (RLinf's ``ray.init()`` binds every
interface)."""


GCS_PORT_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"
"""How long Ray waits for its GCS to bind its port (Ray's default: 30 s); set, it is left alone."""

GCS_PORT_WAIT_S = 30.0
MAX_START_ATTEMPTS = 5


def machine_load() -> float:
    """The 1-minute load average per CPU this process may run on (0.0 where the OS keeps none)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return 0.0
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        cpus = os.cpu_count() or 1
    return max(0.0, load) / max(1, cpus)


def start_attempts(load_per_cpu: float) -> int:
    """How many times an embedded Ray is started before its failure is final: 2 on an idle
    machine, one more per unit of load per CPU, at most :data:`MAX_START_ATTEMPTS`. Ray gives a
    raylet a fixed 30 s to register with its GCS (``Node.__init__``); a start that misses it on a
    busy machine finds Ray's modules in the page cache the next time."""
    return min(MAX_START_ATTEMPTS, 2 + int(max(0.0, load_per_cpu)))


def gcs_port_wait_s(load_per_cpu: float) -> float:
    """Ray's wait for its GCS port, scaled with the load: 30 s per unit of load per CPU above one,
    at most 300 s."""
    return min(300.0, GCS_PORT_WAIT_S * max(1.0, load_per_cpu))


@contextlib.contextmanager
def _scaled_waits(load_per_cpu: float) -> Iterator[None]:
    """Ray's start-up waits that it reads from the environment, scaled with the load for the
    duration of one start (a value the user set is kept)."""
    if GCS_PORT_WAIT_ENV in os.environ:
        yield
        return
    os.environ[GCS_PORT_WAIT_ENV] = str(int(gcs_port_wait_s(load_per_cpu)))
    try:
        yield
    finally:
        os.environ.pop(GCS_PORT_WAIT_ENV, None)


def free_tcp_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports free on ``host`` right now."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


_EMBEDDED_KEYS = {"num_cpus", "num_gpus", "resources", "object_store_memory", "include_dashboard", "labels"}


def start_local_node(ray_init: Mapping[str, Any]) -> Any:
    """Start a single-node Ray head for this process (the embedded cluster).

    Unlike ``ray.init()``, it names the ports of the node's agents: a raylet whose agent ports are
    left to be discovered gives its agents a fixed 15 s to report them and aborts on a cold or busy
    machine. It binds the loopback address (127.0.0.1) only: nothing on the network can reach it.
    Token authentication is on unless ``RAY_AUTH_MODE`` says otherwise (as ``ray.init``), with a
    token file of mode 0600 (created so when missing; a wider one is fixed or refused).
    Workers run at the driver's priority: Ray renices its worker processes to 15 by default,
    which on a shared machine hands their CPU to any other process (``RAY_worker_niceness``
    set in the environment still wins).
    """
    unknown = sorted(set(ray_init) - _EMBEDDED_KEYS)
    if unknown:
        raise ConfigError(
            f"ray_init options {', '.join(unknown)} are not supported for an embedded Ray; "
            f"supported: {', '.join(sorted(_EMBEDDED_KEYS))}"
        )
    import_ray()
    from ray._private.authentication.authentication_token_setup import (
        enable_token_auth_by_default,
        ensure_token_if_auth_enabled,
    )
    from ray._private.node import Node
    from ray._private.parameter import RayParams
    from ray._raylet import AuthenticationTokenLoader

    enable_token_auth_by_default()
    if prepare_local_token() is not None:  # Ray would create ~/.ray/auth_token world-readable
        AuthenticationTokenLoader.instance().reset_cache()
    ensure_token_if_auth_enabled(None, create_token_if_missing=True)
    metrics_agent, metrics_export, agent_listen, runtime_env_agent = free_tcp_ports(4, LOOPBACK)
    params = RayParams(
        node_ip_address=LOOPBACK,  # Ray's servers listen on 127.0.0.1 only for exactly this address
        metrics_agent_port=metrics_agent,
        metrics_export_port=metrics_export,
        dashboard_agent_listen_port=agent_listen,
        runtime_env_agent_port=runtime_env_agent,
        _system_config={} if WORKER_NICENESS_ENV in os.environ else {"worker_niceness": 0},
        **dict(ray_init),
    )

    class _Node(Node):
        """Ray's ``Node`` that stops what it started when its start fails (Ray leaves the GCS,
        dashboard, monitors and raylet of a start that timed out running until the process exits,
        so every retry on a busy machine would add a whole Ray beside it), and removes the session
        folder."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            try:
                super().__init__(*args, **kwargs)
            except BaseException:
                with contextlib.suppress(Exception):
                    self.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
                with contextlib.suppress(Exception):
                    remove_session_dir(self)
                raise

    with loopback_node_ip(), _scaled_waits(machine_load()):
        return _Node(params, head=True, shutdown_at_exit=True, spawn_reaper=True)


def remove_session_dir(node: Any) -> str | None:
    """Remove the session folder (``TEMP/session_<time>_<pid>``: logs, sockets, runtime
    resources) of an embedded Ray whose processes have been stopped, and ``session_latest`` when
    it points there; return the removed path. Each run starts its own embedded Ray, so without this
    the temp folder gains a session per run (tens of MB a day on a busy machine). Kept when
    :data:`KEEP_SESSION_ENV` is ``1``."""
    if os.environ.get(KEEP_SESSION_ENV, "") == "1":
        return None
    try:
        session = node.get_session_dir_path()
    except Exception:  # pragma: no cover - a node that never got a session
        return None
    if not session or not os.path.isdir(session) or not os.path.basename(session).startswith("session_"):
        return None
    latest = os.path.join(os.path.dirname(session), "session_latest")
    with contextlib.suppress(OSError):
        if os.path.islink(latest) and os.path.realpath(latest) == os.path.realpath(session):
            os.unlink(latest)
    shutil.rmtree(session, ignore_errors=True)
    if os.path.exists(session):  # pragma: no cover - a file held open by a process still exiting
        logging.getLogger(__name__).debug("could not remove all of %s", session)
    return session


@contextlib.contextmanager
def loopback_node_ip() -> Iterator[None]:
    """Within it, Ray takes 127.0.0.1 as this machine's address (for ``ray.init`` to reach the
    embedded Ray). Ray replaces a loopback address it is given by the machine's external address
    unless clusters are "disabled" (its mode for macOS and Windows, where it binds loopback to
    avoid firewall prompts); that switch is only read by ``get_node_ip_address``, and it is put
    back on exit so that a later attach to a real cluster is not affected."""
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def embedded_start_failure(
    err: BaseException, temp_dir: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """The error for an embedded Ray that did not start: Ray's own message, the fatal line of the
    newest session's ``raylet.err`` (which Ray's message leaves out), and what to do about it."""
    environ = os.environ if environ is None else environ
    text = f"could not start an embedded Ray: {short_error(err).rstrip('.')}"
    cause = raylet_fatal_line(temp_dir)
    if cause:
        text += f"; the raylet of the newest Ray session logged: {cause}"
    if "timed out during startup" in str(err) or "agent" in cause:
        text += (
            f". Ray gives a raylet fixed waits to start (30 s to register, 15 s for its dashboard agent), "
            f"which a busy machine can miss "
            f"(load now {machine_load():.1f} per CPU): try again when it is less loaded"
        )
        if environ.get("PYTHONDONTWRITEBYTECODE"):
            text += (
                ". PYTHONDONTWRITEBYTECODE is set, so every Ray process compiles Ray's modules from source "
                "(the dashboard agent took 35 s to start that way on a loaded 2-core machine): unset it for "
                "one run, which writes the bytecode cache, or run `python -m compileall -q` on Ray's package "
                "directory"
            )
    return text


def raylet_fatal_line(temp_dir: str | None = None) -> str:
    """The reason of the first fatal check in ``TEMP/session_latest/logs/raylet.err`` ("" if none)."""
    if temp_dir is None:
        from ray._common.utils import get_default_ray_temp_dir

        temp_dir = get_default_ray_temp_dir()
    path = os.path.join(temp_dir, "session_latest", "logs", "raylet.err")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read(1 << 20).splitlines()
    except OSError:
        return ""
    for line in lines:
        match = _FATAL_CHECK.search(line)
        if match:
            return match.group(1).strip()[:400]
    return ""


_FATAL_CHECK = re.compile(r"Check failed: (?:\S+\(\) )?(.*)")

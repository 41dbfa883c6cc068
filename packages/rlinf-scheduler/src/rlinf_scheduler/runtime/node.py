"""``rlinf node start`` / ``rlinf node stop``: start and stop Ray on this node, tracked by PID.

``start`` runs ``ray start`` in a new session with ``RLINF_NODE_RANK`` (and
``RLINF_COMM_NET_DEVICES`` when a net device is given) in its environment, so Ray freezes them for
every process it launches on the node, exactly like the documented
``export RLINF_NODE_RANK=R; ray start ...``. It records the session id and the PIDs of the Ray
processes in a state file (``$RLINF_STATE_DIR``, default ``~/.local/state/rlinf/nodes``).

``stop`` terminates only the processes of sessions that ``start`` recorded (SIGTERM, then SIGKILL
after a grace period). It never runs ``ray stop``, which would kill every Ray on the machine.

Token authentication: with ``--auth token`` (the default unless ``RAY_AUTH_MODE`` says otherwise;
an explicit ``--auth`` that contradicts the variable is refused), ``start`` passes
``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH=FILE`` to ``ray start`` through its environment;
the token itself never appears on a command line, in output or in the state file. The head
creates the token file when it is missing (mode 0600); every other node needs a copy of it (same
path, or ``--token-file``). A token file open to other users is set to 0600 (or refused, see
:func:`~rlinf_scheduler.runtime.auth.secure_token_file`).

Overlay networks: with ``--network PROVIDER`` (e.g. ``easytier``), ``start`` asks the network
provider plugin for the ``(device, ipv4)`` of its instance already running on this host
(:meth:`rlinf_core.network.NetworkProvider.bind_address_of`, e.g. ``rlinf net up --detach``),
checks that this host's ``device`` really carries ``ipv4``, and binds Ray to it:
``--node-ip-address=ipv4``, ``RLINF_COMM_NET_DEVICES=device`` and ``RLINF_NET_PROVIDER=PROVIDER``
(so ``rlinf cluster status`` can tell overlay nodes). This package never imports a provider's
package: it goes through the plugin registry.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rlinf_core.errors import ConfigError, NetworkError, SchedulerError, WaitTimeout
from rlinf_core.io import atomic_write_text
from rlinf_scheduler.runtime.auth import (
    AUTH_MODE_ENV,
    AUTH_MODES,
    auth_mode,
    create_token_file,
    default_token_path,
    secure_token_file,
)

__all__ = [
    "NodeRecord",
    "NodeStartOptions",
    "bind_to_network",
    "build_ray_start",
    "default_token_path",
    "head_answers",
    "interface_ipv4",
    "join_instructions",
    "load_records",
    "record_alive",
    "session_pids",
    "start_node",
    "state_dir",
    "stop_command",
    "stop_nodes",
]

STATE_DIR_ENV = "RLINF_STATE_DIR"
LOOPBACK = "127.0.0.1"
SINGLE_HOST_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's cluster switch; ``0`` makes ``ray start`` keep 127.0.0.1 instead of the external address."""
NET_PROVIDER_ENV = "RLINF_NET_PROVIDER"
WORKER_NICENESS_ENV = "RAY_worker_niceness"
"""Ray's niceness for its worker processes: 15 unless set, which on a shared machine hands their
CPU to every other process; rlinf starts its nodes (embedded or ``rlinf node start``) with 0."""
"""Set on the nodes started with ``--network PROVIDER``: the overlay provider Ray is bound to."""


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where node records live: ``$RLINF_STATE_DIR`` or ``$XDG_STATE_HOME/rlinf/nodes``
    (default ``~/.local/state/rlinf/nodes``)."""
    env = os.environ if env is None else env
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV]).expanduser()
    base = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "rlinf" / "nodes"


def interface_ipv4(device: str) -> str:
    """The IPv4 address of network interface ``device`` (Linux)."""
    import fcntl
    import struct

    if not device or len(device) > 15 or "/" in device:
        raise ConfigError(f"{device!r} is not a network interface name", "--net-device")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", device.encode()))  # SIOCGIFADDR
        except OSError as err:
            names = sorted(name for _, name in socket.if_nameindex())
            raise NetworkError(
                f"network interface {device!r} has no IPv4 address or does not exist ({err.strerror}); "
                f"interfaces here: {', '.join(names)}"
            ) from None
    return socket.inet_ntoa(packed[20:24])


@dataclass
class NodeStartOptions:
    """What ``rlinf node start`` was asked for."""

    rank: int
    head: bool = False
    port: int = 6379
    address: str | None = None
    node_ip: str | None = None
    net_device: str | None = None
    num_gpus: int | None = None
    num_cpus: int | None = None
    temp_dir: str | None = None
    auth: str | None = None
    """``token`` or ``disabled``; ``None``: ``RAY_AUTH_MODE`` if set, else ``token``."""
    token_file: str | None = None
    extra_args: Sequence[str] = ()
    timeout: float = 300.0
    network: str | None = None
    """A network provider (``easytier``): take ``node_ip`` and ``net_device`` from its running instance."""
    net_instance: str | None = None
    """The provider's instance name (``rlinf net up --name``); ``None``: the provider's default."""


@dataclass
class NodeRecord:
    """A node that ``rlinf node start`` started on this machine (its state file's content)."""

    rank: int
    head: bool
    node_ip: str
    address: str
    """The head's ``host:port`` (what other nodes join and drivers attach to)."""
    sid: int
    """The session id of the Ray processes (``ray start`` ran as a session leader)."""
    pids: list[int]
    auth_mode: str
    token_path: str | None
    temp_dir: str | None
    log_path: str
    started_at: float
    net_device: str | None = None
    network: str | None = None
    """The overlay network provider the node is bound to (``--network``), if any."""
    path: str = field(default="", compare=False)

    @property
    def gcs_address(self) -> str:
        return self.address

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("path", None)
        return out


def _ray_executable() -> list[str]:
    candidate = Path(sys.executable).with_name("ray")
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return [str(candidate)]
    return [sys.executable, "-m", "ray.scripts.scripts"]


def _resolve_auth(opts: NodeStartOptions) -> tuple[str, str | None]:
    """``(mode, token file)`` for ``ray start``: ``--auth`` (default: ``RAY_AUTH_MODE``, else
    token; the two must agree when both are given), the token file checked to be private (or
    created with mode 0600 on the head)."""
    env_mode = auth_mode()
    if opts.auth is None:
        mode = env_mode or "token"
    else:
        mode = opts.auth.lower()
        if mode not in AUTH_MODES:
            raise ConfigError(f"--auth must be token or disabled, got {opts.auth!r}", "--auth")
        if env_mode is not None and env_mode != mode:
            raise ConfigError(
                f"--auth {mode} conflicts with RAY_AUTH_MODE={os.environ[AUTH_MODE_ENV]} in this environment, "
                "which the drivers here follow: drop --auth (it follows the variable) or change RAY_AUTH_MODE; "
                "every node and driver of one cluster must agree",
                "--auth",
            )
    if mode == "disabled":
        return "disabled", None
    if not opts.token_file and os.environ.get("RAY_AUTH_TOKEN"):
        return "token", None  # the token is in the environment; it is inherited as it is
    where = "--token-file" if opts.token_file else "RAY_AUTH_TOKEN_PATH"
    path = Path(opts.token_file).expanduser() if opts.token_file else default_token_path()
    if not path.is_absolute():
        path = path.resolve()
    if not path.exists():
        if not opts.head:
            raise ConfigError(
                f"token authentication is on but there is no token file at {path}: copy the head's token "
                f"file to this node (same path, or pass --token-file FILE; keep it mode 600), or use --auth "
                "disabled on every node",
                "--token-file",
            )
        if create_token_file(path):
            return "token", str(path)
    return "token", str(secure_token_file(path, where))


def _is_loopback(ip: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def bind_to_network(opts: NodeStartOptions, providers: Any | None = None) -> NodeStartOptions:
    """``opts`` with ``node_ip`` and ``net_device`` taken from the running instance of overlay
    provider ``opts.network`` (unchanged when ``opts.network`` is unset).

    ``providers`` is the network-provider registry (default: ``load_plugins().network_providers``).
    Raises :class:`ConfigError` for ``--network`` together with ``--node-ip``/``--net-device``,
    :class:`~rlinf_core.errors.PluginError` for an unknown provider (naming what is installed and
    which package provides it), and :class:`NetworkError` when the instance is not running, not up,
    has no device (``--no-tun``), or its device here does not carry its address (it runs in another
    network namespace or on another host).
    """
    if not opts.network:
        if opts.net_instance:
            raise ConfigError("--net-instance needs --network PROVIDER", "--net-instance")
        return opts
    if opts.node_ip or opts.net_device:
        given = " and ".join(
            o for o, v in (("--node-ip", opts.node_ip), ("--net-device", opts.net_device)) if v
        )
        raise ConfigError(
            f"--network {opts.network} takes the node IP and the net device from the overlay instance; "
            f"drop {given}",
            "--network",
        )
    if providers is None:
        from rlinf_core.plugins import load_plugins

        providers = load_plugins().network_providers
    cls = providers.get(opts.network)
    name = getattr(cls, "PLUGIN_NAME", opts.network)
    which = f"instance {opts.net_instance!r}" if opts.net_instance else "its default instance"
    try:
        device, ipv4 = cls.bind_address_of(opts.net_instance)
    except NetworkError as err:
        raise NetworkError(f"--network {name}: {err}") from None
    try:
        here = interface_ipv4(device)
    except (NetworkError, ConfigError) as err:
        raise NetworkError(
            f"--network {name}: {which} reports device {device!r} with {ipv4}, but {err}. Run "
            "`rlinf node start` in the host (or network namespace) where that instance runs"
        ) from None
    if here != ipv4 and not (_is_loopback(here) and _is_loopback(ipv4)):  # 127/8 is all on lo
        raise NetworkError(
            f"--network {name}: {which} reports {ipv4} on {device!r}, but {device!r} here has {here}: "
            "another overlay node owns this device name on this host. Give each instance its own "
            "--dev-name, or pick the right one with --net-instance"
        )
    return replace(opts, node_ip=ipv4, net_device=device, network=name)


def build_ray_start(opts: NodeStartOptions) -> tuple[list[str], dict[str, str], str, str]:
    """``(command, environment additions, node ip, head address)`` for ``ray start``.

    The environment additions carry ``RLINF_NODE_RANK``, ``RLINF_COMM_NET_DEVICES`` and the auth
    settings; the command never contains a secret."""
    if isinstance(opts.rank, bool) or opts.rank < 0:
        raise ConfigError(f"--rank must be a whole number >= 0, got {opts.rank!r}", "--rank")
    if opts.head == bool(opts.address):
        raise ConfigError(
            "give --head (this node is the head) or --address HEAD:PORT (join a head), not both", "--head"
        )
    if opts.head and opts.rank != 0:
        # Allowed, but unusual: the seed's convention is that the head is rank 0.
        pass
    node_ip = opts.node_ip or (interface_ipv4(opts.net_device) if opts.net_device else None)
    if node_ip == "localhost":
        node_ip = LOOPBACK
    if node_ip == LOOPBACK and not opts.head:
        source = "--node-ip" if opts.node_ip else "--net-device"
        raise ConfigError(
            "a joining node cannot use 127.0.0.1"
            + (f" (the address of {opts.net_device})" if source == "--net-device" else "")
            + ": `ray start` replaces it by this machine's external address on a joining node; give it "
            "another loopback address such as --node-ip 127.0.0.2",
            source,
        )
    cmd = [*_ray_executable(), "start"]
    if opts.head:
        if not 0 < opts.port < 65536:
            raise ConfigError(f"--port must be 1..65535, got {opts.port}", "--port")
        cmd += ["--head", f"--port={opts.port}"]
        if node_ip is None:
            from rlinf_scheduler.runtime._ray import import_ray

            import_ray()
            from ray._private.services import get_node_ip_address

            node_ip = get_node_ip_address()
        address = f"{node_ip}:{opts.port}"
    else:
        assert opts.address is not None
        host, sep, port = opts.address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ConfigError(f"--address must be HOST:PORT, got {opts.address!r}", "--address")
        cmd += [f"--address={opts.address}"]
        address = opts.address
    if node_ip:
        cmd += [f"--node-ip-address={node_ip}"]
    if opts.num_gpus is not None:
        cmd += [f"--num-gpus={opts.num_gpus}"]
    if opts.num_cpus is not None:
        cmd += [f"--num-cpus={opts.num_cpus}"]
    if opts.temp_dir:
        cmd += [f"--temp-dir={opts.temp_dir}"]
    cmd += ["--disable-usage-stats", *opts.extra_args]
    env = {"RLINF_NODE_RANK": str(opts.rank), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    if node_ip == LOOPBACK:
        # `ray start` replaces 127.0.0.1 by the external address unless clusters are "disabled" (its
        # loopback-only mode); Ray's servers listen on 127.0.0.1 only for exactly this address
        env[SINGLE_HOST_ENV] = "0"
    if opts.net_device:
        env["RLINF_COMM_NET_DEVICES"] = opts.net_device
    if opts.network:
        env[NET_PROVIDER_ENV] = opts.network
    # Ray renices its workers to 15 by default: on a shared node they would yield to everything
    env[WORKER_NICENESS_ENV] = os.environ.get(WORKER_NICENESS_ENV, "0")
    mode, token_path = _resolve_auth(opts)
    env["RAY_AUTH_MODE"] = mode
    if token_path:
        env["RAY_AUTH_TOKEN_PATH"] = token_path
    return cmd, env, node_ip or "", address


def session_pids(sid: int) -> list[int]:
    """PIDs of the live processes in session ``sid`` (Linux ``/proc``)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # fields after the command (which may contain spaces) start after the last ')'
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) > 3 and rest[0] != "Z" and int(rest[3]) == sid:
            out.append(int(entry))
    return sorted(out)


def _write_record(rec: NodeRecord, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"node-{rec.node_ip or 'local'}-{rec.sid}.json"
    return atomic_write_text(path, json.dumps(rec.to_dict(), indent=2))


def load_records(directory: Path | None = None) -> list[NodeRecord]:
    """The nodes ``rlinf node start`` recorded on this machine (unreadable files are skipped)."""
    directory = state_dir() if directory is None else directory
    out = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("node-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            rec = NodeRecord(**data)
        except (OSError, ValueError, TypeError):
            continue
        rec.path = str(path)
        out.append(rec)
    return out


HEAD_ANSWER_TIMEOUT = 1.0
"""Seconds a node record's head has to accept a TCP connection on its GCS port."""


def head_answers(rec: NodeRecord, timeout: float = HEAD_ANSWER_TIMEOUT) -> bool:
    """Whether the head of ``rec`` (``rec.address``, its GCS) accepts a TCP connection within
    ``timeout`` seconds."""
    host, sep, port = rec.address.rpartition(":")
    if not sep or not port.isdigit():
        return False
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def record_alive(rec: NodeRecord, timeout: float = HEAD_ANSWER_TIMEOUT) -> bool:
    """Whether the node of ``rec`` still runs: processes of its session live and its head answers.
    A record whose head lost its GCS (a crash, an OOM kill) while its raylet lives on is stale."""
    return bool(session_pids(rec.sid)) and head_answers(rec, timeout)


def stop_command(rec: NodeRecord) -> str:
    """The command that stops the processes of ``rec`` and removes it."""
    return f"rlinf node stop --node-ip {rec.node_ip}" if rec.node_ip else "rlinf node stop"


def _check_head_reachable(address: str, network: str, timeout: float = 10.0) -> None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except OSError as err:
        why = err.strerror or str(err) or type(err).__name__
    raise NetworkError(
        f"the Ray head {address} cannot be reached from this node over the {network} overlay ({why}). "
        f"Check that the head runs (`rlinf node start --head --network {network}` there), that --address "
        f"is its overlay address, and `rlinf net verify --peers {host} --ports {port}`"
    )


def start_node(
    opts: NodeStartOptions, *, directory: Path | None = None, providers: Any | None = None
) -> NodeRecord:
    """Run ``ray start`` for ``opts`` and record what it started. With ``opts.network``, Ray is
    bound to the overlay instance's address first (:func:`bind_to_network`; ``providers`` is the
    network-provider registry, default from the installed plugins) and a worker checks that the
    head answers over the overlay. Raises :class:`SchedulerError` with the tail of Ray's output
    when it fails, :class:`WaitTimeout` after ``opts.timeout``."""
    directory = state_dir() if directory is None else directory
    opts = bind_to_network(opts, providers)
    cmd, env_add, node_ip, address = build_ray_start(opts)
    if opts.network and not opts.head:
        _check_head_reachable(address, opts.network)
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / f"ray-start-{node_ip or 'local'}-{int(time.time())}-{os.getpid()}.log"
    env = dict(os.environ)
    env.update(env_add)
    if env_add["RAY_AUTH_MODE"] == "disabled":
        env.pop("RAY_AUTH_TOKEN_PATH", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=opts.timeout)
        except subprocess.TimeoutExpired:
            _terminate_session(proc.pid, grace=5.0)
            raise WaitTimeout(
                f"`ray start` did not finish within {opts.timeout:g} s (its processes were stopped); log: {log_path}"
            ) from None
    if rc != 0:
        _terminate_session(proc.pid, grace=5.0)
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:]
        raise SchedulerError(f"`ray start` failed (exit {rc}); its output ends with:\n  " + "\n  ".join(tail))
    rec = NodeRecord(
        rank=opts.rank,
        head=opts.head,
        node_ip=node_ip,
        address=address,
        sid=proc.pid,
        pids=session_pids(proc.pid),
        auth_mode=env_add["RAY_AUTH_MODE"],
        token_path=env_add.get("RAY_AUTH_TOKEN_PATH"),
        temp_dir=opts.temp_dir,
        log_path=str(log_path),
        started_at=time.time(),
        net_device=opts.net_device,
        network=opts.network,
    )
    rec.path = str(_write_record(rec, directory))
    return rec


def _sid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rfind(")") + 2 :].split()
    return int(rest[3]) if len(rest) > 3 and rest[0] != "Z" else None


def _terminate_sessions(
    sessions: Mapping[int, Sequence[int]], *, grace: float = 15.0
) -> dict[int, list[int]]:
    """SIGTERM every process of each session id (and the recorded PIDs still in that session),
    then SIGKILL what is left after ``grace`` seconds. Returns the PIDs signalled per session."""
    signalled: dict[int, list[int]] = {}
    for sid, extra in sessions.items():
        targets = set(session_pids(sid)) | {p for p in extra if _sid_of(p) == sid}
        for pid in targets:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        signalled[sid] = sorted(targets)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(session_pids(sid) for sid in sessions):
        time.sleep(0.2)
    # SIGKILL until the sessions are empty: a raylet may fork a replacement between two sweeps, and
    # on a loaded machine a killed process can take a moment to leave /proc (bounded: 10 s)
    deadline = time.monotonic() + 10.0
    while True:
        left = [pid for sid in sessions for pid in session_pids(sid)]
        if not left or time.monotonic() >= deadline:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    return signalled


def _terminate_session(sid: int, *, grace: float = 15.0) -> list[int]:
    return _terminate_sessions({sid: ()}, grace=grace)[sid]


def stop_nodes(
    *, node_ip: str | None = None, directory: Path | None = None, grace: float = 15.0
) -> list[tuple[NodeRecord, list[int]]]:
    """Stop the Ray processes of the nodes ``rlinf node start`` recorded on this machine (only the
    one bound to ``node_ip`` when given) and remove their records. Returns each record with the
    PIDs it signalled."""
    records = [r for r in load_records(directory) if node_ip is None or r.node_ip == node_ip]
    signalled = _terminate_sessions({r.sid: r.pids for r in records}, grace=grace)
    out = []
    for rec in records:
        for path in (rec.path, rec.log_path):
            if path:
                Path(path).unlink(missing_ok=True)
        out.append((rec, signalled[rec.sid]))
    return out


def join_instructions(rec: NodeRecord) -> str:
    """What to tell the user after a node started (never the token)."""
    on = f" on the {rec.network} overlay ({rec.net_device})" if rec.network else ""
    lines = [
        f"Ray {'head' if rec.head else 'worker'} node started{on}: rank {rec.rank}, {rec.node_ip or 'default ip'}, "
        f"{len(rec.pids)} processes (session {rec.sid}); `rlinf node stop` stops them."
    ]
    if rec.head:
        if rec.network:
            dev = f" --network {rec.network}"
            lines.append(
                f"On every other node bring up its own {rec.network} instance (`rlinf net up --role node ... "
                "--detach`), then run (R = 1, 2, ... unique per node):"
            )
        else:
            dev = f" --net-device {rec.net_device}" if rec.net_device else ""
            lines.append("On every other node run (R = 1, 2, ... unique per node):")
        lines.append(f"  rlinf node start --rank R --address {rec.address}{dev}")
        if rec.node_ip.startswith("127."):
            lines.append(
                f"Note: the head is bound to the loopback address {rec.node_ip}; only this machine can join. "
                "Use --node-ip or --net-device with an address the other nodes can reach."
            )
        if rec.auth_mode == "token":
            where = rec.token_path or "RAY_AUTH_TOKEN (from the environment)"
            lines.append(
                f"Token authentication is on: copy the token file {where} to each node first (same path, or "
                "pass --token-file FILE there; keep it mode 600). The token is never printed."
            )
        lines.append("Then check with `rlinf cluster wait --nodes N` and `rlinf cluster status`.")
    return "\n".join(lines)

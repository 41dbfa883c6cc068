"""The driver's view of a Ray cluster: connect, probe every node, order nodes by rank.

:class:`Cluster` attaches to a running cluster (``address``, ``RAY_ADDRESS``, or one started on
this machine with ``ray start`` / ``rlinf node start``) or, when none runs, starts an embedded
single-node Ray: the default on one machine. It then probes every node with a tiny task pinned
to it (hard node affinity) for what Ray froze at ``ray start``: ``RLINF_NODE_RANK``,
``RLINF_COMM_NET_DEVICES``, the interpreter, the installed ray/rlinf versions; accelerators come
from the node's Ray resources.

The nodes are ordered by the node-rank rules of :mod:`~rlinf_scheduler.runtime.node_info`
(:func:`check_node_ranks`, re-exported here with :class:`NodeInfo`). Fewer live nodes than
``cluster.num_nodes``: :class:`Cluster` waits up to ``RLINF_CLUSTER_TIMEOUT`` seconds (default
300), then fails listing the missing ranks.

This module also holds what ``rlinf cluster doctor`` shares with :class:`Cluster`: reachability
checks and the explanations of connection failures. Starting an embedded Ray is
:mod:`~rlinf_scheduler.runtime.embedded`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rlinf_core.cluster import compress_ranks
from rlinf_core.errors import ConfigError, SchedulerError, WaitTimeout
from rlinf_scheduler.runtime._ray import import_ray, short_error
from rlinf_scheduler.runtime.auth import AuthRefused, check_gcs_auth
from rlinf_scheduler.runtime.code_sync import CodeSync, resolve_code_sync
from rlinf_scheduler.runtime.embedded import (
    embedded_start_failure,
    free_tcp_ports,
    machine_load,
    raylet_fatal_line,
    remove_session_dir,
    start_attempts,
    start_local_node,
)
from rlinf_scheduler.runtime.node_info import (
    ACCELERATOR_RESOURCES,
    NET_DEVICES_ENV,
    NODE_RANK_ENV,
    PROBED_ENV,
    NodeInfo,
    RankCheck,
    check_node_ranks,
    cluster_problems,
    parse_node_rank,
)
from rlinf_scheduler.runtime.versions import local_versions

if TYPE_CHECKING:
    from rlinf_core.worker import Worker
    from rlinf_scheduler.placement import ComponentPlacement, Inventory, Plan
    from rlinf_scheduler.runtime.worker_group import RayWorkerGroup

__all__ = [
    "CLUSTER_TIMEOUT_ENV",
    "DEFAULT_CLUSTER_TIMEOUT",
    "NET_DEVICES_ENV",
    "NODE_RANK_ENV",
    "AuthRefused",
    "Cluster",
    "NodeInfo",
    "RankCheck",
    "check_node_ranks",
    "cluster_problems",
    "cluster_timeout",
    "embedded_start_failure",
    "free_tcp_ports",
    "parse_node_rank",
    "raylet_fatal_line",
    "section_num_nodes",
]

log = logging.getLogger("rlinf.scheduler")

CLUSTER_TIMEOUT_ENV = "RLINF_CLUSTER_TIMEOUT"
DEFAULT_CLUSTER_TIMEOUT = 300.0
RAY_NAMESPACE = "rlinf"


def cluster_timeout(timeout: float | None = None, env: Mapping[str, str] | None = None) -> float:
    """``timeout`` if given, else ``RLINF_CLUSTER_TIMEOUT`` (seconds), else 300."""
    if timeout is not None:
        if timeout < 0:
            raise ConfigError(f"the cluster timeout must be >= 0 seconds (got {timeout})")
        return float(timeout)
    env = os.environ if env is None else env
    raw = env.get(CLUSTER_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_CLUSTER_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise ConfigError(
            f"{CLUSTER_TIMEOUT_ENV}={raw!r} must be a number of seconds >= 0 (default 300)",
            CLUSTER_TIMEOUT_ENV,
        )
    return value


# -- remote helpers (nested so that they are pickled by value: a node without rlinf installed
# can still be probed and diagnosed) --------------------------------------------------------------
def _make_probe() -> Any:
    def probe(keys: list[str]) -> dict[str, Any]:
        import importlib.metadata as md
        import os
        import socket
        import sys

        versions: dict[str, str] = {}
        try:
            versions["ray"] = md.version("ray")
        except md.PackageNotFoundError:
            versions["ray"] = "not installed"
        for dist in md.distributions():
            name = (dist.metadata["Name"] or "").lower().replace("_", "-")
            if (name == "rlinf" or name.startswith("rlinf-")) and name not in versions:
                versions[name] = dist.version
        return {
            "env": {k: os.environ[k] for k in keys if k in os.environ},
            "python": sys.executable,
            "hostname": socket.gethostname(),
            "versions": versions,
        }

    return probe


def _make_path_check() -> Any:
    def check(paths: list[str]) -> dict[str, str | None]:
        import os

        out: dict[str, str | None] = {}
        for p in paths:
            if not os.path.exists(p):
                out[p] = "does not exist"
            elif os.path.isdir(p):
                out[p] = "is a directory, not an interpreter"
            elif not os.access(p, os.X_OK):
                out[p] = "is not executable"
            else:
                out[p] = None
        return out

    return check


def make_free_port() -> Any:
    """``free_port(ip)``: a port free on ``ip`` for a group's rendezvous, picked *below* the
    kernel's ephemeral range (``ip_local_port_range``) and above Ray's worker ports (10002-19999
    by default). The port is only used seconds later, when the group's rank 0 starts; a port the
    kernel hands out itself (``bind(0)``) can meanwhile go to any process that binds or connects
    (a starting Ray worker does both), which made a rendezvous fail with EADDRINUSE. Falls back
    to ``bind(0)`` when that band is full or empty."""

    def free_port(ip: str) -> int:
        import random
        import socket

        def try_bind(port: int) -> int | None:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                for host in (ip, ""):
                    try:
                        s.bind((host, port))
                        return int(s.getsockname()[1])
                    except OSError:
                        continue
            return None

        try:
            with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
                ephemeral_low = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            ephemeral_low = 32768
        band = range(20000, ephemeral_low)
        for port in random.sample(band, min(len(band), 64)):
            if try_bind(port) is not None:
                return port
        got = try_bind(0)
        if got is None:
            raise OSError(f"no free TCP port on {ip}")
        return got

    return free_port


def tcp_reachable(host: str, port: int, timeout: float = 5.0) -> str | None:
    """``None`` if a TCP connection to ``host:port`` opens within ``timeout``, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as err:
        return err.strerror or str(err) or type(err).__name__


def split_address(address: str) -> tuple[str, int] | None:
    """``("10.0.0.1", 6379)`` from ``10.0.0.1:6379`` (``None`` for other forms such as ``ray://``)."""
    if "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def running_local_address() -> str | None:
    """The GCS address of the cluster last started on this machine (``ray start`` writes it to
    ``$RAY_TMPDIR/ray/ray_current_cluster``) if it still runs, else the head of a node that
    ``rlinf node start`` started here and that still runs: its processes live and its head
    answers (a record whose head lost its GCS is stale, never attached to)."""
    ray = import_ray()
    from ray._private import services
    from ray._private.utils import read_ray_address

    del ray
    addr = read_ray_address(None)
    if addr:
        try:
            alive = services.find_gcs_addresses()
        except Exception:  # pragma: no cover - psutil trouble
            alive = set()
        if addr in alive:
            return addr
    from rlinf_scheduler.runtime.node import load_records, record_alive

    for rec in load_records():
        if record_alive(rec):
            return rec.address
    return None


def stale_records_note() -> str:
    """``stale node record(s) of IP (its head HOST:PORT does not answer; clear it with `CMD`)``
    for the records of this machine whose node is not alive ("" when there are none)."""
    from rlinf_scheduler.runtime.node import load_records, record_alive, stop_command

    stale = [rec for rec in load_records() if not record_alive(rec)]
    if not stale:
        return ""
    which = ", ".join(
        f"{rec.node_ip or 'this machine'} (its head {rec.address} does not answer; clear it with "
        f"`{stop_command(rec)}`)"
        for rec in stale
    )
    return f"stale node record{'s' if len(stale) > 1 else ''} of {which}"


# -- the cluster ---------------------------------------------------------------------------------
class Cluster:
    """A connection to a Ray cluster with its nodes ordered by rank.

    Parameters:
        num_nodes: ``cluster.num_nodes``; ``None`` uses every live node (ranks must cover them).
        address: a Ray address; ``None`` uses ``RAY_ADDRESS``, else a cluster running on this
            machine, else starts an embedded single-node Ray. ``"local"`` always starts one.
        timeout: how long to wait for missing nodes (default ``RLINF_CLUSTER_TIMEOUT`` or 300 s).
        code_sync: overrides ``RLINF_CODE_WORKING_DIR`` (see :mod:`~rlinf_scheduler.runtime.code_sync`).
        wait: check ranks and wait for ``num_nodes`` nodes (``False`` for inspection commands).
        embedded: whether to start an embedded Ray when no cluster runs (``False``: an error).
        ray_init: extra keyword arguments for ``ray.init`` (e.g. ``num_cpus`` of an embedded Ray).
        probe_timeout: how long one node may take to answer the probe.

    Use it as a context manager, or call :meth:`shutdown`: it kills the worker groups it launched
    and disconnects (stopping the embedded Ray if it started one).
    """

    def __init__(
        self,
        num_nodes: int | None = None,
        *,
        address: str | None = None,
        timeout: float | None = None,
        code_sync: str | None = None,
        wait: bool = True,
        ray_init: Mapping[str, Any] | None = None,
        probe_timeout: float = 60.0,
        namespace: str = RAY_NAMESPACE,
        embedded: bool = True,
    ) -> None:
        if num_nodes is not None and (isinstance(num_nodes, bool) or num_nodes < 1):
            raise ConfigError(
                f"num_nodes must be a whole number >= 1 (got {num_nodes!r})", "cluster.num_nodes"
            )
        self.expected_nodes = num_nodes
        self.timeout = cluster_timeout(timeout)
        self.probe_timeout = probe_timeout
        self.code_sync: CodeSync | None = resolve_code_sync(code_sync)
        self.driver_versions = local_versions()
        self.warnings: list[str] = []
        self.address: str | None = None
        self.mode = "unconnected"
        self._owns_ray = False
        self._probes: dict[str, NodeInfo] = {}
        self._nodes: tuple[NodeInfo, ...] = ()
        self._groups: list[RayWorkerGroup] = []
        self._closed = False
        self._embedded_node: Any = None
        self._allow_embedded = embedded
        self._stale_note = ""
        self._connect(address, dict(ray_init or {}), namespace)
        if wait:
            try:
                self.wait_for_nodes(num_nodes)
            except BaseException:
                self.shutdown()
                raise

    # -- connection ------------------------------------------------------------------------------
    def _connect(self, address: str | None, ray_init: dict[str, Any], namespace: str) -> None:
        ray = import_ray()
        runtime_env = dict(ray_init.pop("runtime_env", None) or {})
        if self.code_sync is not None:
            runtime_env.update(self.code_sync.runtime_env())
            log.info("code sync ships %s", self.code_sync.describe())
        if ray.is_initialized():
            if self.code_sync is not None:
                raise SchedulerError(
                    "Ray is already initialized in this process, so code sync (RLINF_CODE_WORKING_DIR) "
                    "cannot add its packages to the job; let rlinf call ray.init"
                )
            self.mode = "existing"
            self.address = ray.get_runtime_context().gcs_address
            return
        addr = address or os.environ.get("RAY_ADDRESS") or None
        stale = ""
        if addr is None:
            addr = running_local_address()
            stale = "" if addr is not None else stale_records_note()
        if addr is None and not self._allow_embedded:
            raise SchedulerError(
                "no Ray cluster is running: RAY_ADDRESS is unset and none was started on this machine"
                + (f" (there is a {stale})" if stale else "")
                + ". Start one with `rlinf node start --rank 0 --head` (and `rlinf node start --rank R --address "
                "HEAD:PORT` on the other nodes), or pass --address"
            )
        if addr is None or addr == "local":
            self._stale_note = stale
            if stale and (self.expected_nodes is None or self.expected_nodes <= 1):
                note = f"ignoring the {stale}: starting an embedded Ray for this run"
                self.warnings.append(note)
                log.warning(note)
            self._start_embedded(ray, ray_init, runtime_env, namespace)
            return
        self._attach(ray, addr, ray_init, runtime_env, namespace)

    def _start_embedded(
        self, ray: Any, ray_init: dict[str, Any], runtime_env: dict[str, Any], namespace: str
    ) -> None:
        if self.expected_nodes is not None and self.expected_nodes > 1:
            raise SchedulerError(
                f"cluster.num_nodes is {self.expected_nodes}, but no Ray cluster is running (RAY_ADDRESS is "
                "unset and none was started on this machine). Start Ray on every node first: "
                "`rlinf node start --rank 0 --head` on the head, `rlinf node start --rank R --address "
                "HEAD_IP:6379` on the others, then run the driver on a node of that cluster"
                + (f" (ignored: the {self._stale_note})" if self._stale_note else "")
            )
        ray_init.setdefault("include_dashboard", False)
        from rlinf_scheduler.runtime.embedded import loopback_node_ip

        attempts = start_attempts(machine_load())
        for attempt in range(1, attempts + 1):
            started = time.monotonic()
            try:
                self._embedded_node = start_local_node(ray_init)
                break
            except ConfigError:
                raise
            except Exception as err:
                # Ray gives a raylet fixed waits to start; on a cold or busy machine it can miss them.
                # The next start finds Ray's modules in the page cache; a busier machine gets more tries.
                if attempt < attempts and "timed out during startup" in str(err):
                    log.warning(
                        "the embedded Ray did not start within %.0f s (load %.1f per CPU); trying again (%d of %d)",
                        time.monotonic() - started,
                        machine_load(),
                        attempt + 1,
                        attempts,
                    )
                    continue
                raise SchedulerError(embedded_start_failure(err)) from err
        try:
            with loopback_node_ip():  # Ray would turn 127.0.0.1 into this machine's external address
                ray.init(
                    address=self._embedded_node.address, namespace=namespace, runtime_env=runtime_env or None
                )
        except Exception as err:
            self._stop_embedded_node()
            raise SchedulerError(f"could not connect to the embedded Ray: {err}") from err
        self._owns_ray = True
        self.mode = "embedded"
        self.address = ray.get_runtime_context().gcs_address

    def _attach(
        self, ray: Any, addr: str, ray_init: dict[str, Any], runtime_env: dict[str, Any], namespace: str
    ) -> None:
        hostport = split_address(addr)
        if hostport is not None:
            why = tcp_reachable(*hostport, timeout=5.0)
            if why is not None:
                raise SchedulerError(unreachable_message(addr, why))
        adopt_local_auth(addr)
        check_attach_token()
        if hostport is not None:
            check_gcs_auth(addr)  # an auth refusal is final: say so now, not after ray.init's retries
        from rlinf_scheduler.runtime.embedded import loopback_node_ip

        # Ray would turn a head at 127.0.0.1 (rlinf node start --node-ip 127.0.0.1) into this
        # machine's external address, where that head does not listen
        local = hostport is not None and hostport[0] in ("127.0.0.1", "localhost")
        try:
            with loopback_node_ip() if local else contextlib.nullcontext():
                ray.init(address=addr, namespace=namespace, runtime_env=runtime_env or None, **ray_init)
        except Exception as err:
            raise SchedulerError(connect_failure_message(addr, err)) from err
        self._owns_ray = True
        self.mode = "attached"
        self.address = addr

    # -- nodes -----------------------------------------------------------------------------------
    def probe(self) -> list[NodeInfo]:
        """Every node Ray knows (dead ones too), probed where alive. Probes are cached per node
        id: what ``ray start`` froze does not change while the node lives."""
        ray = import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        raw_nodes = ray.nodes()
        pending: dict[str, Any] = {}
        base: dict[str, NodeInfo] = {}
        probe_fn = ray.remote(num_cpus=0, max_retries=0)(_make_probe())
        for nd in raw_nodes:
            node_id = nd["NodeID"]
            res = nd.get("Resources") or {}
            accel = next((r for r in ACCELERATOR_RESOURCES if res.get(r, 0) > 0), None)
            model = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), None)
            info = NodeInfo(
                node_id=node_id,
                ip=nd.get("NodeManagerAddress", "?"),
                alive=bool(nd.get("Alive")),
                cpus=float(res.get("CPU", 0.0)),
                gpus=int(res.get(accel, 0)) if accel else 0,
                gpu_model=model,
                accelerator=accel,
                is_head="node:__internal_head__" in res,
            )
            base[node_id] = info
            if info.alive and node_id not in self._probes:
                strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
                pending[node_id] = probe_fn.options(scheduling_strategy=strategy).remote(list(PROBED_ENV))
        if pending:
            refs = list(pending.values())
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.probe_timeout)
            ready_set = set(ready)
            for node_id, ref in pending.items():
                info = base[node_id]
                if ref not in ready_set:
                    ray.cancel(ref, force=True)
                    base[node_id] = replace(
                        info, probe_error=f"no answer to the probe task within {self.probe_timeout:g} s"
                    )
                    continue
                try:
                    got = ray.get(ref)
                except Exception as err:
                    base[node_id] = replace(info, probe_error=short_error(err))
                    continue
                env = got["env"]
                rank, _ = parse_node_rank(env.get(NODE_RANK_ENV))
                self._probes[node_id] = replace(
                    info,
                    raw_rank=env.get(NODE_RANK_ENV),
                    rank=rank,
                    python=got["python"],
                    hostname=got["hostname"],
                    versions=got["versions"],
                    env=env,
                )
        out = []
        for node_id, info in base.items():
            cached = self._probes.get(node_id)
            if cached is not None and info.probe_error is None:
                info = replace(cached, alive=info.alive, cpus=info.cpus, gpus=info.gpus)
            out.append(info)
        return out

    def wait_for_nodes(self, num_nodes: int | None = None, timeout: float | None = None) -> list[NodeInfo]:
        """Probe until the node-rank rules hold for ``num_nodes`` nodes (waiting for missing ones up
        to ``timeout``, default :attr:`timeout`). Sets :attr:`nodes`; returns them in rank order.

        Raises :class:`SchedulerError` at once for problems waiting cannot fix (mixed, duplicate or
        invalid ranks) and :class:`WaitTimeout` listing the missing ranks when time runs out."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        announced = False
        while True:
            nodes = self.probe()
            alive = [n for n in nodes if n.alive]
            check = check_node_ranks(alive, num_nodes)
            if check.problems:
                raise SchedulerError(
                    "the Ray cluster's node ranks are wrong:\n  " + "\n  ".join(check.problems)
                )
            unprobed = [n for n in alive if n.probe_error]
            if not check.missing and not unprobed:
                break
            if time.monotonic() >= deadline:
                raise WaitTimeout(self._missing_message(check, unprobed, num_nodes, limit))
            if not announced:
                log.warning(
                    "waiting up to %.0f s for Ray nodes (%s=%s): missing ranks %s",
                    limit,
                    "cluster.num_nodes",
                    num_nodes,
                    compress_ranks(check.missing) or "none",
                )
                announced = True
            time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))
        for w in check.warnings:
            if w not in self.warnings:
                self.warnings.append(w)
                log.warning(w)
        self._nodes = tuple(check.by_rank[r] for r in range(check.target))
        return list(self._nodes)

    def _missing_message(
        self, check: RankCheck, unprobed: list[NodeInfo], num_nodes: int | None, limit: float
    ) -> str:
        have = sorted(check.by_rank)
        lines = [
            f"waited {limit:g} s for {check.target} Ray node(s)"
            + (f" (cluster.num_nodes={num_nodes})" if num_nodes is not None else "")
            + f"; alive: {len(check.by_rank)}"
            + (f" with ranks {compress_ranks(have)}" if have else "")
        ]
        if check.missing:
            lines.append(
                f"missing node ranks: {compress_ranks(check.missing)}. Start them (`rlinf node start --rank R "
                f"--address {self.address or 'HEAD_IP:PORT'}`), check that `ray start` succeeded there and that "
                "they joined this cluster, not another one; raise RLINF_CLUSTER_TIMEOUT to wait longer"
            )
        for n in unprobed:
            lines.append(f"{n.where} could not be probed: {n.probe_error}")
        return "\n  ".join(lines)

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        """The used nodes in rank order (after :meth:`wait_for_nodes`)."""
        return self._nodes

    @property
    def num_nodes(self) -> int:
        return len(self._nodes)

    def node(self, rank: int) -> NodeInfo:
        """The node of ``rank``."""
        if not 0 <= rank < len(self._nodes):
            raise SchedulerError(
                f"node rank {rank} is not part of this cluster (ranks 0..{len(self._nodes) - 1})"
            )
        return self._nodes[rank]

    def inventory(self, num_nodes: int | None = None) -> Inventory:
        """Accelerators per node rank, as probed (for :func:`~rlinf_scheduler.placement.plan_placement`)."""
        from types import MappingProxyType

        from rlinf_scheduler.placement import Inventory

        n = len(self._nodes) if num_nodes is None else num_nodes
        gpus = {node.rank: node.gpus for node in self._nodes[:n] if node.rank is not None}
        return Inventory(MappingProxyType(gpus), 0, "the Ray cluster's probed accelerators")

    def plan(self, cluster_section: Any, *, hardware: Any = None, prefix: str = "cluster") -> Plan:
        """Plan the ``cluster`` section against this cluster's nodes (waiting for more nodes if the
        section's ``num_nodes`` asks for more than are known)."""
        from rlinf_scheduler.placement import plan_placement

        num_nodes = section_num_nodes(cluster_section)
        if num_nodes is not None and num_nodes != len(self._nodes):
            self.wait_for_nodes(num_nodes)
        return plan_placement(cluster_section, self.inventory(num_nodes), hardware=hardware, prefix=prefix)

    # -- remote helpers --------------------------------------------------------------------------
    def _on_node(self, rank: int, fn: Any, *args: Any, timeout: float = 60.0, what: str = "") -> Any:
        ray = import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = self.node(rank)
        task = ray.remote(num_cpus=0, max_retries=0)(fn).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        )
        ref = task.remote(*args)
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            raise WaitTimeout(
                f"{node.where} did not answer {what or 'a task'} within {timeout:g} s"
            ) from None
        except Exception as err:
            raise SchedulerError(f"{node.where}: {what or 'a task'} failed: {short_error(err)}") from err

    def free_port(self, rank: int) -> int:
        """A TCP port that is free on node ``rank`` now (for ``MASTER_PORT``)."""
        return int(self._on_node(rank, make_free_port(), self.node(rank).ip, what="finding a free port"))

    def check_paths(self, rank: int, paths: Iterable[str]) -> dict[str, str | None]:
        """``{path: None}`` for each executable file on node ``rank``, ``{path: why}`` otherwise."""
        return self._on_node(rank, _make_path_check(), sorted(set(paths)), what="checking interpreter paths")

    # -- worker groups ---------------------------------------------------------------------------
    def launch(
        self,
        placement: ComponentPlacement,
        worker_cls: type[Worker],
        *args: Any,
        env: Mapping[str, str] | None = None,
        ray_options: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> RayWorkerGroup:
        """Start one actor of ``worker_cls`` per process of ``placement`` (see
        :func:`~rlinf_scheduler.runtime.worker_group.launch_worker_group`)."""
        from rlinf_scheduler.runtime.worker_group import launch_worker_group

        group = launch_worker_group(
            self,
            placement,
            worker_cls,
            args,
            kwargs,
            env=env,
            ray_options=ray_options,
            timeout=self.timeout if timeout is None else timeout,
        )
        self._groups.append(group)
        return group

    def shutdown(self) -> None:
        """Kill the worker groups launched through this cluster and disconnect from Ray (stopping
        the embedded Ray if this object started it). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        errors = []
        for group in reversed(self._groups):
            try:
                group.shutdown(timeout=10.0)
            except Exception as err:  # pragma: no cover - best effort
                errors.append(err)
        self._groups.clear()
        if self._owns_ray:
            ray = import_ray()
            ray.shutdown()
        self._stop_embedded_node()
        if errors:
            log.warning("errors while stopping worker groups: %s", errors)

    def _stop_embedded_node(self) -> None:
        node, self._embedded_node = self._embedded_node, None
        if node is not None:
            node.kill_all_processes(check_alive=False, allow_graceful=True)
            remove_session_dir(node)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"Cluster(mode={self.mode!r}, address={self.address!r}, nodes={len(self._nodes)})"


def section_num_nodes(section: Any) -> int | None:
    """``num_nodes`` of a ``cluster`` section (a mapping or a config object) when it is a whole
    number >= 1, else ``None``."""
    value = section.get("num_nodes") if isinstance(section, Mapping) else getattr(section, "num_nodes", None)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


# -- explanations (shared with `rlinf cluster doctor`) ---------------------------------------------
def unreachable_message(addr: str, why: str) -> str:
    host = addr.rpartition(":")[0]
    return (
        f"cannot reach the Ray head at {addr} ({why}). Check that Ray runs on the head "
        f"(`rlinf node list` there), that {host} is the address other nodes use to reach it (the head's "
        "--node-ip-address; a head bound to 127.0.0.1 is reachable from its own machine only), and that "
        "firewalls/security groups allow the port"
    )


def connect_failure_message(addr: str, err: BaseException) -> str:
    text = f"{err}"
    chain = err
    while chain.__cause__ is not None or chain.__context__ is not None:
        chain = chain.__cause__ or chain.__context__  # type: ignore[assignment]
        text += f" {chain}"
    if "Authentication" in text or "auth" in text.lower():
        return (
            f"the Ray cluster at {addr} refused this driver's credentials: it uses token authentication. "
            "Set RAY_AUTH_MODE=token and make the head's token available here (RAY_AUTH_TOKEN_PATH=FILE, "
            "or the file ~/.ray/auth_token); `rlinf node start` does this for the nodes it starts"
        )
    return f"could not connect to the Ray cluster at {addr}: {str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__}"


def check_attach_token() -> None:
    """Before attaching: the token file this process would send (``RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``, unless the token is in ``RAY_AUTH_TOKEN`` or authentication is
    disabled) is private (see :func:`~rlinf_scheduler.runtime.auth.secure_token_file`)."""
    from rlinf_scheduler.runtime.auth import TOKEN_ENV, auth_mode, default_token_path, secure_token_file

    if auth_mode() == "disabled" or os.environ.get(TOKEN_ENV):
        return
    path = default_token_path()
    if path.exists():
        secure_token_file(path)


def adopt_local_auth(addr: str | None) -> None:
    """When ``RAY_AUTH_MODE`` is unset, take the auth mode and token file that ``rlinf node start``
    recorded for a node of this machine belonging to ``addr`` (the token itself is never read here)."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    from rlinf_scheduler.runtime.node import load_records

    for rec in load_records():
        if addr is None or rec.address == addr or rec.gcs_address == addr:
            os.environ["RAY_AUTH_MODE"] = rec.auth_mode
            if (
                rec.token_path
                and "RAY_AUTH_TOKEN_PATH" not in os.environ
                and "RAY_AUTH_TOKEN" not in os.environ
            ):
                os.environ["RAY_AUTH_TOKEN_PATH"] = rec.token_path
            import_ray()
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")  # Ray caches its configuration (the auth mode) at import
            AuthenticationTokenLoader.instance().reset_cache()
            return

"""The driver's view of a Ray cluster: connect, probe every node, order nodes by rank.

:class:`Cluster` attaches to a running cluster (``address``, ``RAY_ADDRESS``, or one started on
this machine with ``ray start`` / ``rlinf node start``) or, when none runs, starts an embedded
single-node Ray: the default on one machine. It then probes every node with a tiny task pinned
to it (hard node affinity) for what Ray froze at ``ray start``: ``RLINF_NODE_RANK``,
``RLINF_COMM_NET_DEVICES``, the interpreter, the installed ray/rlinf versions; accelerators come
from the node's Ray resources.

Node-rank rules (:func:`check_node_ranks`):

- either every node sets ``RLINF_NODE_RANK`` or none does; a single node may omit it and is rank 0;
- ranks are unique whole numbers and cover ``0..n-1``;
- fewer live nodes than ``cluster.num_nodes``: wait up to ``RLINF_CLUSTER_TIMEOUT`` seconds
  (default 300), then fail listing the missing ranks;
- more live nodes than ``num_nodes``: use ranks below ``num_nodes`` and warn about the others;
- several nodes without ranks: an error asking to set ``RLINF_NODE_RANK``. Nodes are never
  ordered by IP address.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rlinf_core.cluster import compress_ranks
from rlinf_core.errors import ConfigError, SchedulerError, WaitTimeout
from rlinf_scheduler.runtime._ray import import_ray
from rlinf_scheduler.runtime.code_sync import CodeSync, resolve_code_sync
from rlinf_scheduler.runtime.node import WORKER_NICENESS_ENV
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
    "Cluster",
    "NodeInfo",
    "RankCheck",
    "check_node_ranks",
    "cluster_problems",
    "cluster_timeout",
    "parse_node_rank",
]

log = logging.getLogger("rlinf.scheduler")

NODE_RANK_ENV = "RLINF_NODE_RANK"
NET_DEVICES_ENV = "RLINF_COMM_NET_DEVICES"
CLUSTER_TIMEOUT_ENV = "RLINF_CLUSTER_TIMEOUT"
DEFAULT_CLUSTER_TIMEOUT = 300.0
RAY_NAMESPACE = "rlinf"

PROBED_ENV = (
    NODE_RANK_ENV,
    NET_DEVICES_ENV,
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ASCEND_RT_VISIBLE_DEVICES",
    "RAY_AUTH_MODE",
)
"""Environment variables of a node (as Ray froze them at ``ray start``) that the probe reads."""

ACCELERATOR_RESOURCES = ("GPU", "NPU")
"""Ray resources that count as accelerators, in order of preference."""


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


# -- nodes ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeInfo:
    """One Ray node as the driver sees it.

    Attributes:
        node_id: Ray's node id (hex).
        ip: the node's address (``--node-ip-address``).
        alive: whether Ray reports it alive.
        raw_rank: ``RLINF_NODE_RANK`` as frozen at ``ray start`` (``None``: unset).
        rank: the parsed rank (``None`` when unset or invalid).
        cpus, gpus: Ray's CPU count and accelerator count (GPUs, or NPUs).
        gpu_model: the accelerator model from Ray's ``accelerator_type:*`` resource, if any.
        accelerator: the Ray resource the accelerators are counted under (``GPU``/``NPU``) or ``None``.
        python: the interpreter Ray's workers use on the node.
        hostname: the node's host name.
        versions: ``ray`` and rlinf distribution versions on the node.
        env: the node's values of :data:`PROBED_ENV` that are set.
        is_head: whether this is the head node.
        probe_error: why probing the node failed (``None`` when it worked).
    """

    node_id: str
    ip: str
    alive: bool = True
    raw_rank: str | None = None
    rank: int | None = None
    cpus: float = 0.0
    gpus: int = 0
    gpu_model: str | None = None
    accelerator: str | None = None
    python: str | None = None
    hostname: str | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    is_head: bool = False
    probe_error: str | None = None

    @property
    def where(self) -> str:
        """``node 1 (10.0.0.2)`` or ``node 10.0.0.2`` when it has no rank."""
        return f"node {self.rank} ({self.ip})" if self.rank is not None else f"node {self.ip}"

    def to_dict(self) -> dict[str, Any]:
        """The ``rlinf cluster status --json`` shape of one node."""
        out: dict[str, Any] = {
            "rank": self.rank,
            "ip": self.ip,
            "alive": self.alive,
            "cpus": int(self.cpus) if float(self.cpus).is_integer() else self.cpus,
            "gpus": self.gpus,
            "gpu_model": self.gpu_model,
            "python": self.python,
            "versions": dict(self.versions),
            "node_id": self.node_id,
            "hostname": self.hostname,
            "head": self.is_head,
        }
        if self.raw_rank is not None and self.rank is None:
            out["raw_rank"] = self.raw_rank
        if self.env.get(NET_DEVICES_ENV):
            out["net_devices"] = self.env[NET_DEVICES_ENV]
        if self.probe_error:
            out["probe_error"] = self.probe_error
        return out


def parse_node_rank(raw: str | None) -> tuple[int | None, str | None]:
    """``(rank, None)`` for a whole number >= 0, ``(None, None)`` when unset, ``(None, why)`` otherwise."""
    if raw is None or not raw.strip():
        return None, None
    text = raw.strip()
    try:
        value = int(text)
    except ValueError:
        return None, f"{NODE_RANK_ENV}={raw!r} is not a whole number"
    if value < 0:
        return None, f"{NODE_RANK_ENV}={raw!r} is negative"
    return value, None


@dataclass
class RankCheck:
    """The outcome of :func:`check_node_ranks`.

    Attributes:
        by_rank: the node of every rank that is used (``0..n-1`` when complete).
        problems: what waiting cannot fix (mixed, duplicate or invalid ranks).
        missing: ranks below the target count that no live node has yet.
        warnings: harmless findings (nodes beyond ``num_nodes``).
        target: the number of nodes the ranks must cover.
    """

    by_rank: dict[int, NodeInfo]
    problems: list[str]
    missing: list[int]
    warnings: list[str]
    target: int

    @property
    def ok(self) -> bool:
        return not self.problems and not self.missing


_SET_RANK_HINT = (
    "set it on every node before Ray starts there: `rlinf node start --rank R ...`, or "
    f"`export {NODE_RANK_ENV}=R` before `ray start` (R = 0..N-1, unique; the head is usually 0); "
    "restart Ray on a node after changing it"
)


def check_node_ranks(nodes: Sequence[NodeInfo], num_nodes: int | None = None) -> RankCheck:
    """Apply the node-rank rules to the live ``nodes``.

    ``num_nodes`` is ``cluster.num_nodes`` (``None``: the ranks must cover as many nodes as are
    alive). Returns a :class:`RankCheck`; the nodes in ``by_rank`` carry their parsed rank.
    """
    alive = [n for n in nodes if n.alive]
    problems: list[str] = []
    warnings: list[str] = []
    invalid = []
    for n in alive:
        _, why = parse_node_rank(n.raw_rank)
        if why:
            invalid.append(f"{n.ip}: {why}")
    if invalid:
        problems.append("invalid node ranks: " + "; ".join(invalid) + f" ({NODE_RANK_ENV} must be 0..N-1)")
    ranked = [n for n in alive if parse_node_rank(n.raw_rank)[0] is not None]
    unranked = [n for n in alive if n.raw_rank is None or not n.raw_rank.strip()]
    target = num_nodes if num_nodes is not None else len(alive)
    by_rank: dict[int, NodeInfo] = {}

    if alive and not ranked and not invalid:
        if len(alive) == 1:
            by_rank[0] = replace(alive[0], rank=0)
        else:
            problems.append(
                f"{len(alive)} nodes are alive ({', '.join(sorted(n.ip for n in alive))}) but none sets "
                f"{NODE_RANK_ENV}; rlinf does not guess node ranks from IP addresses: {_SET_RANK_HINT}"
            )
    elif ranked and unranked:
        problems.append(
            f"either every node sets {NODE_RANK_ENV} or none does: nodes "
            f"{', '.join(sorted(n.ip for n in unranked))} have no rank while nodes "
            f"{', '.join(sorted(n.ip for n in ranked))} have one; {_SET_RANK_HINT}"
        )
    seen: dict[int, list[NodeInfo]] = {}
    for n in ranked:
        rank = parse_node_rank(n.raw_rank)[0]
        assert rank is not None
        seen.setdefault(rank, []).append(n)
    for rank, holders in sorted(seen.items()):
        if len(holders) > 1:
            problems.append(
                f"node rank {rank} is set on {len(holders)} nodes ({', '.join(sorted(h.ip for h in holders))}); "
                "every node needs its own rank"
            )
        else:
            by_rank[rank] = replace(holders[0], rank=rank)
    beyond = sorted(r for r in by_rank if r >= target)
    if beyond:
        extra = ", ".join(f"{r} ({by_rank[r].ip})" for r in beyond)
        if num_nodes is not None:
            warnings.append(
                f"{len(beyond)} more node(s) than cluster.num_nodes={num_nodes} are alive; ranks {extra} "
                "are not used"
            )
        else:
            problems.append(
                f"node ranks must cover 0..{target - 1} for {target} live nodes, but ranks {extra} lie beyond"
            )
        for r in beyond:
            del by_rank[r]
    missing = [r for r in range(target) if r not in by_rank]
    return RankCheck(by_rank, problems, missing, warnings, target)


def _groups(values: Mapping[str, list[str]]) -> str:
    return "; ".join(f"{v} on {', '.join(ns)}" for v, ns in values.items())


def cluster_problems(nodes: Sequence[NodeInfo], num_nodes: int | None = None) -> list[str]:
    """Everything wrong with a cluster, in plain words: rank problems, missing ranks, nodes that
    could not be probed, and ray/rlinf versions or interpreters that differ across nodes."""
    alive = [n for n in nodes if n.alive]
    check = check_node_ranks(alive, num_nodes)
    out = list(check.problems)
    if check.missing and not check.problems:
        have = sorted(check.by_rank)
        out.append(
            f"missing node ranks {compress_ranks(check.missing)}: {len(alive)} node(s) alive"
            + (f" (ranks {compress_ranks(have)})" if have else "")
            + (f", cluster.num_nodes is {num_nodes}" if num_nodes is not None else "")
        )
    out.extend(check.warnings)
    for n in alive:
        if n.probe_error:
            out.append(f"{n.where}: could not be probed: {n.probe_error}")
    dead = [n for n in nodes if not n.alive]
    if dead:
        out.append(f"{len(dead)} dead node(s) still listed by Ray: {', '.join(sorted(n.ip for n in dead))}")
    probed = [n for n in alive if not n.probe_error]
    label = {id(n): (f"node {n.rank}" if n.rank is not None else n.ip) for n in probed}
    for n in probed:
        r = parse_node_rank(n.raw_rank)[0]
        if r is not None or len(alive) == 1:
            label[id(n)] = f"node {r if r is not None else 0}"
    dists = sorted({d for n in probed for d in n.versions})
    for dist in dists:
        values: dict[str, list[str]] = {}
        for n in probed:
            values.setdefault(n.versions.get(dist, "not installed"), []).append(label[id(n)])
        if len(values) > 1:
            out.append(f"{dist} versions differ across nodes: {_groups(values)}")
    pythons: dict[str, list[str]] = {}
    for n in probed:
        pythons.setdefault(n.python or "?", []).append(label[id(n)])
    if len(pythons) > 1:
        out.append(f"the Python interpreter differs across nodes: {_groups(pythons)}")
    return out


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


def _make_free_port() -> Any:
    def free_port(ip: str) -> int:
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((ip, 0))
            except OSError:
                s.bind(("", 0))
            return int(s.getsockname()[1])

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
    ``rlinf node start`` started here and that still runs."""
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
    from rlinf_scheduler.runtime.node import load_records, session_pids

    for rec in load_records():
        if session_pids(rec.sid):
            return rec.address
    return None


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
        if addr is None:
            addr = running_local_address()
        if addr is None and not self._allow_embedded:
            raise SchedulerError(
                "no Ray cluster is running: RAY_ADDRESS is unset and none was started on this machine. "
                "Start one with `rlinf node start --rank 0 --head` (and `rlinf node start --rank R --address "
                "HEAD:PORT` on the other nodes), or pass --address"
            )
        if addr is None or addr == "local":
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
            )
        ray_init.setdefault("include_dashboard", False)
        for attempt in (1, 2):
            try:
                self._embedded_node = _start_local_node(ray_init)
                break
            except ConfigError:
                raise
            except Exception as err:
                # A raylet gives its dashboard agent a fixed 15 s to report; on a cold or busy machine
                # the agent can miss it. The second start finds its modules in the page cache.
                if attempt == 1 and "timed out during startup" in str(err):
                    log.warning("the embedded Ray did not start in time; trying once more")
                    continue
                raise SchedulerError(embedded_start_failure(err)) from err
        try:
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
        try:
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
                    base[node_id] = replace(info, probe_error=_short_error(err))
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

        num_nodes = _section_num_nodes(cluster_section)
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
            raise SchedulerError(f"{node.where}: {what or 'a task'} failed: {_short_error(err)}") from err

    def free_port(self, rank: int) -> int:
        """A TCP port that is free on node ``rank`` now (for ``MASTER_PORT``)."""
        return int(self._on_node(rank, _make_free_port(), self.node(rank).ip, what="finding a free port"))

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

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"Cluster(mode={self.mode!r}, address={self.address!r}, nodes={len(self._nodes)})"


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


def _start_local_node(ray_init: Mapping[str, Any]) -> Any:
    """Start a single-node Ray head for this process (the embedded cluster).

    Unlike ``ray.init()``, it names the ports of the node's agents: a raylet whose agent ports are
    left to be discovered gives its agents a fixed 15 s to report them and aborts on a cold or busy
    machine. Token authentication is on unless ``RAY_AUTH_MODE`` says otherwise (as ``ray.init``).
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

    enable_token_auth_by_default()
    ensure_token_if_auth_enabled(None, create_token_if_missing=True)
    metrics_agent, metrics_export, agent_listen, runtime_env_agent = free_tcp_ports(4)
    params = RayParams(
        metrics_agent_port=metrics_agent,
        metrics_export_port=metrics_export,
        dashboard_agent_listen_port=agent_listen,
        runtime_env_agent_port=runtime_env_agent,
        _system_config={} if WORKER_NICENESS_ENV in os.environ else {"worker_niceness": 0},
        **dict(ray_init),
    )
    return Node(params, head=True, shutdown_at_exit=True, spawn_reaper=True)


def embedded_start_failure(
    err: BaseException, temp_dir: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """The error for an embedded Ray that did not start: Ray's own message, the fatal line of the
    newest session's ``raylet.err`` (which Ray's message leaves out), and what to do about it."""
    environ = os.environ if environ is None else environ
    text = f"could not start an embedded Ray: {_short_error(err).rstrip('.')}"
    cause = raylet_fatal_line(temp_dir)
    if cause:
        text += f"; the raylet of the newest Ray session logged: {cause}"
    if "timed out during startup" in str(err) or "agent" in cause:
        text += (
            ". A raylet gives its dashboard agent a fixed 15 s to start, which a busy machine can miss: "
            "try again when it is less loaded"
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


def _section_num_nodes(section: Any) -> int | None:
    value = section.get("num_nodes") if isinstance(section, Mapping) else getattr(section, "num_nodes", None)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _short_error(err: BaseException) -> str:
    text = str(err).strip()
    cause = getattr(err, "cause", None)
    if cause is not None:
        text = f"{type(cause).__name__}: {cause}"
    first = text.splitlines()[-1] if text else type(err).__name__
    return first[:500]


# -- explanations (shared with `rlinf cluster doctor`) ---------------------------------------------
def unreachable_message(addr: str, why: str) -> str:
    host = addr.rpartition(":")[0]
    return (
        f"cannot reach the Ray head at {addr} ({why}). Check that Ray runs on the head "
        f"(`rlinf cluster status` there), that {host} is the address other nodes use to reach it (the head's "
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

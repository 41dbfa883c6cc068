"""What the driver knows of each Ray node, and the node-rank rules.

:class:`NodeInfo` is one node as probed (``RLINF_NODE_RANK``, ``RLINF_COMM_NET_DEVICES``, the
interpreter, versions, accelerators). Node-rank rules (:func:`check_node_ranks`):

- either every node sets ``RLINF_NODE_RANK`` or none does; a single node may omit it and is rank 0;
- ranks are unique whole numbers and cover ``0..n-1``;
- more live nodes than ``cluster.num_nodes``: use ranks below ``num_nodes`` and warn about the others;
- several nodes without ranks: an error asking to set ``RLINF_NODE_RANK``. Nodes are never
  ordered by IP address.

(Waiting for missing ranks is :class:`~rlinf_scheduler.runtime.cluster.Cluster`'s job.)
:func:`cluster_problems` lists everything wrong with a set of nodes in plain words. Pure Python:
nothing here imports Ray.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rlinf_core.cluster import compress_ranks

__all__ = [
    "ACCELERATOR_RESOURCES",
    "NET_DEVICES_ENV",
    "NODE_RANK_ENV",
    "PROBED_ENV",
    "NodeInfo",
    "RankCheck",
    "check_node_ranks",
    "cluster_problems",
    "parse_node_rank",
]

NODE_RANK_ENV = "RLINF_NODE_RANK"
NET_DEVICES_ENV = "RLINF_COMM_NET_DEVICES"

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

"""The placement planner: a ``cluster`` section + an inventory -> every process of every component.

Pure Python: nothing on this module's import path imports Ray, and planning never contacts
hardware. The Ray runtime consumes the :class:`Plan`; ``rlinf cluster plan`` prints it.

Resources of a node group (its *hardware ranks*):

- a group with ``hardware``: that hardware, in node-rank order, then config order;
- otherwise, if its nodes have accelerators: the accelerators, numbered densely in node order
  (8 GPUs on the first node and 4 on the second give 0-7 and 8-11); a node without accelerators
  owns none in such a group;
- with no accelerators at all: each node is one resource (rank = the node's index in the group);
- the reserved ``node`` group: every node is one resource whatever it has, so ranks are node ranks;
  the reserved ``cluster`` group: all nodes, accelerators or nodes as above.

Several groups in one ``node_group`` concatenate their rank spaces in the order listed.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlinf_core.cluster import (
    ComponentSpec,
    NodeEnv,
    ResolvedCluster,
    ResolvedGroup,
    compress_ranks,
    expand_placement,
    rank_expr_problems,
    resolve_cluster_partial,
)
from rlinf_core.config import load_yaml, validation_problems
from rlinf_core.errors import ConfigError, ConfigProblem, join_path
from rlinf_core.hardware import HardwareResource

__all__ = [
    "ACCELERATOR",
    "NODE",
    "ComponentPlacement",
    "Inventory",
    "Plan",
    "ProcessPlacement",
    "load_inventory",
    "plan_placement",
    "render_table",
]

ACCELERATOR = "accelerator"
"""``hardware_type`` of a process placed on GPUs/NPUs."""
NODE = "node"
"""``hardware_type`` of a process whose resource is a whole node."""

_EMPTY_ENV: Mapping[str, str] = MappingProxyType({})

MAX_GPUS_PER_NODE = 4096
"""The most accelerators one node may have in an inventory (a guard against typos)."""


# -- inventory -----------------------------------------------------------------------------------
class _InventoryNodes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_ranks: Any = Field(description="A rank expression.")
    gpus: int = Field(
        ge=0, le=MAX_GPUS_PER_NODE, strict=True, description="Accelerators on each of these nodes."
    )

    @field_validator("node_ranks")
    @classmethod
    def _shape(cls, value: Any) -> Any:
        if isinstance(value, bool) or value is None:
            raise ValueError(f"expected a rank expression such as 0-7, got {value!r}")
        return value


@dataclass(frozen=True)
class Inventory:
    """What the machines have: accelerators per node rank (nodes not listed have none).

    Robot hardware is not part of an inventory; it comes from the config's ``hardware.configs``.
    ``source`` says where the figures came from (used in error hints).
    """

    gpus_by_node: Mapping[int, int] = field(default_factory=dict)
    default_gpus: int = 0
    source: str = "no inventory (every node has no accelerators)"

    def gpus(self, node_rank: int) -> int:
        """Accelerators on ``node_rank``."""
        return self.gpus_by_node.get(node_rank, self.default_gpus)

    @classmethod
    def uniform(cls, gpus_per_node: int) -> Inventory:
        """Every node has ``gpus_per_node`` accelerators (``--gpus-per-node``)."""
        if (
            isinstance(gpus_per_node, bool)
            or not isinstance(gpus_per_node, int)
            or not 0 <= gpus_per_node <= MAX_GPUS_PER_NODE
        ):
            raise ConfigError(
                f"must be a whole number from 0 to {MAX_GPUS_PER_NODE} (got {gpus_per_node!r})",
                "--gpus-per-node",
            )
        return cls({}, gpus_per_node, f"--gpus-per-node {gpus_per_node}")

    @classmethod
    def from_data(cls, data: Any, num_nodes: int | None = None, *, prefix: str = "inventory") -> Inventory:
        """Validate ``{nodes: [{node_ranks: "0-7", gpus: 8}, ...]}``; node ranks must lie in
        ``0..num_nodes-1`` (when given) and appear in one entry only. :class:`ConfigError` lists
        every problem, paths prefixed with ``prefix``."""
        problems: list[ConfigProblem] = []
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"expected a mapping with `nodes`, got {type(data).__name__}", prefix)
        for key in data:
            if key != "nodes":
                problems.append(ConfigProblem(join_path(prefix, str(key)), "unknown key (valid keys: nodes)"))
        entries = data.get("nodes") or []
        if not isinstance(entries, list):
            problems.append(
                ConfigProblem(join_path(prefix, "nodes"), "expected a list of {node_ranks, gpus}")
            )
            entries = []
        gpus: dict[int, int] = {}
        where: dict[int, int] = {}
        for i, raw in enumerate(entries):
            try:
                entry = _InventoryNodes.model_validate(raw)
            except ValidationError as err:
                problems.extend(validation_problems(err, join_path(prefix, f"nodes[{i}]")))
                if not isinstance(raw, Mapping) or "node_ranks" not in raw:
                    continue
                entry = None
            path = join_path(prefix, f"nodes[{i}].node_ranks")
            ranks, rank_problems = rank_expr_problems(
                raw["node_ranks"] if entry is None else entry.node_ranks,
                num_nodes,
                path=path,
                what="node rank",
            )
            problems.extend(rank_problems)
            again: dict[int, list[int]] = {}
            for r in ranks:
                if r in where:
                    again.setdefault(where[r], []).append(r)
                else:
                    where[r] = i
                    gpus[r] = entry.gpus if entry is not None else 0
            for other, rs in again.items():
                problems.append(
                    ConfigProblem(
                        path, f"node ranks {compress_ranks(rs)} are already listed in nodes[{other}]"
                    )
                )
        if problems:
            raise ConfigError(problems)
        return cls(MappingProxyType(gpus), 0, "the inventory")


def load_inventory(path: str | Path, num_nodes: int | None = None) -> Inventory:
    """Read an inventory YAML file (see :meth:`Inventory.from_data`)."""
    return Inventory.from_data(load_yaml(path), num_nodes)


# -- the plan ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProcessPlacement:
    """Where one process of a component runs.

    Attributes:
        component: the component's name.
        rank: the process rank within the component (0..world_size-1).
        node_rank: the node (RLINF_NODE_RANK) it runs on.
        node_group: the label of the group it was placed through.
        hardware_type: ``"accelerator"``, the hardware plugin's type as the YAML writes it
            (``"Franka"``), or ``"node"`` when a node is the resource.
        hardware_ranks: its resources' ranks within the selected group(s).
        local_hardware_ranks: the same resources' indices on its node.
        visible_accelerators: the accelerator indices of its node it may see (its own when placed
            on accelerators; every accelerator of the node when placed on a node or on robot
            hardware, unless the hardware plugin isolates accelerators).
        python: the interpreter from the group's env config, or ``None`` for the default.
        env: env vars from the group's env config.
        hardware: the devices (with their validated configs) for processes on plugin hardware.
    """

    component: str
    rank: int
    node_rank: int
    node_group: str
    hardware_type: str
    hardware_ranks: tuple[int, ...]
    local_hardware_ranks: tuple[int, ...]
    visible_accelerators: tuple[int, ...]
    python: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY_ENV)
    hardware: tuple[HardwareResource, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``rlinf cluster plan --json`` (``hardware`` only for plugin hardware)."""
        out: dict[str, Any] = {
            "rank": self.rank,
            "node_rank": self.node_rank,
            "node_group": self.node_group,
            "hardware_type": self.hardware_type,
            "hardware_ranks": list(self.hardware_ranks),
            "local_hardware_ranks": list(self.local_hardware_ranks),
            "visible_accelerators": list(self.visible_accelerators),
            "python": self.python,
            "env": dict(self.env),
        }
        if self.hardware:
            out["hardware"] = [
                {
                    "type": h.type,
                    "node_rank": h.node_rank,
                    "local_rank": h.local_rank,
                    "config": h.config.model_dump(mode="json"),
                    "info": dict(h.info),
                }
                for h in self.hardware
            ]
        return out


@dataclass(frozen=True)
class ComponentPlacement:
    """All processes of one component, in rank order."""

    name: str
    node_groups: tuple[str, ...]
    placement: str
    processes: tuple[ProcessPlacement, ...]

    @property
    def world_size(self) -> int:
        return len(self.processes)

    def __iter__(self) -> Iterator[ProcessPlacement]:
        return iter(self.processes)

    def __len__(self) -> int:
        return len(self.processes)

    def __getitem__(self, rank: int) -> ProcessPlacement:
        return self.processes[rank]

    def node_ranks(self) -> list[int]:
        """The nodes this component runs on, sorted."""
        return sorted({p.node_rank for p in self.processes})


@dataclass(frozen=True)
class Plan:
    """Every component's processes. ``plan["actor"]`` is a :class:`ComponentPlacement`."""

    num_nodes: int
    components: Mapping[str, ComponentPlacement]
    inventory: Inventory = field(default_factory=Inventory)
    cluster: ResolvedCluster | None = field(default=None, repr=False, compare=False)

    def __getitem__(self, name: str) -> ComponentPlacement:
        try:
            return self.components[name]
        except KeyError:
            raise KeyError(
                f"component {name!r} is not placed; placed: {', '.join(self.components) or 'none'}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self.components

    def to_dict(self) -> dict[str, Any]:
        """``{"num_nodes": N, "components": {name: [process, ...]}}``."""

        def one(p: ProcessPlacement) -> dict[str, Any]:
            if p.hardware:
                return p.to_dict()
            return {
                "rank": p.rank,
                "node_rank": p.node_rank,
                "node_group": p.node_group,
                "hardware_type": p.hardware_type,
                "hardware_ranks": list(p.hardware_ranks),
                "local_hardware_ranks": list(p.local_hardware_ranks),
                "visible_accelerators": list(p.visible_accelerators),
                "python": p.python,
                "env": dict(p.env) if p.env else {},
            }

        return {
            "num_nodes": self.num_nodes,
            "components": {name: [one(p) for p in comp.processes] for name, comp in self.components.items()},
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def render(self, *, width: int | None = None) -> str:
        """The plan as a text table (:func:`render_table`)."""
        return render_table(self, width=width)


# -- rank spaces ---------------------------------------------------------------------------------
@dataclass
class _Segment:
    """The resources one group contributes to a selection's rank space."""

    group: ResolvedGroup
    kind: str  # ACCELERATOR, NODE, or the hardware type as written
    offset: int
    nodes: list[int]  # node of each resource
    locals: list[int]  # index on its node
    hardware: Sequence[HardwareResource] | None = None
    empty_nodes: list[int] = field(default_factory=list)  # nodes owning no resource (accelerator groups)

    @property
    def size(self) -> int:
        return len(self.nodes)

    def describe(self) -> str:
        g = self.group
        nodes = compress_ranks(list(g.node_ranks))
        span = f"{self.offset}-{self.offset + self.size - 1}" if self.size else "none"
        if self.kind == ACCELERATOR:
            text = (
                f"group {g.label!r} has {self.size} accelerators (ranks {span}) on nodes "
                f"{compress_ranks(sorted(set(self.nodes)))}"
            )
            if self.empty_nodes:
                text += f"; nodes {compress_ranks(self.empty_nodes)} have no accelerators and own none in it"
            return text
        if self.kind == NODE:
            why = "" if g.label == "node" and g.reserved else " as they have no accelerators"
            return f"group {g.label!r} has {_plural(self.size, 'node resource')} (ranks {span}): nodes {nodes}{why}"
        return f"group {g.label!r} has {_plural(self.size, self.kind + ' device')} (ranks {span}) on nodes {nodes}"


def _plural(n: int, noun: str) -> str:
    if n == 1:
        return f"{n} {noun}"
    return f"{n} {noun}es" if noun.endswith("s") else f"{n} {noun}s"


def _segment(group: ResolvedGroup, inventory: Inventory, offset: int) -> _Segment:
    if group.reserved and group.label == "node":
        ranks = list(group.node_ranks)
        return _Segment(group, NODE, offset, ranks, [0] * len(ranks))
    if group.hardware_plugin is not None:
        hw = group.hardware
        return _Segment(
            group,
            group.hardware_type or group.hardware_plugin.PLUGIN_NAME,
            offset,
            [h.node_rank for h in hw],
            [h.local_rank for h in hw],
            hw,
        )
    nodes: list[int] = []
    locs: list[int] = []
    empty: list[int] = []
    for n in group.node_ranks:
        k = inventory.gpus(n)
        if k:
            nodes.extend([n] * k)
            locs.extend(range(k))
        else:
            empty.append(n)
    if nodes:
        return _Segment(group, ACCELERATOR, offset, nodes, locs, None, empty)
    ranks = list(group.node_ranks)
    return _Segment(group, NODE, offset, ranks, [0] * len(ranks))


def _overlap_problem(segments: list[_Segment], spec: ComponentSpec) -> ConfigProblem | None:
    """Groups listed together must not offer the same physical resource twice. Accelerator and
    node resources of a node are all in any group containing it, so sharing a node of the same
    kind means sharing resources; plugin hardware of one type cannot be in two groups at all."""
    seen: dict[tuple[str, int], str] = {}
    for seg in segments:
        if seg.kind not in (ACCELERATOR, NODE):
            continue
        for node in dict.fromkeys(seg.nodes):
            other = seen.setdefault((seg.kind, node), seg.group.label)
            if other != seg.group.label:
                return ConfigProblem(
                    join_path(spec.key_path, "node_group"),
                    f"groups {other!r} and {seg.group.label!r} share node {node}'s resources; groups "
                    "listed together must not overlap, or processes would share resources unasked",
                )
    return None


def _listing(items: list[int], limit: int = 5) -> str:
    shown = ", ".join(map(str, items[:limit]))
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


# -- the planner ---------------------------------------------------------------------------------
def plan_placement(
    cluster_config: Any,
    inventory: Inventory | Mapping[str, Any] | None = None,
    *,
    hardware: Any = None,
    prefix: str = "cluster",
) -> Plan:
    """Plan every component's processes.

    Parameters:
        cluster_config: the ``cluster`` section (a mapping from YAML, a
            :class:`~rlinf_core.cluster.ClusterConfig` or a :class:`~rlinf_core.cluster.ResolvedCluster`).
        inventory: accelerators per node (an :class:`Inventory` or its YAML mapping); ``None``:
            no node has accelerators.
        hardware: where hardware types are looked up (a Registry, a PluginHost or a mapping);
            ``None`` loads the installed plugins when a group names a hardware type.
        prefix: the YAML path of the section, for messages.

    Returns a :class:`Plan`. Raises :class:`ConfigError` listing every problem (YAML paths first).
    Never contacts hardware.
    """
    resolved, problems = resolve_cluster_partial(cluster_config, hardware, prefix=prefix)
    inventory_ok = True
    if inventory is None:
        inventory = Inventory()
    elif not isinstance(inventory, Inventory):
        try:
            inventory = Inventory.from_data(inventory, resolved.num_nodes or None)
        except ConfigError as err:
            problems.extend(err.problems)
            inventory, inventory_ok = Inventory(), False
    elif resolved.num_nodes:
        beyond = sorted(r for r in inventory.gpus_by_node if r >= resolved.num_nodes)
        if beyond:
            problems.append(
                ConfigProblem(
                    "inventory.nodes",
                    f"node ranks {compress_ranks(beyond)} are outside 0..{resolved.num_nodes - 1} "
                    f"({join_path(prefix, 'num_nodes')} is {resolved.num_nodes})",
                )
            )
            inventory_ok = False

    components: dict[str, ComponentPlacement] = {}
    for spec in resolved.components:
        if not inventory_ok or any(label not in resolved.groups for label in spec.node_groups):
            continue  # its group's problems are reported already; planning it would only add noise
        processes = _plan_component(spec, resolved, inventory, problems)
        if processes is None:
            continue
        for name in spec.names:
            procs = processes if name == spec.names[0] else tuple(_renamed(p, name) for p in processes)
            components[name] = ComponentPlacement(name, spec.node_groups, spec.placement, procs)
    if problems:
        raise ConfigError(problems)
    return Plan(resolved.num_nodes, MappingProxyType(components), inventory, resolved)


def _renamed(p: ProcessPlacement, name: str) -> ProcessPlacement:
    return ProcessPlacement(
        name,
        p.rank,
        p.node_rank,
        p.node_group,
        p.hardware_type,
        p.hardware_ranks,
        p.local_hardware_ranks,
        p.visible_accelerators,
        p.python,
        p.env,
        p.hardware,
    )


def _plan_component(
    spec: ComponentSpec,
    resolved: ResolvedCluster,
    inventory: Inventory,
    problems: list[ConfigProblem],
) -> tuple[ProcessPlacement, ...] | None:
    segments: list[_Segment] = []
    offset = 0
    for label in spec.node_groups:
        seg = _segment(resolved.groups[label], inventory, offset)
        segments.append(seg)
        offset += seg.size
    total = offset
    if len(segments) > 1:
        overlap = _overlap_problem(segments, spec)
        if overlap:
            problems.append(overlap)
            return None
    starts = [s.offset for s in segments]

    def hint(rank: int) -> str:
        parts = [s.describe() for s in segments]
        text = "; ".join(parts)
        if len(segments) > 1:
            text = f"the groups are concatenated in order: {text}"
        if inventory.source.startswith("no inventory") and any(
            s.kind == NODE and not (s.group.reserved and s.group.label == "node") for s in segments
        ):
            text += (
                "; no inventory was given, so no node has accelerators (give --inventory or --gpus-per-node)"
            )
        return f" ({text})"

    assignment, expand_problems = expand_placement(spec.parts, total, path=spec.path, out_of_range_hint=hint)
    if expand_problems:
        problems.extend(expand_problems)
        return None

    name = spec.names[0]
    out: list[ProcessPlacement] = []
    spanning: list[int] = []
    mixed: list[int] = []
    single = len(segments) == 1
    gpu_cache: dict[int, tuple[int, ...]] = {}

    def node_gpus(n: int) -> tuple[int, ...]:
        got = gpu_cache.get(n)
        if got is None:
            got = gpu_cache[n] = tuple(range(inventory.gpus(n)))
        return got

    empty_env = NodeEnv()
    append = out.append
    for rank, res in enumerate(assignment):
        if single:
            seg = segments[0]
        else:
            seg = segments[bisect_right(starts, res[0]) - 1]
            if res[-1] >= seg.offset + seg.size:
                mixed.append(rank)
                continue
        i0 = res[0] - seg.offset
        i1 = res[-1] - seg.offset + 1  # a process's resources are contiguous (see expand_placement)
        nodes = seg.nodes
        node = nodes[i0]
        if i1 - i0 > 1 and nodes[i1 - 1] != node:  # resources are node-ordered within a segment
            spanning.append(rank)
            continue
        group = seg.group
        env = group.env_by_node.get(node, empty_env)
        locs = tuple(seg.locals[i0:i1])
        hw: tuple[HardwareResource, ...] = ()
        if seg.kind == ACCELERATOR:
            visible = locs
        elif seg.hardware is not None:
            hw = tuple(seg.hardware[i0:i1])
            plugin = group.hardware_plugin
            if plugin is not None and plugin.isolates_accelerators:
                visible = tuple(sorted({int(a) for h in hw for a in h.info.get("accelerators", ())}))
            else:
                visible = node_gpus(node)
        else:
            visible = node_gpus(node)
        append(
            ProcessPlacement(
                name, rank, node, group.label, seg.kind, res, locs, visible, env.python, env.env, hw
            )
        )
    if spanning:
        problems.append(
            ConfigProblem(
                spec.path,
                f"processes {_listing(spanning)} would span two nodes; one process may not span nodes "
                "(give each process fewer resources, or align blocks with node boundaries)" + hint(0),
            )
        )
    if mixed:
        problems.append(
            ConfigProblem(
                spec.path,
                f"processes {_listing(mixed)} would span two node groups; one process gets resources of "
                "one group only" + hint(0),
            )
        )
    if spanning or mixed:
        return None
    return tuple(out)


# -- rendering -----------------------------------------------------------------------------------
def _ranks_text(ranks: Sequence[int]) -> str:
    return compress_ranks(list(ranks)) if ranks else "-"


def table_rows(plan: Plan) -> list[list[str]]:
    """Rows of the plan table (component, rank, node rank, group, hardware type, hardware ranks,
    visible GPUs, interpreter, env), one per process."""
    rows = []
    for name, comp in plan.components.items():
        for p in comp.processes:
            rows.append(
                [
                    name,
                    str(p.rank),
                    str(p.node_rank),
                    p.node_group,
                    p.hardware_type,
                    _ranks_text(p.hardware_ranks),
                    _ranks_text(p.visible_accelerators),
                    p.python or "(default)",
                    " ".join(f"{k}={v}" for k, v in p.env.items()) or "-",
                ]
            )
    return rows


TABLE_COLUMNS = (
    "component",
    "rank",
    "node rank",
    "group",
    "hardware type",
    "hardware ranks",
    "visible GPUs",
    "interpreter",
    "env",
)


def render_table(plan: Plan, *, width: int | None = None) -> str:
    """The plan as a readable text table (one row per process) with a per-component summary."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"placement plan: {plan.num_nodes} nodes", box=box.SIMPLE_HEAD, show_lines=False)
    for col in TABLE_COLUMNS:
        table.add_column(col, overflow="fold", justify="right" if col in ("rank", "node rank") else "left")
    for row in table_rows(plan):
        table.add_row(*row)
    console = Console(
        width=width or 200, record=True, soft_wrap=False, force_terminal=False, color_system=None
    )
    with console.capture() as capture:
        console.print(table)
        for name, comp in plan.components.items():
            console.print(
                f"{name}: {_plural(comp.world_size, 'process')} on nodes {compress_ranks(comp.node_ranks())} "
                f"(groups {', '.join(comp.node_groups)}; placement {comp.placement!r})"
            )
    return capture.get()

"""Validation of the ``cluster`` section beyond its structure: everything that spans fields or
needs a hardware plugin. :func:`resolve_cluster` returns typed, frozen objects the placement
planner and the runtime consume, or raises one :class:`ConfigError` listing every problem.

Planning never contacts hardware: plugins validate their configs and enumerate their devices from
the configs alone; reachability is the runtime's and ``rlinf hw check``'s business.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from rlinf_core.cluster.models import (
    RESERVED_LABELS,
    ClusterConfig,
    ComponentPlacementSpec,
    NodeGroup,
)
from rlinf_core.cluster.placement_string import PlacementPart, parse_placement
from rlinf_core.cluster.ranks import compress_ranks, rank_expr_problems
from rlinf_core.config import validation_problems
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError, join_path
from rlinf_core.hardware import HardwarePlugin, HardwareResource

__all__ = [
    "ComponentSpec",
    "NodeEnv",
    "ResolvedCluster",
    "ResolvedGroup",
    "resolve_cluster",
    "resolve_cluster_partial",
]


@dataclass(frozen=True, slots=True)
class NodeEnv:
    """The software environment of one node within one group: env vars and interpreter."""

    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    python: str | None = None


EMPTY_ENV = NodeEnv()


@dataclass(frozen=True)
class ResolvedGroup:
    """A validated node group.

    Attributes:
        label: as written in YAML (``cluster`` / ``node`` for the reserved groups).
        node_ranks: sorted global node ranks.
        path: the YAML path of the group (for messages).
        env_by_node: the env config that covers each node (nodes not covered are absent).
        hardware_type: the ``hardware.type`` as the YAML writes it, or ``None``.
        hardware_plugin: the plugin class that owns ``hardware_type``.
        hardware: the group's devices in hardware-rank order (node-rank order, then config order).
        reserved: ``True`` for ``cluster`` and ``node``.
    """

    label: str
    node_ranks: tuple[int, ...]
    path: str = ""
    env_by_node: Mapping[int, NodeEnv] = field(default_factory=dict)
    hardware_type: str | None = None
    hardware_plugin: type[HardwarePlugin] | None = None
    hardware: tuple[HardwareResource, ...] = ()
    reserved: bool = False

    def env_for(self, node_rank: int) -> NodeEnv:
        """The env vars and interpreter of ``node_rank`` in this group (empty if none configured)."""
        return self.env_by_node.get(node_rank, EMPTY_ENV)


@dataclass(frozen=True)
class ComponentSpec:
    """One ``component_placement`` entry: the component(s) it places, through which group(s),
    and the parsed placement string (bounds are checked by the planner, which knows the counts)."""

    names: tuple[str, ...]
    node_groups: tuple[str, ...]
    placement: str
    parts: tuple[PlacementPart, ...]
    path: str
    """YAML path of the placement string."""
    key_path: str
    """YAML path of the entry (``cluster.component_placement.actor``)."""


@dataclass(frozen=True)
class ResolvedCluster:
    """The validated ``cluster`` section: groups by label (including the reserved ``cluster`` and
    ``node``) and the component placements in YAML order."""

    num_nodes: int
    groups: Mapping[str, ResolvedGroup]
    components: tuple[ComponentSpec, ...]
    config: ClusterConfig | None
    """The validated model (``None`` in a partial result with problems)."""
    prefix: str = "cluster"

    @property
    def user_groups(self) -> list[ResolvedGroup]:
        return [g for g in self.groups.values() if not g.reserved]


MAX_NODES = 1_000_000
"""The largest ``num_nodes`` accepted (a guard against typos that would allocate for billions)."""

HardwareLookup = Callable[[str], "tuple[type[HardwarePlugin] | None, str | None]"]


def _hardware_lookup(hardware: Any) -> HardwareLookup:
    """A case-insensitive lookup ``name -> (plugin, None) | (None, error message)`` over a
    :class:`~rlinf_core.plugins.Registry`, a :class:`~rlinf_core.plugins.PluginHost`, a mapping of
    names to classes, or ``None`` (the installed plugins, loaded on first use)."""
    state: dict[str, Any] = {}

    def registry() -> Any:
        if "reg" not in state:
            reg = hardware
            if reg is None:
                from rlinf_core.plugins import load_plugins

                reg = load_plugins()
            if hasattr(reg, "hardware") and hasattr(reg, "pm"):  # a PluginHost
                reg = reg.hardware
            state["reg"] = reg
        return state["reg"]

    def lookup(name: str) -> tuple[type[HardwarePlugin] | None, str | None]:
        try:
            reg = registry()
        except RlinfError as err:
            return None, f"cannot load the hardware plugins: {err}"
        if isinstance(reg, Mapping):
            by_key = {str(k).casefold(): v for k, v in reg.items()}
            if name.casefold() in by_key:
                return by_key[name.casefold()], None
            installed = ", ".join(sorted(map(str, reg), key=str.casefold)) or "none"
            return None, f"unknown hardware type {name!r}; installed: {installed}"
        if name in reg:
            return reg.get(name), None
        msg = reg.unknown_message(name)
        owners = []
        for installed in sorted(reg.names(), key=str.casefold):
            info = reg.owner(installed)
            owners.append(f"{installed} from {info.distribution} {info.version}")
        if owners:
            msg += f" (installed hardware types come from: {'; '.join(owners)})"
        return None, msg

    return lookup


def _label_of(item: Any) -> str | None:
    if isinstance(item, Mapping):
        label = item.get("label")
        if isinstance(label, int) and not isinstance(label, bool):
            return str(label)
        if isinstance(label, str):
            return label
    return None


def resolve_cluster(raw: Any, hardware: Any = None, *, prefix: str = "cluster") -> ResolvedCluster:
    """Validate a ``cluster`` section (a mapping from YAML, or a :class:`ClusterConfig`).

    Parameters:
        raw: the section.
        hardware: where hardware types are looked up (case-insensitively): a
            :class:`~rlinf_core.plugins.Registry`, a :class:`~rlinf_core.plugins.PluginHost`, a
            mapping ``{name: HardwarePlugin subclass}``; ``None`` loads the installed plugins the
            first time a group names a hardware type.
        prefix: the YAML path of the section, prepended to every problem's path.

    Raises :class:`ConfigError` with one problem per rule broken, each with its YAML path.
    """
    resolved, problems = resolve_cluster_partial(raw, hardware, prefix=prefix)
    if problems:
        raise ConfigError(problems)
    return resolved


def resolve_cluster_partial(
    raw: Any, hardware: Any = None, *, prefix: str = "cluster"
) -> tuple[ResolvedCluster, list[ConfigProblem]]:
    """Like :func:`resolve_cluster`, but return ``(resolved, problems)`` instead of raising, so a
    caller can go on checking what is sound (the planner plans the components whose groups are
    fine and reports all problems together).

    With problems, ``resolved`` holds only the groups that have none (the reserved groups only if
    ``num_nodes`` is valid), the component entries that parsed, and ``config`` is ``None``. A raw
    value that is not a mapping raises :class:`ConfigError` at once.
    """
    if isinstance(raw, ResolvedCluster):
        return raw, []
    if isinstance(raw, ClusterConfig):
        raw = raw.model_dump()
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"expected a mapping with num_nodes, node_groups and component_placement, got {type(raw).__name__}",
            prefix,
        )
    problems: list[ConfigProblem] = []

    def add(path: str, message: str) -> None:
        problems.append(ConfigProblem(path, message))

    def p(*parts: str) -> str:
        out = prefix
        for part in parts:
            out = join_path(out, part)
        return out

    valid_keys = list(ClusterConfig.model_fields)
    for key in raw:
        if key not in valid_keys:
            add(p(str(key)), f"unknown key (valid keys: {', '.join(valid_keys)})")

    num_nodes: int | None = None
    if "num_nodes" not in raw:
        add(p("num_nodes"), "required: the total number of nodes in the cluster")
    else:
        value = raw["num_nodes"]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            add(p("num_nodes"), f"must be a positive integer (got {value!r})")
        elif value > MAX_NODES:
            add(p("num_nodes"), f"must be at most {MAX_NODES} (got {value})")
        else:
            num_nodes = value

    lookup = _hardware_lookup(hardware)
    groups: dict[str, ResolvedGroup] = {}
    broken_labels: set[str] = set()
    label_index: dict[str, int] = {}
    hw_owner: dict[tuple[int, str], str] = {}

    groups_raw = raw.get("node_groups")
    if groups_raw is None:
        groups_raw = []
    if not isinstance(groups_raw, list):
        add(p("node_groups"), f"expected a list of node groups, got {type(groups_raw).__name__}")
        groups_raw = []
    seen_labels: dict[str, None] = {}
    for i, item in enumerate(groups_raw):
        gpath = p(f"node_groups[{i}]")
        n_before = len(problems)
        try:
            g = NodeGroup.model_validate(item)
        except ValidationError as err:
            problems.extend(validation_problems(err, gpath))
            label = _label_of(item)
            if label:
                broken_labels.add(label)
                seen_labels.setdefault(label)
            continue
        label = g.label
        if label in RESERVED_LABELS:
            add(
                join_path(gpath, "label"),
                f"{label!r} is reserved ('cluster' is the default group of all nodes, 'node' is all nodes "
                "with hardware ignored); choose another label",
            )
            continue
        if label in label_index:
            add(
                join_path(gpath, "label"),
                f"label {label!r} is already used by node_groups[{label_index[label]}]; labels must be unique "
                "(they are case-sensitive)",
            )
            continue
        label_index[label] = i
        seen_labels.setdefault(label)
        ranks, rank_problems = rank_expr_problems(
            g.node_ranks, num_nodes, path=join_path(gpath, "node_ranks")
        )
        problems.extend(rank_problems)
        if rank_problems:
            broken_labels.add(label)
            continue
        group_set = set(ranks)
        group_text = compress_ranks(ranks)

        env_by_node: dict[int, NodeEnv] = {}
        covered: dict[int, int] = {}
        for j, ec in enumerate(g.env_configs):
            epath = join_path(gpath, f"env_configs[{j}].node_ranks")
            eranks, eprobs = rank_expr_problems(ec.node_ranks, num_nodes, path=epath)
            problems.extend(eprobs)
            outside = [r for r in eranks if r not in group_set]
            if outside:
                add(
                    epath,
                    f"node ranks {compress_ranks(outside)} are not in the group's node_ranks ({group_text}); "
                    "an env config covers a subset of its group",
                )
            overlap: dict[int, list[int]] = {}
            for r in eranks:
                if r in covered:
                    overlap.setdefault(covered[r], []).append(r)
            for other, rs in overlap.items():
                add(
                    epath,
                    f"node ranks {compress_ranks(rs)} are also covered by env_configs[{other}]; "
                    "env configs of one group must not overlap",
                )
            env = NodeEnv(MappingProxyType(ec.env_dict()), ec.python_interpreter_path)
            for r in eranks:
                if r in group_set and r not in covered:
                    covered[r] = j
                    env_by_node[r] = env

        hw_type = plugin = None
        resources: list[HardwareResource] = []
        if g.hardware is not None:
            hpath = join_path(gpath, "hardware")
            hw_type = g.hardware.type
            plugin, err = lookup(hw_type)
            if plugin is None:
                add(join_path(hpath, "type"), err or f"unknown hardware type {hw_type!r}")
                broken_labels.add(label)
            else:
                hw_ok = True
                configs = []
                seen: dict[str, int] = {}
                for k, entry in enumerate(g.hardware.configs):
                    cpath = join_path(hpath, f"configs[{k}]")
                    try:
                        cfg = plugin.parse_config(entry, cpath)
                    except ConfigError as cerr:
                        problems.extend(cerr.problems)
                        hw_ok = False
                        continue
                    except Exception as cerr:
                        add(
                            cpath,
                            f"hardware plugin {hw_type!r} failed to validate this entry: "
                            f"{type(cerr).__name__}: {cerr}",
                        )
                        hw_ok = False
                        continue
                    node_rank = getattr(cfg, "node_rank", None)
                    if node_rank not in group_set:
                        add(
                            join_path(cpath, "node_rank"),
                            f"node {node_rank} is not in this group's node_ranks ({group_text})",
                        )
                        hw_ok = False
                        continue
                    try:
                        key = json.dumps(cfg.model_dump(mode="json"), sort_keys=True, default=str)
                    except Exception:
                        key = repr(cfg)
                    if key in seen:
                        add(cpath, f"duplicate of configs[{seen[key]}]; each device is listed once")
                        hw_ok = False
                        continue
                    seen[key] = k
                    configs.append(cfg)
                type_key = str(plugin.PLUGIN_NAME).casefold()
                clashes: dict[str, list[int]] = {}
                for r in ranks:
                    other = hw_owner.get((r, type_key))
                    if other is not None:
                        clashes.setdefault(other, []).append(r)
                    else:
                        hw_owner[(r, type_key)] = label
                for other, rs in clashes.items():
                    add(
                        join_path(gpath, "node_ranks"),
                        f"nodes {compress_ranks(rs)} already have hardware type {hw_type!r} through group "
                        f"{other!r}; a node's hardware of one type may belong to only one group",
                    )
                if hw_ok:
                    for r in ranks:
                        try:
                            resources.extend(plugin.enumerate(r, configs))
                        except ConfigError as eerr:
                            problems.extend(ConfigProblem(q.path or hpath, q.message) for q in eerr.problems)
                            hw_ok = False
                        except Exception as eerr:
                            add(
                                hpath,
                                f"hardware plugin {hw_type!r} could not enumerate the devices of node "
                                f"{r}: {type(eerr).__name__}: {eerr}",
                            )
                            hw_ok = False
                if not hw_ok:
                    broken_labels.add(label)
        if len(problems) > n_before:
            broken_labels.add(label)
            continue
        groups[label] = ResolvedGroup(
            label=label,
            node_ranks=tuple(ranks),
            path=gpath,
            env_by_node=MappingProxyType(env_by_node),
            hardware_type=hw_type,
            hardware_plugin=plugin,
            hardware=tuple(resources),
        )

    if num_nodes is not None:
        all_nodes = tuple(range(num_nodes))
        for label in RESERVED_LABELS:
            groups[label] = ResolvedGroup(label=label, node_ranks=all_nodes, path=p(), reserved=True)
        # reserved groups come first in iteration order for readability
        groups = {
            **{k: groups[k] for k in RESERVED_LABELS},
            **{k: v for k, v in groups.items() if k not in RESERVED_LABELS},
        }

    components: list[ComponentSpec] = []
    cp = raw.get("component_placement")
    if cp is None:
        cp = {}
    if not isinstance(cp, Mapping):
        add(
            p("component_placement"),
            f"expected a mapping of component name(s) to a placement, got {type(cp).__name__}",
        )
        cp = {}
    placed: dict[str, str] = {}
    for key, value in cp.items():
        kpath = p("component_placement", str(key))
        if isinstance(key, str) and (not key or key != key.strip()):
            kpath = p("component_placement") + f"[{key!r}]"  # blanks would vanish in the path
        if not isinstance(key, str):
            add(kpath, f"component names must be strings, got {key!r}")
            continue
        names = [n.strip() for n in key.split(",")]
        if any(not n for n in names):
            add(kpath, f"empty component name in {key!r} (write names separated by commas: 'actor,rollout')")
        names = [n for n in names if n]
        for n in names:
            if n in placed:
                where = "twice in this key" if placed[n] == key else f"also by {placed[n]!r}"
                add(kpath, f"component {n!r} is placed twice ({where}); each component has one placement")
            else:
                placed[n] = key
        try:
            spec = ComponentPlacementSpec.model_validate(value)
        except ValidationError as err:
            problems.extend(validation_problems(err, kpath))
            continue
        is_short = not isinstance(value, Mapping)
        ppath = kpath if is_short else join_path(kpath, "placement")
        defined = [g for g in seen_labels if g not in RESERVED_LABELS]
        for label in spec.node_group:
            if label in groups or label in broken_labels or (num_nodes is None and label in RESERVED_LABELS):
                continue
            hint = ""
            folded = [g for g in [*defined, *RESERVED_LABELS] if g.casefold() == label.casefold()]
            if folded:
                hint = f" (labels are case-sensitive: did you mean {folded[0]!r}?)"
            add(
                join_path(kpath, "node_group"),
                f"unknown node group {label!r}{hint}; defined: {', '.join(defined) or 'none'}, and the "
                "reserved 'cluster' (all nodes) and 'node' (all nodes, hardware ignored)",
            )
        try:
            parts = parse_placement(spec.placement, path=ppath)
        except ConfigError as err:
            problems.extend(err.problems)
            continue
        if not names:  # reported above; a component without a name cannot be planned
            continue
        components.append(ComponentSpec(tuple(names), spec.node_group, spec.placement, parts, ppath, kpath))

    config: ClusterConfig | None = None
    if not problems:
        try:
            config = ClusterConfig.model_validate(raw)
        except ValidationError as err:  # pragma: no cover - every structural rule is checked above
            problems.extend(validation_problems(err, prefix))
    resolved = ResolvedCluster(num_nodes or 0, MappingProxyType(groups), tuple(components), config, prefix)
    return resolved, problems

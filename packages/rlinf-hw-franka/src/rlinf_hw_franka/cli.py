"""``rlinf hw``: hardware commands (registered by rlinf-hw-franka).

``rlinf hw check CONFIG.yaml`` validates, on the node it runs on, every hardware entry of the
config's ``cluster.node_groups[*].hardware`` sections: it validates each entry with its hardware
type's config model (errors name the YAML path and exit 2), selects the devices of this node
(``--node-rank`` or ``RLINF_NODE_RANK``, default 0), runs their checks and prints a table. It
exits 1 if any check fails.

It reads only the hardware sections, not the rest of the cluster schema, so it works on any
config whatever else it contains. Hardware types come from the plugin registry: Franka is built
in, other installed hardware plugins are validated through their own ``validate``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import click

from rlinf_core.errors import ConfigError, ConfigProblem, HardwareError, PluginError

__all__ = ["HardwareSection", "hw", "parse_hardware_sections", "parse_ranks"]


@dataclass
class HardwareSection:
    """One node group's ``hardware`` section, validated by its type's config model."""

    group_index: int
    label: str
    plugin: Any  # HardwarePlugin subclass
    path: str  # YAML path of the section
    node_ranks: set[int] | None
    configs: list[Any] = field(default_factory=list)
    config_paths: list[str] = field(default_factory=list)


def parse_ranks(value: Any, path: str) -> set[int]:
    """Parse a rank expression (``"0-3,5"``, a bare int, or a YAML list of those)."""
    if isinstance(value, bool):
        raise ConfigError(f"expected node ranks such as 0-3,5, got {value!r}", path)
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"node ranks are non-negative, got {value}", path)
        return {value}
    if isinstance(value, list):
        out: set[int] = set()
        for i, item in enumerate(value):
            out |= parse_ranks(item, f"{path}[{i}]")
        return out
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"expected node ranks such as 0-3,5, got {value!r}", path)
    out = set()
    for part in value.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ConfigError(f"{part!r} is not a rank or a range such as 0-3 (in {value!r})", path) from None
        if a < 0 or b < a:
            raise ConfigError(f"range {part!r} must be ascending and non-negative (in {value!r})", path)
        out.update(range(a, b + 1))
    return out


def parse_hardware_sections(data: Mapping[str, Any], registry: Any) -> list[HardwareSection]:
    """Every ``cluster.node_groups[i].hardware`` section of ``data``, each entry validated with
    its hardware type's config model. All problems are gathered into one :class:`ConfigError`."""
    problems: list[ConfigProblem] = []
    cluster = data.get("cluster")
    if not isinstance(cluster, Mapping):
        raise ConfigError(
            "the config has no cluster section; hardware is declared in cluster.node_groups[*].hardware"
        )
    groups = cluster.get("node_groups")
    if not isinstance(groups, list):
        raise ConfigError("expected a list of node groups", "cluster.node_groups")
    sections = []
    for gi, group in enumerate(groups):
        gpath = f"cluster.node_groups[{gi}]"
        if not isinstance(group, Mapping) or "hardware" not in group or group["hardware"] is None:
            continue
        hw = group["hardware"]
        hpath = f"{gpath}.hardware"
        if not isinstance(hw, Mapping):
            problems.append(ConfigProblem(hpath, "expected a mapping with type and configs"))
            continue
        type_name = hw.get("type")
        if not isinstance(type_name, str) or not type_name.strip():
            problems.append(
                ConfigProblem(
                    f"{hpath}.type",
                    f"the hardware type is required (installed: {', '.join(sorted(registry.names())) or 'none'})",
                )
            )
            continue
        try:
            plugin = registry.get(type_name.strip())
        except PluginError as err:
            problems.append(ConfigProblem(f"{hpath}.type", str(err)))
            continue
        unknown = sorted(set(hw) - {"type", "configs"})
        for key in unknown:
            problems.append(
                ConfigProblem(f"{hpath}.{key}", "unknown key (a hardware section has type and configs)")
            )
        node_ranks = None
        if "node_ranks" in group:
            try:
                node_ranks = parse_ranks(group["node_ranks"], f"{gpath}.node_ranks")
            except ConfigError as err:
                problems.extend(err.problems)
        raw_configs = hw.get("configs")
        if not isinstance(raw_configs, list) or not raw_configs:
            problems.append(ConfigProblem(f"{hpath}.configs", "expected a non-empty list of device entries"))
            continue
        section = HardwareSection(gi, str(group.get("label", gi)), plugin, hpath, node_ranks)
        for ci, raw in enumerate(raw_configs):
            cpath = f"{hpath}.configs[{ci}]"
            try:
                cfg = plugin.parse_config(raw, cpath)
            except ConfigError as err:
                problems.extend(err.problems)
                continue
            if node_ranks is not None and cfg.node_rank not in node_ranks:
                problems.append(
                    ConfigProblem(
                        f"{cpath}.node_rank",
                        f"node {cfg.node_rank} is not in this group's node_ranks ({group['node_ranks']})",
                    )
                )
                continue
            section.configs.append(cfg)
            section.config_paths.append(cpath)
        sections.append(section)
    if problems:
        raise ConfigError(problems)
    return sections


def _node_rank_from_env() -> int:
    raw = os.environ.get("RLINF_NODE_RANK")
    if raw is None or not raw.strip():
        return 0
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"RLINF_NODE_RANK must be a non-negative integer, got {raw!r}")
    return value


def _rows_for(section: HardwareSection, node_rank: int, timeout: float) -> list[dict[str, Any]]:
    plugin = section.plugin
    rows: list[dict[str, Any]] = []
    try:
        resources = plugin.enumerate(node_rank, section.configs)
    except ConfigError as err:
        raise err.prefixed(section.path) from None
    extra = []
    # Robots whose controller runs here but that are attached to another node.
    checks_fn = getattr(plugin, "checks", None)
    for cfg in section.configs:
        if getattr(cfg, "controller_node_rank", None) == node_rank and cfg.node_rank != node_rank:
            extra.extend(plugin.enumerate(cfg.node_rank, [cfg]))
    for res in [*resources, *extra]:
        device = getattr(res.config, "robot_ip", None) or res.info.get("device", "")
        base = {
            "group": section.label,
            "type": plugin.PLUGIN_NAME,
            "node": res.node_rank,
            "local_rank": res.local_rank,
            "device": str(device),
        }
        if checks_fn is not None:
            for check in checks_fn(res, timeout=timeout, on_node=node_rank):
                rows.append({**base, "check": check.name, "ok": check.ok, "detail": check.detail})
        else:
            try:
                plugin.validate(res, timeout=timeout)
                rows.append({**base, "check": "validate", "ok": True, "detail": "ok"})
            except HardwareError as err:
                rows.append({**base, "check": "validate", "ok": False, "detail": str(err)})
    return rows


@click.group("hw")
def hw() -> None:
    """Hardware: validate robots and devices declared in a cluster config."""


@hw.command("check")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "--node-rank",
    type=click.IntRange(min=0),
    default=None,
    help="Check the hardware of this node (default: RLINF_NODE_RANK, else 0).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.05),
    default=5.0,
    show_default=True,
    help="Seconds per connection attempt.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of a table.")
@click.pass_context
def check_cmd(ctx: click.Context, config: str, node_rank: int | None, timeout: float, as_json: bool) -> None:
    """Validate every hardware device of this node declared in CONFIG.

    Checks that each robot answers on its control port, that the camera SDK imports and that
    every configured camera serial is connected. Exits 1 if a check fails, 2 on a config error.
    """
    from rlinf_core.cli import get_host
    from rlinf_core.compose import load_config

    data = load_config(config)
    host = get_host(ctx)
    sections = parse_hardware_sections(data, host.hardware)
    node = _node_rank_from_env() if node_rank is None else node_rank
    rows: list[dict[str, Any]] = []
    for section in sections:
        rows.extend(_rows_for(section, node, timeout))
    failed = [r for r in rows if r["ok"] is False]
    if as_json:
        click.echo(json.dumps({"node_rank": node, "ok": not failed, "checks": rows}, indent=2))
    else:
        _print_table(node, config, rows, sections)
    if failed:
        ctx.exit(1)


def _print_table(node: int, config: str, rows: list[dict[str, Any]], sections: list[HardwareSection]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(soft_wrap=False, highlight=False)
    if not sections:
        console.print(f"{config}: no node group declares hardware; nothing to check.")
        return
    if not rows:
        console.print(f"node {node}: no hardware of {config} is attached to or controlled from this node.")
        return
    table = Table(title=f"hardware of node {node} ({config})")
    for col in ("group", "type", "rank", "device", "check", "result", "detail"):
        table.add_column(col, overflow="fold")
    for r in rows:
        result = (
            "[green]ok[/green]"
            if r["ok"]
            else ("[yellow]skipped[/yellow]" if r["ok"] is None else "[red]FAILED[/red]")
        )
        table.add_row(
            r["group"], r["type"], str(r["local_rank"]), r["device"], r["check"], result, r["detail"]
        )
    console.print(table)
    failed = sum(1 for r in rows if r["ok"] is False)
    console.print(f"{failed} check(s) failed" if failed else "all checks passed")

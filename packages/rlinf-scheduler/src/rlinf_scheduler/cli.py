"""``rlinf cluster`` commands of rlinf-scheduler.

:data:`cluster` is the click group; add a subcommand with ``@cluster.command()``. Modules imported
here stay light (no Ray): a command imports what it needs inside its function.
"""

from __future__ import annotations

from pathlib import Path

import click

from rlinf_core.cli import get_host
from rlinf_core.errors import ConfigError

__all__ = ["cluster", "register"]


@click.group("cluster")
def cluster() -> None:
    """Plan and inspect the cluster: node groups, component placement."""


@cluster.command("plan")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--inventory",
    "inventory_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML of accelerators per node: nodes: [{node_ranks: '0-7', gpus: 8}, ...]; unlisted nodes have 0.",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=0),
    help="Give every node this many GPUs (instead of --inventory).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.pass_context
def plan_cmd(
    ctx: click.Context, config: Path, inventory_path: Path | None, gpus_per_node: int | None, as_json: bool
) -> None:
    """Show where every process of every component would run.

    CONFIG is a full run config; only its `cluster` section is read. Nothing is contacted:
    robots come from the config's hardware.configs, accelerators from the inventory.
    """
    from rlinf_core.config import load_yaml
    from rlinf_scheduler.placement import Inventory, plan_placement, render_table

    if inventory_path is not None and gpus_per_node is not None:
        raise click.UsageError("give --inventory or --gpus-per-node, not both")
    data = load_yaml(config)
    if "cluster" not in data:
        raise ConfigError(
            f"{config} has no `cluster` section (top-level keys: {', '.join(map(str, data)) or 'none'})",
            "cluster",
        )
    section = data["cluster"]
    inventory: Inventory | dict | None
    if inventory_path is not None:
        inventory = load_yaml(
            inventory_path
        )  # validated by the planner, its problems reported with the config's
    elif gpus_per_node is not None:
        inventory = Inventory.uniform(gpus_per_node)
    else:
        inventory = None
    plan = plan_placement(section, inventory, hardware=get_host(ctx))
    if as_json:
        click.echo(plan.to_json())
    else:
        click.echo(render_table(plan), nl=False)


def register(cli: click.Group) -> None:
    """Add the ``cluster`` group to the root ``rlinf`` group."""
    cli.add_command(cluster)

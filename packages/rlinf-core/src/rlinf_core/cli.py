"""The ``rlinf`` command line host.

Core ships ``rlinf --version`` and ``rlinf plugins``; every other subcommand comes from plugins
through the ``rlinf_register_commands`` hook. Errors meant for users (:class:`RlinfError`) are
printed without a traceback and end the command with the error's exit code (2 for configuration
errors); set ``RLINF_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import sys
from typing import Any

import click

from rlinf_core.errors import ConfigError, RlinfError
from rlinf_core.plugins import PluginHost, load_plugins

__all__ = ["build_cli", "get_host", "installed_distributions", "main"]


def installed_distributions() -> list[tuple[str, str]]:
    """``(name, version)`` of every installed rlinf distribution (``rlinf-*``), sorted by name."""
    found: dict[str, str] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"] or ""
        norm = name.lower().replace("_", "-")
        if (norm == "rlinf" or norm.startswith("rlinf-")) and norm not in found:
            found[norm] = dist.version
    return sorted(found.items())


def _print_versions(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    for name, version in installed_distributions():
        click.echo(f"{name} {version}")
    ctx.exit(0)


def get_host(ctx: click.Context | None = None) -> PluginHost:
    """The :class:`PluginHost` of the running CLI (plugins' commands use this to reach registries)."""
    ctx = ctx or click.get_current_context()
    obj = ctx.find_root().obj
    if isinstance(obj, PluginHost):
        return obj
    host = load_plugins()
    ctx.find_root().obj = host
    return host


def _summary(registers: dict[str, list[str]]) -> str:
    parts = [f"{kind}: {', '.join(names)}" for kind, names in registers.items() if names]
    return "; ".join(parts) or "(nothing yet)"


def build_cli() -> click.Group:
    """A fresh root command group with core's own commands (plugins add theirs to it)."""

    @click.group(
        name="rlinf", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
    )
    @click.option(
        "--version",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_print_versions,
        help="Print the version of every installed rlinf distribution and exit.",
    )
    def cli() -> None:
        """rlinf: distributed reinforcement-learning infrastructure for embodied and agentic AI.

        Subcommands come from the installed plugins; `rlinf plugins` lists them.
        """

    @cli.command("plugins")
    @click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
    @click.pass_context
    def plugins_cmd(ctx: click.Context, as_json: bool) -> None:
        """List installed plugins, their distributions and what they register."""
        host = get_host(ctx)
        rows = host.describe()
        failures = [
            {"name": f.name, "distribution": f.distribution, "version": f.version, "error": f.error}
            for f in host.failures
        ]
        if as_json:
            click.echo(json.dumps({"plugins": rows, "failures": failures}, indent=2))
            return
        from rich.console import Console
        from rich.table import Table

        console = Console(soft_wrap=False)
        table = Table(title="rlinf plugins", show_lines=False)
        for col in ("plugin", "distribution", "version", "registers"):
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(row["name"], row["distribution"], row["version"], _summary(row["registers"]))
        console.print(table)
        if not rows:
            console.print("No plugins installed. Install one, e.g. `pip install rlinf-scheduler`.")
        for f in failures:
            console.print(
                f"[red]failed[/red] {f['name']} ({f['distribution']} {f['version']}): {f['error']}",
                markup=True,
            )

    return cli


def _report(err: BaseException) -> None:
    if os.environ.get("RLINF_DEBUG"):
        import traceback

        traceback.print_exception(err)
    from rlinf_core.interpolation import mask_secrets  # no ${oc.env:...} value on the console

    text = mask_secrets(str(err))
    click.echo(text if isinstance(err, ConfigError) else f"error: {text}", err=True)


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the ``rlinf`` console script."""
    try:
        host = load_plugins()
    except RlinfError as err:
        _report(err)
        sys.exit(err.exit_code)
    cli = build_cli()
    host.register_commands(cli)
    for warning in host.warnings:
        click.echo(f"warning: {warning}", err=True)
    for failure in host.failures:
        click.echo(f"warning: {failure} (RLINF_DEBUG=1 shows the traceback)", err=True)
        if os.environ.get("RLINF_DEBUG") and failure.details:
            click.echo(failure.details, err=True)
    try:
        rv = cli.main(args=argv, prog_name="rlinf", standalone_mode=False, obj=host)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except RlinfError as err:
        _report(err)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)

"""``rlinf env``: list the env families and set up those whose simulator needs an interpreter
or a driver of its own."""

from __future__ import annotations

import json

import click

__all__ = ["env_group"]


@click.group("env")
def env_group() -> None:
    """Env families: what is installed, and setting up their simulators."""


@env_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def list_cmd(as_json: bool) -> None:
    """Every env family, its suites, and whether its simulator is ready on this machine."""
    from rlinf_algos.families import get_family
    from rlinf_algos.families.venvs import venv_dir
    from rlinf_core.plugins import load_plugins

    rows = []
    for name in sorted(load_plugins().env_families.names(), key=str.casefold):
        family = get_family(name)
        interp = family.interpreter
        if interp is None:
            where, ready = "rlinf's interpreter", True
        else:
            folder = venv_dir(family.PLUGIN_NAME, interp)
            where, ready = str(folder), (folder / "bin" / "python").is_file()
        ready = ready and family.missing() is None
        rows.append(
            {
                "family": family.PLUGIN_NAME,
                "description": family.description,
                "suites": {k: list(v) for k, v in family.suites().items()},
                "interpreter": where,
                "ready": ready,
                "setup": family.setup_hint,
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        state = "ready" if r["ready"] else f"not set up: {r['setup']}"
        suites = f"; suites: {', '.join(r['suites'])}" if r["suites"] else ""
        click.echo(f"{r['family']}: {r['description']}{suites} ({state})")


@env_group.command("setup")
@click.argument("family_name", metavar="FAMILY")
@click.option("--force", is_flag=True, help="Make the family's interpreter again even if it works.")
def setup_cmd(family_name: str, force: bool) -> None:
    """Make FAMILY's simulator work on this machine: the venv of its own interpreter (MetaWorld,
    LIBERO) in rlinf's cache folder, made with uv from pinned requirements (once made, uv's cache
    makes it again without a network), and what else it needs (ManiSkill: a Vulkan driver)."""
    from rlinf_algos.families import get_family
    from rlinf_algos.families.venvs import setup_family

    family = get_family(family_name, path="FAMILY")
    setup_family(family, force=force, log=click.echo)

"""rlinf plugin of rlinf-net-easytier (entry point ``net-easytier``).

Registers the ``easytier`` network provider and the ``rlinf net`` command group. Imports neither
easytier-pyo3 nor the command implementations at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlinf_core.plugins import hookimpl

if TYPE_CHECKING:
    import click


@hookimpl
def rlinf_register_network_providers() -> list[type]:
    from rlinf_net_easytier.provider import EasyTierProvider

    return [EasyTierProvider]


@hookimpl
def rlinf_register_commands(cli: click.Group) -> None:
    from rlinf_net_easytier.cli import net

    cli.add_command(net)

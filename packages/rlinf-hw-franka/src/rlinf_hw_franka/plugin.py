"""rlinf plugin of rlinf-hw-franka (entry point ``hw-franka``).

Registers the ``Franka`` hardware type, the Franka gymnasium ids and the ``rlinf hw`` commands.
Imports nothing heavy: no franky, pylibfranka, mujoco or gymnasium (they load when an
environment is created).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlinf_core.plugins import hookimpl

if TYPE_CHECKING:
    import click

    from rlinf_core.envs import EnvSpec


@hookimpl
def rlinf_register_hardware() -> list[type]:
    from rlinf_hw_franka.hardware import Franka

    return [Franka]


@hookimpl
def rlinf_register_envs() -> list[EnvSpec]:
    from rlinf_hw_franka.envs import env_specs

    return env_specs()


@hookimpl
def rlinf_register_commands(cli: click.Group) -> None:
    if "hw" in cli.commands:  # another plugin (or core) already provides `rlinf hw`
        return
    from rlinf_hw_franka.cli import hw

    cli.add_command(hw)

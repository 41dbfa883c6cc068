"""Fixtures shared by rlinf-algos' tests: the installed plugins and the ``rlinf`` command group
invoked in process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

from rlinf_core.cli import build_cli
from rlinf_core.plugins import load_plugins


@pytest.fixture(scope="module")
def host() -> Any:
    """The plugins installed in this environment (rlinf-algos' among them)."""
    return load_plugins()


@pytest.fixture
def invoke() -> Callable[..., Any]:
    """``invoke(host, *args)``: run ``rlinf ARGS`` in process with ``host``'s commands; returns
    click's result (exceptions caught, as the console script would report them)."""

    def run(host: Any, *args: str) -> Any:
        cli = build_cli()
        host.register_commands(cli)
        return CliRunner().invoke(cli, list(args), obj=host, catch_exceptions=True)

    return run

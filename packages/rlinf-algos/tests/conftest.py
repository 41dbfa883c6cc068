"""Fixtures shared by rlinf-algos' tests: the installed plugins, the ``rlinf`` command group
invoked in process, and the installed ``rlinf`` console script run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
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


@pytest.fixture
def rlinf_script() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``rlinf_script(*args, timeout=S, cwd=DIR)``: the installed ``rlinf`` console script in a
    subprocess, on an embedded Ray (``RAY_ADDRESS`` dropped, as on a laptop), output captured."""

    def run(*args: str, timeout: float, cwd: Path) -> subprocess.CompletedProcess[str]:
        exe = Path(sys.executable).parent / "rlinf"
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        return subprocess.run(
            [str(exe), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
        )

    return run


@pytest.fixture
def tool_server() -> Any:
    """``with tool_server(entries) as (client, server):`` a
    :class:`~rlinf_algos.tools.placed.ToolServer` of ``entries`` serving in a thread over a
    local channel, and a :class:`~rlinf_algos.tools.placed.PlacedTools` client of it (what a
    placed agent calls its tools through); the server is stopped on leaving."""
    import contextlib
    import threading

    from rlinf_algos.tools.placed import TOOL_STOP, PlacedTools, ToolServer
    from rlinf_core.channel import LocalChannel

    class Host:
        rank, timeout = 0, 30.0

        def __init__(self, ch: LocalChannel) -> None:
            self.ch = ch

        def channel(self, name: str) -> LocalChannel:
            return self.ch

    @contextlib.contextmanager
    def serve(entries: Any) -> Any:
        ch = LocalChannel("tools", default_timeout=30.0)
        server = ToolServer(Host(ch), entries)
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        try:
            yield PlacedTools(ch, "a0/k/tools", 30.0), server
        finally:
            ch.put(TOOL_STOP, "req")
            thread.join(30)

    return serve


@pytest.fixture(scope="session")
def chat_model_folder() -> Callable[[Path, list[str]], Path]:
    """``chat_model_folder(folder, corpus)``: a tiny Qwen2 model folder (random weights, seed 0)
    whose bpe tokenizer (ChatML with tool calls) learnt ``corpus``, the rendered conversations a
    tool-calling test plays."""
    from rlinf_algos.lm import hf
    from rlinf_algos.lm.config import ModelInitConfig

    init = ModelInitConfig(
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        max_position_embeddings=512,
        tokenizer="bpe",
        vocab_size=400,
    )
    return lambda folder, corpus: hf.new_model_folder(folder, init, seed=0, corpus=corpus)


@pytest.fixture
def rlinf_main(capfd: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """``rlinf_main(*args)``: ``rlinf ARGS`` through the console script's entry point in this
    process (its error printing and exit codes included); returns the exit status and everything
    it wrote."""
    from rlinf_core.cli import main

    def run(*args: str) -> tuple[int, str]:
        capfd.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        out = capfd.readouterr()
        return code, out.out + out.err

    return run

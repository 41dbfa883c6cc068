"""Fixtures shared by rlinf-algos' tests: the installed plugins, the ``rlinf`` command group
invoked in process, and the installed ``rlinf`` console script run as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Mapping
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
def install_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str, str, Mapping[str, str]], Path]:
    """``install_plugin(name, module, files)``: a plugin installed the way a package is, in a
    folder put first on ``sys.path``: ``files`` (file name -> source, dedented) beside a
    ``rlinf_NAME-0.1.dist-info`` (distribution ``rlinf-NAME``) whose ``rlinf`` entry point
    ``NAME`` is ``module``; plugin loading is switched on. Returns the folder."""

    def install(name: str, module: str, files: Mapping[str, str]) -> Path:
        site = tmp_path / "site"
        site.mkdir(exist_ok=True)
        for file, text in files.items():
            (site / file).write_text(textwrap.dedent(text), encoding="utf-8")
        info = site / f"rlinf_{name}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: rlinf-{name}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[rlinf]\n{name} = {module}\n")
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.delenv("RLINF_DISABLE_PLUGINS", raising=False)
        monkeypatch.delenv("RLINF_LOAD_PLUGINS", raising=False)
        return site

    return install


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


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    """One embedded Ray for the module (runs attach to it instead of starting their own)."""
    from rlinf_scheduler.runtime.cluster import Cluster

    cluster = Cluster(1, ray_init={"num_cpus": 2})
    yield cluster
    cluster.shutdown()


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

TINY_LM = (
    "model.init.hidden_size=16",
    "model.init.num_layers=1",
    "model.init.num_heads=2",
    "sft.steps=2",
    "sft.batch_size=4",
    "algorithm.iterations=1",
    "algorithm.prompts_per_iter=2",
    "algorithm.group_size=2",
    "task.eval_size=4",
    "runner.eval_interval=0",
)
"""A language-model example shrunk to seconds: a 1-layer model of width 16, a 2-step warm start,
one iteration of 2 prompts x 2 samples, 4 held-out questions, no evaluation between iterations."""


class TinyLM:
    """The tiny settings of a language-model example (``TINY_LM``); a later override wins."""

    overrides = TINY_LM

    def __call__(self, *extra: str) -> list[str]:
        """``TINY_LM`` followed by ``extra``."""
        return [*TINY_LM, *extra]

    def config(self, *extra: str, example: str = "grpo_arith.yaml") -> dict[str, Any]:
        """``examples/EXAMPLE`` (grpo_arith by default) with ``TINY_LM`` and ``extra`` applied."""
        from rlinf_core.config import apply_overrides, load_yaml

        return apply_overrides(load_yaml(EXAMPLES / example), self(*extra))


@pytest.fixture(scope="session")
def tiny_lm() -> TinyLM:
    """``tiny_lm(*extra)``: the override list of a language-model example shrunk to seconds;
    ``tiny_lm.config(*extra, example=...)``: that example's config with them applied."""
    return TinyLM()


class StopThenKill:
    """A fault staged at a point a run reports: at iteration ``k_fault`` its :meth:`hook` (an
    ``on_collecting``, ``on_generating`` or ``on_scoring`` callback) SIGSTOPs the process
    ``victim(run)`` names and SIGKILLs it ``stopped_s`` later, from a thread (the run goes on
    meanwhile, and a peer that waits for the victim waits for a stopped process). Records the
    kill's time, every ``on_iteration`` (its time, ``k``) and each update's ``publish_s``."""

    def __init__(self, k_fault: int, victim: Callable[[Any], int], stopped_s: float = 6.0) -> None:
        self.k_fault, self.victim, self.stopped_s = k_fault, victim, stopped_s
        self.pid: int | None = None
        self.killed_at: float | None = None
        self.iterations: list[tuple[float, int]] = []
        self.publish_s: list[float] = []
        self.thread: threading.Thread | None = None

    def hook(self, run: Any, k: int, *_: Any) -> None:
        if k != self.k_fault or self.pid is not None:
            return
        pid = self.pid = int(self.victim(run))
        os.kill(pid, signal.SIGSTOP)

        def kill() -> None:
            time.sleep(self.stopped_s)
            self.killed_at = time.monotonic()
            os.kill(pid, signal.SIGKILL)

        self.thread = threading.Thread(target=kill, daemon=True)
        self.thread.start()

    def on_iteration(self, run: Any, k: int) -> None:
        self.iterations.append((time.monotonic(), k))
        self.publish_s.append(float((getattr(run, "last_metrics", None) or {}).get("publish_s", 0.0)))

    def callbacks(self, at: str = "on_collecting") -> dict[str, Any]:
        """The run's callbacks: the fault at ``at``, and ``on_iteration``."""
        return {at: self.hook, "on_iteration": self.on_iteration}

    def join(self) -> None:
        """Wait (bounded) until the victim was killed, if it was stopped."""
        if self.thread is not None:
            self.thread.join(self.stopped_s + 5)

    def recovered_after(self) -> float:
        """Seconds from the kill to the first iteration that started after it."""
        assert self.killed_at is not None
        return next(t for t, _ in self.iterations if t > self.killed_at) - self.killed_at


@pytest.fixture(scope="session")
def stop_then_kill() -> type[StopThenKill]:
    """:class:`StopThenKill`: ``stop_then_kill(k_fault, victim)`` stages a fault."""
    return StopThenKill


def _random_ppo_rollout(seed: int, act_dim: int = 1, steps: int = 16, envs: int = 4) -> Any:
    import torch

    from rlinf_algos.ppo.learner import PPORollout

    g = torch.Generator().manual_seed(seed)
    T, N = steps, envs
    z = torch.zeros(T, N, dtype=torch.bool)
    return PPORollout(torch.randn(T, N, 3, generator=g), torch.randn(T, N, act_dim, generator=g),
                      torch.randn(T, N, generator=g) - 1, torch.randn(T, N, generator=g),
                      torch.randn(T, N, generator=g), z, z, torch.zeros(T, N), torch.zeros(N))  # fmt: skip


@pytest.fixture(scope="session")
def random_ppo_rollout() -> Callable[..., Any]:
    """``random_ppo_rollout(seed, act_dim=1, steps=16, envs=4)``: a PPO rollout of random
    observations (3 features), actions, log-probs, rewards and values, seeded, with no episode
    ending: a batch to drive ``PPOLearner.update`` with."""
    return _random_ppo_rollout

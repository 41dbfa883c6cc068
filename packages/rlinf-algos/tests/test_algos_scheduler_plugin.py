"""A second scheduler plugin runs the algorithms: the proof that rlinf-algos reaches the cluster
through rlinf_core's :class:`~rlinf_core.scheduler.Scheduler` interface only.

``threads_scheduler.py`` (beside this file) is a scheduler written against rlinf_core alone
(every rank a thread of this process). The fixture installs it as a user's plugin package is
installed: a ``*.dist-info`` with an ``rlinf`` entry point on ``sys.path``, found by
:func:`rlinf_core.plugins.load_plugins`, with the shipped ``ray`` scheduler plugin disabled
(``RLINF_DISABLE_PLUGINS=scheduler``). A PPO iteration and a ``grpo_lm`` iteration run on it
with ``runner.scheduler: threads``, through the same placed flows (workers, channels, the weight
sync, the env <-> rollout links) a Ray run uses.
"""

from __future__ import annotations

import ast
import csv
import math
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rlinf_algos
from rlinf_core.config import apply_overrides, load_yaml
from rlinf_core.plugins import load_plugins

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[2] / "examples"
SRC = HERE.parent / "src" / "rlinf_algos"
MODULE = "rlinf_testsched_threads"

PPO: dict[str, Any] = {
    "cluster": {
        "num_nodes": 1,
        "component_placement": {
            name: {"node_group": "node", "placement": "0"} for name in ("env", "rollout", "actor")
        },
    },
    "algorithm": {"name": "ppo", "rollout_steps": 32, "minibatch_size": 32, "update_epochs": 2},
    "env": {"id": "Pendulum-v1", "num_envs": 4},
    "rollout": {"pipeline_stages": 2, "max_staleness": 0},
    "runner": {"scheduler": "threads", "total_steps": 256, "log_interval": 128, "seed": 3},
}
"""Two PPO iterations (4 envs x 32 steps each, in two pipeline stages) on the threads scheduler."""

LM_TINY = (  # beside conftest's tiny_lm
    "algorithm.kl_coef=0.05",
    "runner.scheduler=threads",
)


def _install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """Install the ``threads`` scheduler as a plugin distribution (the ``ray`` one disabled);
    returns (the host that loaded it, its module)."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(HERE / "threads_scheduler.py", site / f"{MODULE}.py")
    info = site / "rlinf_testsched-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlinf-testsched\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[rlinf]\ntestsched = {MODULE}\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("RLINF_DISABLE_PLUGINS", "scheduler")  # no Ray scheduler in this run
    monkeypatch.delenv("RLINF_LOAD_PLUGINS", raising=False)
    host = load_plugins()
    mod = sys.modules[MODULE]
    mod.CALLS.clear()
    return host, mod


@pytest.fixture
def threads_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The ``threads`` scheduler installed as a plugin distribution; yields (host, its module)."""
    try:
        yield _install(tmp_path, monkeypatch)
    finally:
        sys.modules.pop(MODULE, None)


def test_rlinf_algos_never_imports_the_scheduler_package() -> None:
    """Every scheduler service comes through rlinf_core: no module of rlinf_algos imports
    ``rlinf_scheduler`` (docstrings may name it)."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(SRC)}: {n}" for n in names if n.split(".")[0] == "rlinf_scheduler"
            ]
    assert offenders == []


def test_the_plugin_is_registered_and_ray_is_not(threads_plugin: Any) -> None:
    host, _ = threads_plugin
    assert "threads" in host.schedulers.names() and "ray" not in host.schedulers.names()
    assert host.schedulers.owner("threads").distribution == "rlinf-testsched"


def _rows(run_dir: Path) -> list[dict[str, float]]:
    """``metrics.csv``'s rows as numbers (empty cells left out); every loss is finite."""
    with (run_dir / "metrics.csv").open() as f:
        rows = [{k: float(v) for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(f)]
    assert rows
    for row in rows:
        assert all(math.isfinite(v) for k, v in row.items() if "loss" in k), row
    return rows


def test_a_ppo_run_on_the_plugin_scheduler(threads_plugin: Any, tmp_path: Path) -> None:
    host, mod = threads_plugin
    summary = rlinf_algos.train(PPO, tmp_path / "run", host=host)
    assert summary["total_env_steps"] == 256
    assert summary["weight_sync"] == {"requested": "auto", "mode": "local"}
    launched = [c for c in mod.CALLS if c.startswith("launch ")]
    assert sorted(launched) == ["launch actor", "launch env", "launch rollout"]
    assert "links" in mod.CALLS
    assert any(c.startswith("weight_sync rlinf-") for c in mod.CALLS)
    rows = _rows(tmp_path / "run")
    assert [int(r["step"]) for r in rows] == [128, 256]
    assert all(r["policy_lag"] == 0 for r in rows)  # max_staleness 0: the weights reached the rollout
    assert (tmp_path / "run" / "policy.safetensors").is_file()


def test_a_grpo_lm_iteration_on_the_plugin_scheduler(
    threads_plugin: Any, tmp_path: Path, tiny_lm: Any
) -> None:
    host, mod = threads_plugin
    config = tiny_lm.config(*LM_TINY)
    summary = rlinf_algos.train(config, tmp_path / "run", host=host)
    assert summary["iterations"] == 1
    assert summary["weight_sync"] == {"requested": "auto", "mode": "local"}
    launched = sorted(c for c in mod.CALLS if c.startswith("launch "))
    assert launched == ["launch actor", "launch reference", "launch reward", "launch rollout"]
    (row,) = _rows(tmp_path / "run")
    assert row["generated_tokens"] > 0 and row["reference_s"] > 0.0  # the reference froze version 0
    assert (tmp_path / "run" / "policy" / "config.json").is_file()


def _learning(run_dir: Path) -> list[tuple[float, ...]]:
    """What a run learned, row by row: the step, the losses and the update's statistics."""
    cols = ("step", "policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm")
    return [tuple(row[c] for c in cols) for row in _rows(run_dir)]


@pytest.mark.slow
def test_weight_sync_modes_and_schedulers_learn_the_same_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quickstart's first two PPO iterations (seed 1, ``rollout.max_staleness: 0``) learn the
    same numbers on the ray scheduler with ``rollout.weight_sync: collective`` (Gloo on CPUs) and
    ``object_store``, and on the threads plugin (its in-process weight sync)."""
    base = ["runner.total_steps=4096", "runner.log_interval=2048", "rollout.max_staleness=0"]
    config = apply_overrides(load_yaml(EXAMPLES / "quickstart.yaml"), base)
    learned = {}
    ray_host = load_plugins()
    ray = ray_host.schedulers.get("ray")(hardware=ray_host)
    ray.start(config)  # one Ray for both runs
    try:  # the ray runs first: the threads plugin is not installed on Ray's workers
        for mode in ("collective", "object_store"):
            cfg = apply_overrides(config, [f"rollout.weight_sync={mode}"])
            summary = rlinf_algos.train(cfg, tmp_path / mode, host=ray_host, scheduler=ray)
            assert summary["weight_sync"] == {"requested": mode, "mode": mode}
            learned[mode] = _learning(tmp_path / mode)
    finally:
        ray.shutdown()
    try:
        host, _ = _install(tmp_path, monkeypatch)
        rlinf_algos.train(
            apply_overrides(config, ["runner.scheduler=threads"]), tmp_path / "threads", host=host
        )
    finally:
        sys.modules.pop(MODULE, None)
    learned["threads"] = _learning(tmp_path / "threads")
    assert [r[0] for r in learned["collective"]] == [2048.0, 4096.0]
    assert learned["collective"] == learned["object_store"] == learned["threads"]

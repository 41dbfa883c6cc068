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


# -- the hops of a placed iteration (issue 50 item 5), on the threads scheduler -----------------
HOPS_LM = [
    *[o for o in LM_TINY if not o.startswith("algorithm.iterations")],
    "algorithm.iterations=2",
    "algorithm.skip_uniform_groups=false",  # an update on every sequence: the KL term moves it
    "+algorithm.overlong={max_length: 12, cache: 10}",  # rewards that differ: a gradient
    "runner.seed=4",
]
"""Beside conftest's ``tiny_lm``: two iterations of ``examples/grpo_arith.yaml`` shrunk, ``kl_coef``
0.05 (the reference runs)."""

HOPS_ROWS = [  # the rows of :data:`HOPS_LM` before the hops were cut (main a79b83f)
    {"reward_mean": 0.0, "train_accuracy": 0.0, "sequences": 4, "generated_tokens": 22, "loss": 0.128564,
     "kl": 0.0, "clip_fraction": 0.0, "grad_norm": 0.393088},
    {"reward_mean": 0.0, "train_accuracy": 0.0, "sequences": 4, "generated_tokens": 56, "loss": 0.075761,
     "kl": 0.0, "clip_fraction": 0.0, "grad_norm": 0.17008},
]  # fmt: skip
ROW_KEYS = (
    "reward_mean",
    "train_accuracy",
    "sequences",
    "generated_tokens",
    "loss",
    "kl",
    "clip_fraction",
    "grad_norm",
)


@pytest.fixture(scope="module")
def hops_run(tmp_path_factory: pytest.TempPathFactory, tiny_lm: Any) -> Iterator[dict[str, Any]]:
    """One placed grpo_lm run (:data:`HOPS_LM`) on the threads scheduler, with what it did
    recorded: every channel put (channel, key, the payload's keys), every file replaced into
    place, the model loads on the driver's thread, and whether each training pass of the reward
    rank found the reference's log-probabilities already computed."""
    import os
    import threading

    from rlinf_algos.lm import hf
    from rlinf_algos.lm.learner import ReferenceModel
    from rlinf_algos.lm.roles import LMScorer
    from rlinf_core.channel import LocalChannel

    tmp = tmp_path_factory.mktemp("hops")
    seen: dict[str, Any] = {"puts": [], "replaced": [], "driver_loads": 0, "reference_first": []}
    referenced = threading.Condition()
    counts = {"reference": 0, "scored": 0}
    put, replace, load, score = LocalChannel.put, os.replace, hf.load_causal_lm, LMScorer.score
    compute = ReferenceModel.compute_log_probs

    def spy_put(self: Any, item: Any, key: Any = None, **kw: Any) -> None:
        seen["puts"].append((self.name, str(key), sorted(item) if isinstance(item, dict) else None))
        return put(self, item, key, **kw) if key is not None else put(self, item, **kw)

    def spy_replace(src: Any, dst: Any) -> None:
        seen["replaced"].append(Path(dst))
        replace(src, dst)

    def spy_load(*a: Any, **kw: Any) -> Any:  # on the driver's thread, besides its warm start
        import traceback

        warm = any(f.name == "warm_start" for f in traceback.extract_stack())
        seen["driver_loads"] += threading.current_thread() is threading.main_thread() and not warm
        return load(*a, **kw)

    def spy_compute(self: Any, batch: Any) -> Any:
        out = compute(self, batch)
        with referenced:
            counts["reference"] += 1
            referenced.notify_all()
        return out

    def spy_score(self: Any, keys: Any, dest: Any, report: Any = None) -> Any:
        if dest:  # the k-th training pass: was its reference computed beside it?
            counts["scored"] += 1
            with referenced:
                k = counts["scored"]
                seen["reference_first"].append(referenced.wait_for(lambda: counts["reference"] >= k, 10.0))
        return score(self, keys, dest, report)

    with pytest.MonkeyPatch.context() as mp:
        host, mod = _install(tmp, mp)
        mp.setattr(LocalChannel, "put", spy_put)
        mp.setattr(os, "replace", spy_replace)
        mp.setattr(hf, "load_causal_lm", spy_load)
        mp.setattr(ReferenceModel, "compute_log_probs", spy_compute)
        mp.setattr(LMScorer, "score", spy_score)
        try:
            config = tiny_lm.config(*HOPS_LM)
            seen["summary"] = rlinf_algos.train(config, tmp / "run", host=host)
            seen["calls"] = list(mod.CALLS)
        finally:
            sys.modules.pop(MODULE, None)
    seen["run_dir"] = tmp / "run"
    yield seen


def test_placed_grpo_lm_rows_are_unchanged_by_the_cut_hops(hops_run: dict[str, Any]) -> None:
    """The same seed learns the same numbers as before the hops were cut: the reordering moved
    data, not maths."""
    import json

    rows = [json.loads(x) for x in (hops_run["run_dir"] / "metrics.jsonl").read_text().splitlines()]
    got = [{k: r[k] for k in ROW_KEYS} for r in rows]
    assert len(got) == len(HOPS_ROWS)
    for row, want in zip(got, HOPS_ROWS, strict=True):
        assert row == pytest.approx(want, rel=1e-4, abs=1e-6)


def test_placed_grpo_lm_moves_whole_episodes_once(hops_run: dict[str, Any]) -> None:
    """The whole episodes (sequences and loss masks) go from where they were played to the
    actor in one hop, once per iteration; the reward rank gets only what it scores, the
    evaluations move no training sequences at all."""
    whole = [(ch, key) for ch, key, keys in hops_run["puts"] if keys and "loss_masks" in keys]
    assert len(whole) == hops_run["summary"]["iterations"] == 2, whole


def test_placed_grpo_lm_reference_runs_beside_the_reward(hops_run: dict[str, Any]) -> None:
    """The reference's log-probabilities do not wait for the rewards: the reference takes the
    sequences as they are played, so each iteration's reward rank finds them already computed
    (before, the actor asked the reference only after every part was scored and packed)."""
    assert hops_run["reference_first"] == [True, True]


def test_placed_grpo_lm_writes_config_yaml_once(hops_run: dict[str, Any]) -> None:
    """``rlinf train`` writes the run's ``config.yaml`` once, atomically (the flow no longer
    writes it again)."""
    assert hops_run["replaced"].count(hops_run["run_dir"] / "config.yaml") == 1


def test_placed_grpo_lm_final_policy_is_the_learners(hops_run: dict[str, Any]) -> None:
    """``policy/`` holds the learner's last weights, written from its state: the driver never
    loads the model itself (before, it loaded a whole copy to count parameters and to write it)."""
    from safetensors.torch import load_file

    from rlinf_algos.rundir import load_checkpoint

    assert hops_run["driver_loads"] == 0
    run_dir = hops_run["run_dir"]
    _, state = load_checkpoint(run_dir, "grpo_lm")
    learner = state["actor"]["weights"]
    written = load_file(str(run_dir / "policy" / "model.safetensors"))
    assert set(learner) <= set(written)
    assert all(torch_equal(written[k], v) for k, v in learner.items())
    summary = hops_run["summary"]
    assert summary["parameters"] == sum(v.numel() for v in learner.values())


def torch_equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_embodied_grpo_starts_no_reference_at_kl_coef_0(threads_plugin: Any, tmp_path: Path) -> None:
    """At ``kl_coef: 0`` (the default) no reference worker is started and the sequences go
    straight from the rollout workers to the actor; the run still learns (finite losses)."""
    host, mod = threads_plugin
    config = apply_overrides(
        load_yaml(EXAMPLES / "grpo_pendulum.yaml"),
        [
            "algorithm.kl_coef=0", "algorithm.group_size=2", "algorithm.num_groups=2", "env.num_envs=4",
            "env.max_episode_steps=10", "runner.total_steps=80", "runner.log_interval=40",
            "runner.checkpoint_interval=0", "runner.scheduler=threads",
        ],
    )  # fmt: skip
    summary = rlinf_algos.train(config, tmp_path / "run", host=host)
    launched = sorted(c for c in mod.CALLS if c.startswith("launch "))
    assert launched == ["launch actor", "launch env", "launch reward", "launch rollout"]
    assert "reference" not in summary["workers"]
    rows = _rows(tmp_path / "run")
    assert rows and all(r["reference_s"] == 0.0 for r in rows)


def test_dry_run_plans_no_reference_at_kl_coef_0() -> None:
    """``--dry-run`` of a GRPO run at ``kl_coef: 0`` (grpo_lm's example, embodied GRPO's with
    the override) leaves the placed ``reference`` out of the plan, the devices and the weight
    sync, and says why; at ``kl_coef > 0`` it is planned."""
    from rlinf_algos.config.prepare import dry_run

    for example, overrides in (("grpo_arith.yaml", []), ("grpo_pendulum.yaml", ["algorithm.kl_coef=0"])):
        out = dry_run(EXAMPLES / example, overrides=overrides)
        assert "reference" not in out["plan"].components and "kl_coef is 0" in out["idle"]["reference"]
        assert "reference" not in out["devices"]
        assert not [m for m in out["weight_sync"]["members"] if m.startswith("reference")]
    out = dry_run(EXAMPLES / "grpo_pendulum.yaml")  # kl_coef 0.01
    assert "reference" in out["plan"].components and out["idle"] == {}

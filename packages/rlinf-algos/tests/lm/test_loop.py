"""End to end: the in-process GRPO loop of both examples with a tiny model (one iteration), the
``grpo_lm`` algorithm class and the ``python -m rlinf_algos.lm`` entry point; full training runs
are marked ``slow``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.lm.algorithm import GRPOLM
from rlinf_algos.lm.config import load_lm_sections
from rlinf_algos.lm.flow import train_lm
from rlinf_core.errors import RlinfError

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

TINY = (  # beside conftest's tiny_lm
    "algorithm.kl_coef=0.05",
    "runner.checkpoint_interval=1",
)


def _run(tiny_lm: Any, name: str, tmp_path: Path, extra: list[str] = ()) -> dict:
    data = tiny_lm.config(*TINY, *extra, example=name)
    return train_lm(load_lm_sections(data), tmp_path, log=None)


@pytest.mark.parametrize(
    ("name", "extra"),
    [("grpo_arith.yaml", []), ("grpo_multiagent.yaml", []), ("grpo_multiagent.yaml", ["task.mode=flat"])],
    ids=["single", "multiagent", "flat"],
)
def test_one_iteration_smoke(name: str, extra: list[str], tmp_path: Path, tiny_lm: Any) -> None:
    summary = _run(tiny_lm, name, tmp_path, extra)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    for key in ("accuracy_before", "accuracy_after"):
        assert 0.0 <= summary[key] <= 1.0
    assert summary["iterations"] == 1 and summary["eval_size"] == 4
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    row = rows[0]
    for phase in ("generate", "reward", "reference", "update", "sync"):
        assert row[f"{phase}_s"] >= 0.0
    assert row["reference_s"] > 0.0  # kl_coef > 0: the reference ran
    assert row["generated_tokens"] > 0
    mode = summary["mode"]
    # in multi-agent mode an episode is a lead and its subagents: more sequences than episodes
    # (unless every lead failed its turn 1, which an untrained model does)
    assert row["sequences"] >= 2 * 2
    assert mode == {"grpo_arith.yaml": "single"}.get(name, "flat" if extra else "multiagent")
    for f in (
        "warm_start/policy/config.json",
        "warm_start/config.yaml",
        "warm_start/data/train.jsonl",
        "policy",
        "checkpoints/step_1/state.safetensors",
        "base_model",
        "metrics.csv",
        "eval_before.json",
    ):
        assert (tmp_path / f).exists(), f
    _check_policy_folder(tmp_path / "policy")


def _check_policy_folder(folder: Path) -> None:
    """``policy/`` is a model folder transformers loads, with the task's tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(folder))
    tok = AutoTokenizer.from_pretrained(str(folder))
    assert model.config.hidden_size == 16 and len(tok) == model.config.vocab_size


def test_algorithm_class_and_module_entry_point(tmp_path: Path, tiny_lm: Any) -> None:
    data = tiny_lm.config(*TINY)
    summary = GRPOLM(load_lm_sections(data).algorithm).run(None, data, tmp_path / "a")
    assert summary["iterations"] == 1
    with pytest.raises(RlinfError, match=r"needs a started rlinf_core\.Scheduler"):
        GRPOLM(load_lm_sections(data).algorithm).run(object(), data, tmp_path / "b")
    # bad input on the command line: a clear message naming the YAML path, exit 2, no traceback
    proc = subprocess.run(
        [sys.executable, "-m", "rlinf_algos.lm", str(EXAMPLES / "grpo_arith.yaml"), "algorithm.group_size=1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "algorithm.group_size" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.learning(seconds=1242)
# the run caps itself at 900 s (runner.time_limit_s) and the command at 1500 s: pytest's default
# 900 s would kill a slow run before its own assertions say what was slow
@pytest.mark.timeout(1500)
def test_grpo_arith_example_gains_accuracy(tmp_path: Path, rlinf_script: Any) -> None:
    """The full single-agent example (a Qwen2-architecture model folder) through ``rlinf train``
    on its default scheduler: at least +30 pp of held-out exact-match accuracy over the warm
    start (``runner.time_limit_s: 900`` caps the run). Two torch threads when it runs alone: the
    warm start, most of the run, is one process's matrix products (0.14 s against 0.21 s a step
    with one thread on the 2-core machine); one under pytest-xdist (CI runs the learning checks
    on two workers, the other core busy with the rest)."""
    run_dir = tmp_path / "run"
    threads = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
    proc = rlinf_script(
        "train", str(EXAMPLES / "grpo_arith.yaml"), f"runner.torch_threads={threads}", "--run-dir", str(run_dir),
        "--quiet", timeout=1500, cwd=EXAMPLES.parent,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["scheduler"] == "ray" and summary["iterations"] == 40
    assert summary["accuracy_after"] - summary["accuracy_before"] >= 0.30, summary


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(3600)
@pytest.mark.skipif(
    not os.environ.get("RLINF_LM_LEARNING"),
    reason="about 35 minutes (a 1500-step multi-agent warm start, then 30 iterations): set "
    "RLINF_LM_LEARNING=1 (kept out of CI's 45-minute budget; grpo_arith's learning check covers the "
    "same warm start and GRPO loop there)",
)
def test_grpo_multiagent_example_gains_accuracy(tmp_path: Path, rlinf_script: Any) -> None:
    """The full multi-agent example (a lead and subagents sharing one Qwen2-architecture model;
    16 agent processes) through ``rlinf train`` on its default scheduler: at least +15 pp of
    held-out accuracy over its warm start. Measured (seed 0, 2026-11-27): 0.348 -> 0.848 (+50.0 pp)
    in 2101 s by hand; 0.348 -> 0.820 (+47.3 pp) in 2298 s through this test."""
    run_dir = tmp_path / "run"
    proc = rlinf_script(
        "train",
        str(EXAMPLES / "grpo_multiagent.yaml"),
        "--run-dir",
        str(run_dir),
        "--quiet",
        timeout=3500,
        cwd=EXAMPLES.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["scheduler"] == "ray" and summary["mode"] == "multiagent"
    assert summary["accuracy_after"] - summary["accuracy_before"] >= 0.15, summary

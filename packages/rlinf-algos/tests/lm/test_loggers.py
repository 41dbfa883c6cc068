"""``runner.loggers`` and the progress bar for language-model runs (``rlinf train`` of a
``grpo_lm`` config, in process) and ``rlinf sft``: TensorBoard gets every metrics row's scalars,
``csv`` can be left out, a run without a terminal gets no progress-bar lines (only the run's own
line every ``runner.log_interval``), and on a terminal the bar counts the iterations."""

from __future__ import annotations

import csv
import io
import json
import re
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinf_algos.config.validate import validate_run_config
from rlinf_algos.progress_bar import ProgressBar
from rlinf_core.config import apply_overrides, load_yaml
from rlinf_core.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

TINY = (  # beside conftest's tiny_lm
    "algorithm.iterations=3",
    "runner.checkpoint_interval=0",
    "runner.log_interval=2",
    "runner.scheduler=local",
)


def tensorboard_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of the event files under ``folder`` (TFRecord framing: a u64
    length, its crc, the ``Event`` proto, its crc)."""
    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, dict[int, float]] = {}
    files = sorted(folder.glob("events.out.tfevents.*"))
    assert files, f"no event file in {folder}"
    for path in files:
        data = path.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[pos : pos + 8])
            event = Event()
            event.ParseFromString(data[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            for value in event.summary.value:
                out.setdefault(value.tag, {})[int(event.step)] = float(value.simple_value)
    return out


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_lm_run_logs_every_row_to_tensorboard_without_progress_spam(
    host: Any, invoke: Any, tmp_path: Path, tiny_lm: Any
) -> None:
    cfg = tmp_path / "grpo.yaml"
    cfg.write_text(yaml.safe_dump(tiny_lm.config(*TINY)))
    run_dir = tmp_path / "run"
    res = invoke(host, "train", str(cfg), "--run-dir", str(run_dir))
    assert res.exit_code == 0, (res.output, res.exception)
    # no terminal: no bar redraws, no line per row; the run's own line every log_interval (2)
    assert "\r" not in res.output and "\x1b[" not in res.output
    iter_lines = [line for line in res.output.splitlines() if line.startswith("iter ")]
    assert len(iter_lines) == 1 and iter_lines[0].startswith("iter    2"), res.output
    csv_rows = rows(run_dir / "metrics.csv")
    assert [int(r["step"]) for r in csv_rows] == [1, 2, 3]
    scalars = tensorboard_scalars(run_dir / "tensorboard")
    for key in ("reward_mean", "train_accuracy", "loss", "generate_s"):
        tag = f"train/{key}"
        assert sorted(scalars[tag]) == [1, 2, 3], (tag, scalars.get(tag))
        for r in csv_rows:
            assert scalars[tag][int(r["step"])] == pytest.approx(float(r[key]), rel=1e-4, abs=1e-6)
    assert sorted(scalars["perf/wall_s"]) == [1, 2, 3]


def test_lm_run_without_csv_and_tensorboard(tmp_path: Path, tiny_lm: Any) -> None:
    from rlinf_algos.training import run_training

    data = apply_overrides(
        load_yaml(EXAMPLES / "grpo_arith.yaml"), tiny_lm(*TINY, "algorithm.iterations=1", "runner.loggers=[]")
    )
    summary = run_training(data, run_dir=tmp_path)
    assert summary["iterations"] == 1
    assert not (tmp_path / "metrics.csv").exists() and not (tmp_path / "tensorboard").exists()
    assert (tmp_path / "metrics.jsonl").is_file() and json.loads((tmp_path / "summary.json").read_text())


def test_lm_loggers_are_checked_up_front(tiny_lm: Any) -> None:
    base = load_yaml(EXAMPLES / "grpo_arith.yaml")
    for loggers, where in (("[csv,mlflow]", "runner.loggers[1]"), ("[csv,csv]", "runner.loggers")):
        with pytest.raises(ConfigError) as err:
            validate_run_config(apply_overrides(base, tiny_lm(*TINY, f"runner.loggers={loggers}")))
        assert where in str(err.value), str(err.value)


def test_sft_logs_to_tensorboard_and_prints_no_bar_without_a_terminal(
    host: Any, invoke: Any, tmp_path: Path
) -> None:
    train = tmp_path / "train.jsonl"
    train.write_text(
        "".join(
            json.dumps({"prompt": f"What is {a} + 1? ", "response": f"{a + 1} #### {a + 1}"}) + "\n"
            for a in range(16)
        )
    )
    cfg = {
        "model": {
            "init": {
                "architecture": "qwen2",
                "hidden_size": 16,
                "num_layers": 1,
                "num_heads": 2,
                "max_position_embeddings": 64,
                "tokenizer": "bpe",
                "vocab_size": 300,
            }
        },
        "data": {"train_files": str(train)},
        "train": {"steps": 6, "batch_size": 4, "lr": 1e-3},
        "runner": {"seed": 0, "torch_threads": 1, "log_interval": 3},
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "run"
    res = invoke(host, "sft", str(path), "--run-dir", str(run_dir))
    assert res.exit_code == 0, (res.output, res.exception)
    assert "\r" not in res.output and "\x1b[" not in res.output
    step_lines = [line for line in res.output.splitlines() if line.startswith("sft step ")]
    assert [line.split()[2] for line in step_lines] == ["3/6", "6/6"], res.output
    csv_rows = rows(run_dir / "metrics.csv")
    scalars = tensorboard_scalars(run_dir / "tensorboard")
    assert sorted(scalars["train/loss"]) == [3, 6]
    for r in csv_rows:
        assert scalars["train/loss"][int(r["step"])] == pytest.approx(float(r["loss"]), rel=1e-4)
        assert scalars["train/lr"][int(r["step"])] == pytest.approx(float(r["lr"]), rel=1e-4)


def test_progress_bar_counts_iterations_on_a_terminal_and_is_silent_otherwise() -> None:
    rows_ = [
        {"step": k, "iteration": k, "reward_mean": 0.5, "train_accuracy": 0.25, "total_steps": 4}
        for k in (1, 2, 3, 4)
    ]
    quiet = io.StringIO()
    bar = ProgressBar(quiet)
    for row in rows_:
        bar(row)
    bar.close()
    assert quiet.getvalue() == ""
    term = io.StringIO()
    bar = ProgressBar(term)
    bar.console.force_terminal = True  # as on a terminal: the bar draws itself
    bar.live = True
    for row in rows_:
        bar(row)
    assert bar.progress.tasks[0].completed == 4 and bar.progress.tasks[0].total == 4
    bar.close()
    assert "4/4" in term.getvalue() and "acc 0.250" in term.getvalue()


def test_wandb_resume_continues_the_same_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run resumed in its run directory (``--resume``) logs to the wandb run it started."""
    pytest.importorskip("wandb")
    from rlinf_algos.rundir import make_sinks

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for step in (1, 2):  # the first run, then the resumed one
        sinks = make_sinks(["wandb"], tmp_path, {"runner": {"seed": 0}})
        sinks.add({"step": step, "loss": 1.0 / step})
        sinks.close()
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    run_id = (tmp_path / "wandb" / "rlinf-run-id").read_text()
    # one offline folder per start, all of one run: wandb names them offline-run-<time>-<id>, and
    # a second start within the same second gets a "-1" suffix on the same name
    assert runs and all(
        re.fullmatch(rf"offline-run-\d{{8}}_\d{{6}}-{run_id}(-\d+)?", r.name) for r in runs
    ), (
        run_id,
        runs,
    )


def test_the_warm_start_honours_runner_loggers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_lm: Any
) -> None:
    """``runner.loggers: [csv]``: the arithmetic warm start (an ``rlinf sft`` run inside
    ``rlinf train``) writes its metrics.csv and never imports tensorboardX (the import is made
    to fail here: the GPU machine has no tensorboardX). Before, the warm start's own config
    left ``loggers`` at its default and opened TensorBoard event files."""
    from rlinf_algos.lm.config import load_lm_sections
    from rlinf_algos.lm.sft import warm_start
    from rlinf_algos.lm.trainer import resolve_model

    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` raises
    data = apply_overrides(
        load_yaml(EXAMPLES / "grpo_arith.yaml"),
        tiny_lm(*TINY, "sft.check_size=4", "runner.loggers=[csv]", "runner.torch_threads=1"),
    )
    run_dir = tmp_path / "run"
    run = resolve_model(load_lm_sections(data), run_dir, lambda _m: None)
    _, stats = warm_start(run, run_dir)
    assert stats["steps"] == 2
    ws = run_dir / "warm_start"
    assert rows(ws / "metrics.csv") and not (ws / "tensorboard").exists()


def _tensorboard_scalars(folder: Path) -> list[tuple[int, str, float]]:
    """The scalars of a TensorBoard folder as TensorBoard shows them: its event files in order,
    a ``SessionLog.START`` event (a restart's ``purge_step``) hiding every earlier scalar at
    its step or later, as TensorBoard's event accumulator purges orphaned data."""
    import struct

    from tensorboardX.proto import event_pb2

    shown: list[tuple[int, str, float]] = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data, i = path.read_bytes(), 0
        while i + 12 <= len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            ev = event_pb2.Event()
            ev.ParseFromString(data[i + 12 : i + 12 + n])
            i += 12 + n + 4
            if ev.HasField("session_log") and ev.session_log.status == event_pb2.SessionLog.START:
                shown = [s for s in shown if s[0] < ev.step]
            shown += [(ev.step, v.tag, round(v.simple_value, 4)) for v in ev.summary.value]
    return shown


def test_tensorboard_shows_each_row_once_after_a_kill_and_a_resume(tmp_path: Path) -> None:
    """A run killed outright (SIGKILL, the out-of-memory killer: its sinks never closed) keeps
    the rows it wrote in its event file, and the run resumed from the checkpoint behind them
    hides the rows it writes again: TensorBoard shows every step once, the resumed run's value
    where both wrote one. Before, the killed run's rows waited in tensorboardX's buffer (lost),
    and a resume showed two values at a step."""
    pytest.importorskip("tensorboardX")
    from rlinf_algos.rundir import make_sinks

    killed = make_sinks(["tensorboard"], tmp_path, {})
    for step in (10, 20, 30):  # checkpoint at 20, killed after the row of 30
        killed.add({"step": step, "loss": 1.0 / step})
    folder = tmp_path / "tensorboard"
    assert [s for s, _, _ in _tensorboard_scalars(folder)] == [10, 20, 30]  # on disk, never closed
    resumed = make_sinks(["tensorboard"], tmp_path, {})
    for step in (30, 40):
        resumed.add({"step": step, "loss": 2.0 / step})
    resumed.close()
    got = _tensorboard_scalars(folder)
    assert [s for s, _, _ in got] == [10, 20, 30, 40]
    assert got[2][2] == round(2.0 / 30, 4)  # the resumed run's row

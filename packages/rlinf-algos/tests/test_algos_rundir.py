"""Runs are never lost: an existing run directory is refused unless resumed or overwritten (moved
aside), a resume skips damaged checkpoints, temp files of a killed run are removed, metrics rows
are never duplicated, and a failed resume leaves ``config.yaml`` as it was."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.training import run_training
from rlinf_core.errors import RlinfError


def config(total_steps: int = 512) -> dict[str, Any]:
    return {
        "algorithm": {"name": "ppo", "rollout_steps": 32, "update_epochs": 1, "minibatch_size": 64},
        "env": {"id": "InvertedPendulum-v5", "num_envs": 4},
        "model": {"hidden_sizes": [8, 8]},
        "runner": {
            "total_steps": total_steps,
            "log_interval": 128,
            "checkpoint_interval": 128,
            "scheduler": "local",
            "loggers": ["csv"],
        },
    }


def steps(run_dir: Path) -> list[int]:
    with (run_dir / "metrics.csv").open() as f:
        return [int(r["step"]) for r in csv.DictReader(f)]


def test_an_existing_run_is_refused_and_overwrite_moves_it_aside(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_training(config(), run_dir=run_dir)
    before = (run_dir / "summary.json").read_text()
    with pytest.raises(RlinfError) as err:
        run_training(config(256), run_dir=run_dir)
    assert "--resume" in str(err.value) and "--overwrite" in str(err.value)
    assert (run_dir / "summary.json").read_text() == before and steps(run_dir) == [128, 256, 384, 512]
    summary = run_training(config(256), run_dir=run_dir, overwrite=True)
    assert summary["total_env_steps"] == 256 and steps(run_dir) == [128, 256]
    (old,) = tmp_path.glob("run.replaced-*")
    assert (old / "summary.json").read_text() == before and len(list((old / "checkpoints").iterdir())) == 4


def test_resume_skips_damaged_checkpoints_and_keeps_the_books_straight(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_training(config(), run_dir=tmp_path)
    ckpts = sorted((tmp_path / "checkpoints").glob("step_*.safetensors"))
    assert [p.name for p in ckpts][-2:] == ["step_0000000384.safetensors", "step_0000000512.safetensors"]
    newest = ckpts[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # cut short
    (tmp_path / "checkpoints" / "step_0000000640.safetensors").write_bytes(b"")  # zero bytes
    stale = tmp_path / "checkpoints" / ".step_0000000768.safetensors.abc123.tmp"  # a kill mid-write
    stale.write_bytes(b"partial")
    with caplog.at_level(logging.WARNING, logger="rlinf.train"):
        summary = run_training(config(768), run_dir=tmp_path, resume=True)
    skipped = [r.getMessage() for r in caplog.records if "skipping the damaged checkpoint" in r.getMessage()]
    assert (
        len(skipped) == 2
        and "step_0000000640.safetensors" in skipped[0]
        and "step_0000000512.safetensors" in skipped[1]
    )
    assert any("removed" in r.getMessage() and stale.name in r.getMessage() for r in caplog.records)
    assert not stale.exists() and summary["total_env_steps"] == 768
    # resumed from step 384: the rows the first run wrote after it are not repeated
    assert steps(tmp_path) == [128, 256, 384, 512, 640, 768]


def test_a_resume_that_cannot_start_keeps_config_yaml(tmp_path: Path) -> None:
    run_training(config(256), run_dir=tmp_path)
    text = (tmp_path / "config.yaml").read_text()
    for p in (tmp_path / "checkpoints").glob("step_*.safetensors"):
        p.write_bytes(b"not a checkpoint")
    with pytest.raises(RlinfError) as err:
        run_training(config(1024), run_dir=tmp_path, resume=True)
    assert "no checkpoint of" in str(err.value) and "step_0000000256.safetensors" in str(err.value)
    assert (tmp_path / "config.yaml").read_text() == text


def test_an_uncreatable_run_dir_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(RlinfError) as err:
        run_training(config(), run_dir=tmp_path / "file" / "run")
    assert "cannot create the run directory" in str(err.value)


def test_summary_of_a_resumed_run_counts_from_the_checkpoint(tmp_path: Path) -> None:
    run_training(config(256), run_dir=tmp_path)
    summary = run_training(config(512), run_dir=tmp_path, resume=True)
    assert (
        json.loads((tmp_path / "summary.json").read_text())["total_env_steps"]
        == 512
        == summary["total_env_steps"]
    )


def test_a_run_that_saved_nothing_leaves_its_directory_reusable(tmp_path: Path) -> None:
    # what a run that failed before its first row or checkpoint leaves behind
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("algorithm: {name: ppo}\n")
    (run_dir / "metrics.csv").write_text("step,wall_s\n")
    summary = run_training(config(256), run_dir=run_dir)
    assert summary["total_env_steps"] == 256 and steps(run_dir) == [128, 256]
    assert not list(tmp_path.glob("run.replaced-*"))
    # once it saved something, the same directory is a run again
    with pytest.raises(RlinfError, match="holds a run"):
        run_training(config(256), run_dir=run_dir)

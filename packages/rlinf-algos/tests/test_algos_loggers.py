"""``runner.loggers``: metrics.csv, TensorBoard and wandb (offline: no network) get the same rows."""

from __future__ import annotations

import csv
import json
import math
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.config.validate import validate_run_config
from rlinf_algos.training import run_training
from rlinf_core.errors import ConfigError


def config(loggers: list[str]) -> dict[str, Any]:
    return {
        "algorithm": {"name": "ppo", "rollout_steps": 32, "update_epochs": 1, "minibatch_size": 64},
        "env": {"id": "InvertedPendulum-v5", "num_envs": 4},
        "model": {"hidden_sizes": [8, 8]},
        "runner": {"total_steps": 512, "log_interval": 128, "scheduler": "local", "loggers": loggers},
    }


def wandb_history(path: Path) -> dict[int, dict[str, float]]:
    """The history rows of an offline ``run-*.wandb`` file, by step: the file is LevelDB's log
    format (32 KiB blocks of records with a 7-byte header, split records typed first/middle/last)
    holding wandb's protobuf ``Record`` messages."""
    from wandb.proto import wandb_internal_pb2 as pb

    def chunks(data: bytes) -> Iterator[bytes]:
        pos, buf = 7, b""  # after the ':W&B' header
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
                pos += 32768 - pos % 32768
                continue
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            part, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
            if kind == 1:
                yield part
            elif kind in (2, 3):
                buf = part if kind == 2 else buf + part
            elif kind == 4:
                yield buf + part

    out: dict[int, dict[str, float]] = {}
    for raw in chunks(path.read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            out[int(record.history.step.num)] = items
    return out


def test_wandb_offline_logs_the_rows_of_metrics_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_training(config(["csv", "tensorboard", "wandb"]), run_dir=tmp_path)
    with (tmp_path / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [128, 256, 384, 512]
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, list((tmp_path / "wandb").iterdir())
    # wandb's service process writes the file: once in CI (a loaded machine) it held no history
    # record yet when finish() had returned, so give its writer a moment
    deadline = time.monotonic() + 60
    while sorted(history := wandb_history(runs[0])) != [128, 256, 384, 512] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sorted(history) == [128, 256, 384, 512]
    for row in rows:  # every numeric column of every row, under its TensorBoard tag
        logged = history[int(row["step"])]
        for key, text in row.items():
            if key == "step" or text in ("", "nan"):
                continue
            tag = next(t for t in logged if t.split("/", 1)[-1] == key)
            assert math.isclose(logged[tag], float(text), rel_tol=1e-5, abs_tol=1e-9), (
                key,
                logged[tag],
                text,
            )
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_loggers_without_csv_or_tensorboard(tmp_path: Path) -> None:
    run_training(config([]), run_dir=tmp_path)
    assert not (tmp_path / "metrics.csv").exists() and not (tmp_path / "tensorboard").exists()
    assert json.loads((tmp_path / "summary.json").read_text())["total_env_steps"] == 512


def test_unknown_or_repeated_logger_is_a_config_error() -> None:
    for loggers, message in ((["csv", "mlflow"], "runner.loggers[1]"), (["csv", "csv"], "runner.loggers")):
        with pytest.raises(ConfigError) as err:
            validate_run_config(config(loggers))
        assert message in str(err.value), str(err.value)

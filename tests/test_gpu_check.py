"""``tools/gpu_check.py --cpu``: every step of the device check passes on the CPU and the report
says so (the same steps run on a GPU without ``--cpu``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_cpu_mode_passes_and_writes_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = tmp_path / "report.json"
    assert mod.main(["--cpu", "--report", str(report)]) == 0, capsys.readouterr().out
    data = json.loads(report.read_text())
    assert data["device"] == "cpu" and len(data["steps"]) == 12
    assert all(s["ok"] for s in data["steps"]) and "torch_cuda" in data
    out = capsys.readouterr().out
    assert "PASS  cpu vs device" in out and "PASS  fsdp learner of one" in out
    assert "gloo, fsdp" in out and "PASS  sft bf16" in out

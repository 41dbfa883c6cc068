"""The learning check of issue 40 (opt-in: a warm start and 15 minutes of GRPO per seed on the
2-core machine, beyond CI's budget): ``RLINF_SEARCH_AGENT_SEEDS=0,1,2 uv run pytest
tests/test_e2e_search_agent.py``. Each seed runs ``benchmarks/search_agent_seeds.py`` (make the
data, ``rlinf sft``, the warm start's held-out success, ``rlinf train`` of grpo.yaml, the held-out
success after) and asserts a gain of at least 20 points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEEDS = [int(s) for s in os.environ.get("RLINF_SEARCH_AGENT_SEEDS", "").split(",") if s.strip()]


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.skipif(
    not SEEDS, reason="a warm start and 15 minutes of GRPO per seed: set RLINF_SEARCH_AGENT_SEEDS=0,1,2"
)
@pytest.mark.parametrize("seed", SEEDS or [0])
def test_grpo_raises_held_out_success_by_20_points(seed: int, tmp_path: Path) -> None:
    out = tmp_path / "record.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/search_agent_seeds.py", "--seeds", str(seed), "--keep",
         str(tmp_path / "work"), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=3 * 3600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["figures"]
    assert row["gain points"] >= 20.0, row

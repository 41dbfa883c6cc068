"""The learning check of issue 40 (opt-in: a warm start of about 45 minutes and up to 15 minutes of
GRPO per seed on the 2-core machine, beyond CI's budget): ``RLINF_SEARCH_AGENT_SEEDS=0,1,2 uv run
pytest tests/test_e2e_search_agent.py``. It runs ``benchmarks/search_agent_seeds.py`` (make the
data, one ``rlinf sft`` warm start of seed 0, its held-out success, ``rlinf train`` of grpo.yaml
for every seed at once, the held-out success after) and asserts a gain of at least 20 points on
each seed."""

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
def test_grpo_raises_held_out_success_by_20_points(tmp_path: Path) -> None:
    out = tmp_path / "record.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/search_agent_seeds.py", "--seeds", ",".join(map(str, SEEDS)),
         "--warm-seed", "0", "--jobs", str(len(SEEDS)), "--keep", str(tmp_path / "work"), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=3 * 3600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())["figures"]
    assert [r["seed"] for r in rows] == SEEDS
    assert all(r["gain points"] >= 20.0 for r in rows), rows

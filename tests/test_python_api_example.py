"""``examples/python_api.py``, the notebook-style use of rlinf from Python (train CartPole with
``rlinf_algos.train``, ``load_policy``, a plain gymnasium loop), run as a user runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "python_api.py"


@pytest.mark.slow  # the example's whole training run
def test_the_python_api_example_trains_loads_and_drives_a_policy(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "12288", "--episodes", "3", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / "policy.safetensors").is_file() and not list(run_dir.rglob("*.pt"))
    mean = float(re.search(r"mean ([0-9.]+)\)", proc.stdout).group(1))
    # a random CartPole policy lasts about 22 steps; 12k steps of PPO already do far better
    assert mean > 40, proc.stdout
    assert re.search(r"a batch of 4 observations -> actions \[[01] [01] [01] [01]\]", proc.stdout), (
        proc.stdout
    )

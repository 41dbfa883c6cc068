"""Shared helpers of the cross-package tests."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def uv_bin() -> str:
    """The uv executable (``uv run`` exports it as ``UV``)."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.skip("uv is not on PATH; the README's set-up installs it (python3 -m pip install uv)")
    return found


@pytest.fixture(scope="module")
def bench(request: pytest.FixtureRequest) -> Any:
    """The benchmark a test module names in ``BENCHMARK`` (``benchmarks/BENCHMARK.py``) imported
    as a module, with ``benchmarks/`` on ``sys.path`` while the module's tests run (for the
    benchmark's own imports: ``_report``, ``_peers``, ``_sb3``)."""
    name = request.module.BENCHMARK
    bench_dir = str(ROOT / "benchmarks")
    sys.path.insert(0, bench_dir)
    try:
        spec = importlib.util.spec_from_file_location(
            f"{name}_under_test", ROOT / "benchmarks" / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(bench_dir)

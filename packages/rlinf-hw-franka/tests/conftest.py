"""Shared fixtures of rlinf-hw-franka's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES

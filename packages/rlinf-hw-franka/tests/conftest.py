"""Shared fixtures of rlinf-hw-franka's tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# MuJoCo picks its OpenGL platform at import: render offscreen through EGL on headless machines.
if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES

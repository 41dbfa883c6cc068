"""Shared helpers of the cross-package tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def uv_bin() -> str:
    """The uv executable (``uv run`` exports it as ``UV``)."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.skip("uv is not on PATH; the README's set-up installs it (python3 -m pip install uv)")
    return found

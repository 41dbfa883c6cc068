"""Atomic writes: all or nothing, permissions, no temp files left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rlinf_core.io import atomic_open, atomic_path, atomic_write_text


def test_write_replace_and_perms(tmp_path):
    target = tmp_path / "sub" / "status.json"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two", perms=0o640)
    assert target.read_text() == "two"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert os.listdir(target.parent) == ["status.json"]


def test_failure_keeps_old_content_and_removes_temp(tmp_path):
    target = tmp_path / "ckpt.bin"
    with atomic_open(target) as f:
        f.write(b"good")
    with pytest.raises(RuntimeError), atomic_open(target) as f:
        f.write(b"half")
        raise RuntimeError("killed mid-save")
    assert target.read_bytes() == b"good"
    assert os.listdir(tmp_path) == ["ckpt.bin"]


def test_bad_mode():
    with pytest.raises(ValueError, match="mode"), atomic_open("x", "a"):
        pass


def test_atomic_path_replaces_on_success_and_keeps_the_old_file_on_error(tmp_path: Path) -> None:

    target = tmp_path / "sub" / "state.bin"
    with atomic_path(target) as tmp:
        Path(tmp).write_bytes(b"first")
    assert target.read_bytes() == b"first"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        Path(tmp).write_bytes(b"half")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"first" and sorted(p.name for p in target.parent.iterdir()) == [
        "state.bin"
    ]

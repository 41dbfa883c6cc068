"""Atomic file writes: a reader (or a crash) never sees a half-written file.

Every checkpoint, policy, status file, token and record rlinf writes goes through here: the data
goes to a temp file in the target's folder, is flushed and fsynced, gets its permissions, and only
then replaces the target with ``os.replace`` (atomic on POSIX). On any error the temp file is
removed and the old target, if any, is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_open", "atomic_write_text"]


@contextlib.contextmanager
def atomic_open(
    path: str | os.PathLike[str], mode: str = "wb", *, perms: int | None = None, fsync: bool = True
) -> Iterator[IO[Any]]:
    """Open a temp file beside ``path`` for writing; on a clean exit it replaces ``path``.

    Parameters:
        path: the file to (re)place; missing parent folders are created.
        mode: ``"wb"`` or ``"w"`` (text mode writes UTF-8).
        perms: permission bits for the new file (e.g. ``0o600`` for secrets); by default
            ``mkstemp``'s private ``0o600``.
        fsync: fsync the data before the rename, so a power cut cannot leave an empty file.

    Example::

        with atomic_open(run_dir / "policy.pt") as f:
            torch.save(state, f)
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open: mode must be 'wb' or 'w', got {mode!r}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        if perms is not None:
            os.fchmod(fd, perms)
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(
    path: str | os.PathLike[str], text: str, *, perms: int | None = None, fsync: bool = True
) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; return the path."""
    with atomic_open(path, "w", perms=perms, fsync=fsync) as f:
        f.write(text)
    return Path(path)

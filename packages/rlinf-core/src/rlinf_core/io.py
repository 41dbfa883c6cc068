"""Atomic file writes (a reader, or a crash, never sees a half-written file) and guarded reads of
the files users hand to rlinf.

Every checkpoint, policy, status file, token and record rlinf writes goes through here: the data
goes to a temp file in the target's folder, is flushed and fsynced, gets its permissions, and only
then replaces the target with ``os.replace`` (atomic on POSIX). On any error the temp file is
removed and the old target, if any, is left as it was.

Every file a user names (a config, an inventory, a run's ``metrics.csv``) is read with
:func:`read_user_text`: a FIFO or device is refused before it is opened (it could block or never
end), a file over a size limit before it is read, and bytes that are not UTF-8 with their line.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from rlinf_core.errors import RlinfError

__all__ = [
    "MAX_USER_FILE_BYTES",
    "atomic_open",
    "atomic_path",
    "atomic_write_jsonl",
    "atomic_write_text",
    "read_user_text",
]

MAX_USER_FILE_BYTES = 16 * 2**20
"""The largest config or inventory file rlinf reads (16 MiB; real ones are a few KiB)."""


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

        with atomic_open(run_dir / "summary.json", "w") as f:
            json.dump(summary, f)
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


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temp file's path beside ``path``, for writers that take a path rather than a file
    (``safetensors.torch.save_file``); on a clean exit the temp file is fsynced and replaces
    ``path``, on an error it is removed and ``path`` is left as it was.

    Example::

        with atomic_path(run_dir / "policy.safetensors") as tmp:
            save_file(tensors, tmp)
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as f:
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


def atomic_write_jsonl(path: str | os.PathLike[str], rows: Iterable[Any]) -> int:
    """Write ``rows`` as JSON lines (UTF-8, non-ASCII kept) to ``path`` atomically, its folder
    made; return how many."""
    import json

    lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in rows]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(lines))
    return len(lines)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def read_user_text(
    path: str | os.PathLike[str],
    *,
    what: str = "file",
    max_bytes: int = MAX_USER_FILE_BYTES,
    error: type[RlinfError] = RlinfError,
) -> str:
    """The UTF-8 text of a file a user named, or ``error`` with one line saying which file, what
    is wrong and what to do.

    Refused without reading: a missing path, a directory, anything that is not a regular file (a
    FIFO would block, ``/dev/zero`` never ends) and a file over ``max_bytes``. Refused after
    reading: bytes that are not UTF-8 (the message gives the line and column of the first bad
    byte). A UTF-8 byte-order mark is dropped.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise error(f"{what} not found: {p}") from None
    except OSError as err:
        raise error(f"cannot read the {what} {p}: {err.strerror or err}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{p} is a directory; give the path of the {what}")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{p} is not a regular file (a FIFO, device or socket); give the path of the {what}")
    if st.st_size > max_bytes:
        raise error(
            f"{p} is {_size(st.st_size)}, over the {_size(max_bytes)} a {what} may have; is it the right file?"
        )
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise error(f"cannot read the {what} {p}: {err.strerror or err}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat above
            raise error(f"{p} is not a regular file; give the path of the {what}")
        with os.fdopen(fd, "rb") as f:
            fd = -1
            data = f.read(max_bytes + 1)
    except OSError as err:
        raise error(f"cannot read the {what} {p}: {err.strerror or err}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_bytes:
        raise error(f"{p} is over the {_size(max_bytes)} a {what} may have; is it the right file?")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise error(
            f"{p} is not UTF-8 text (byte 0x{data[err.start]:02x} at line {line}, column {column}); "
            f"save the {what} as UTF-8"
        ) from None

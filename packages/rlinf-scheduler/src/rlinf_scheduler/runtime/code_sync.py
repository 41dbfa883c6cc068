"""Code sync: ship the driver's rlinf packages to every worker through Ray's ``py_modules``.

When the driver and the workers do not share a filesystem (cloud-edge, heterogeneous clusters), set
``RLINF_CODE_WORKING_DIR`` before the driver starts; the packages become part of the job's
``runtime_env`` and every worker imports them instead of its installed copy:

- unset, ``0``, ``false``, ``no``, ``off``: sync is off (every node needs the same rlinf installed;
  :mod:`~rlinf_scheduler.runtime.versions` checks that);
- ``auto``: every installed ``rlinf_*`` package that is installed from local source (an editable
  install or a uv workspace member), found through its distribution's ``direct_url.json``;
- an absolute path: a workspace root holding ``packages/*/src/rlinf_*`` (every such package), or one
  package directory (``.../rlinf_core`` or a member directory ``.../rlinf-core`` with ``src/rlinf_core``);
- a relative or missing path: a :class:`~rlinf_core.errors.ConfigError`.

Only the packages are shipped, never examples, configs, data or weights. A package larger than
``RLINF_CODE_SYNC_MAX_MB`` (default 50) is refused, naming its largest files: logs, checkpoints
and datasets do not belong inside a package. ``__pycache__`` and ``*.pyc`` are not shipped.

Pure Python (no Ray): :func:`resolve_code_sync` says what would be shipped; the
:class:`~rlinf_scheduler.runtime.cluster.Cluster` puts :meth:`CodeSync.runtime_env` into the job.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rlinf_core.errors import ConfigError

__all__ = [
    "CODE_DIR_ENV",
    "DEFAULT_MAX_MB",
    "MAX_MB_ENV",
    "CodeSync",
    "ShippedPackage",
    "local_source_packages",
    "resolve_code_sync",
]

CODE_DIR_ENV = "RLINF_CODE_WORKING_DIR"
MAX_MB_ENV = "RLINF_CODE_SYNC_MAX_MB"
DEFAULT_MAX_MB = 50.0
_OFF = {"", "0", "false", "no", "off"}
EXCLUDES = ("__pycache__", "*.pyc", "*.pyo")


@dataclass(frozen=True)
class ShippedPackage:
    """One package directory that is shipped (``name`` is its import name)."""

    name: str
    path: Path
    size_bytes: int


@dataclass(frozen=True)
class CodeSync:
    """What code sync ships: the packages and where the setting came from."""

    packages: tuple[ShippedPackage, ...]
    source: str

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.packages]

    def runtime_env(self) -> dict[str, object]:
        """The ``py_modules`` (and ``excludes``) part of a Ray ``runtime_env``."""
        return {"py_modules": [str(p.path) for p in self.packages], "excludes": list(EXCLUDES)}

    def describe(self) -> str:
        return ", ".join(f"{p.name} ({p.size_bytes / 1e6:.1f} MB from {p.path})" for p in self.packages)


def _max_bytes(env: Mapping[str, str]) -> tuple[float, int]:
    raw = env.get(MAX_MB_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_MB, int(DEFAULT_MAX_MB * 1e6)
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb > 0:
        raise ConfigError(f"{MAX_MB_ENV}={raw!r} must be a positive number of megabytes (default 50)")
    return mb, int(mb * 1e6)


def _walk(path: Path) -> list[tuple[int, Path]]:
    files = []
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for n in names:
            if n.endswith((".pyc", ".pyo")):
                continue
            p = Path(root) / n
            try:
                files.append((p.stat().st_size, p))
            except OSError:
                continue
    return files


def _package(name: str, path: Path, limit_mb: float, limit: int) -> ShippedPackage:
    files = _walk(path)
    size = sum(s for s, _ in files)
    if size > limit:
        top = sorted(files, key=lambda f: f[0], reverse=True)[:5]
        listing = ", ".join(f"{p.relative_to(path)} ({s / 1e6:.1f} MB)" for s, p in top)
        raise ConfigError(
            f"package {name} at {path} is {size / 1e6:.1f} MB, over the {limit_mb:g} MB code-sync limit "
            f"({MAX_MB_ENV}); largest files: {listing}. Move logs, checkpoints and data out of the "
            f"package, or raise {MAX_MB_ENV}",
            CODE_DIR_ENV,
        )
    return ShippedPackage(name, path, size)


def _is_package_dir(path: Path) -> bool:
    return path.name.startswith("rlinf_") and (path / "__init__.py").is_file()


def local_source_packages() -> list[tuple[str, Path]]:
    """``(import name, directory)`` of every installed rlinf package installed from local source
    (editable or a workspace member: its ``direct_url.json`` has a ``file://`` URL)."""
    out: dict[str, Path] = {}
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not (name == "rlinf" or name.startswith("rlinf-")):
            continue
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "null")
        except (OSError, ValueError):
            direct = None
        if not isinstance(direct, dict) or not str(direct.get("url", "")).startswith("file:"):
            continue  # installed from an index: the nodes must install it too
        module = name.replace("-", "_")
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            continue
        out.setdefault(module, Path(next(iter(spec.submodule_search_locations))).resolve())
    return sorted(out.items())


def resolve_code_sync(value: str | None = None, *, env: Mapping[str, str] | None = None) -> CodeSync | None:
    """What ``RLINF_CODE_WORKING_DIR`` (or ``value``) ships, or ``None`` when sync is off.

    Raises :class:`ConfigError` for a relative or missing path, a path that holds no rlinf package,
    ``auto`` with no package installed from local source, or a package over the size limit.
    """
    env = os.environ if env is None else env
    raw = env.get(CODE_DIR_ENV) if value is None else value
    text = (raw or "").strip()
    if text.lower() in _OFF:
        return None
    limit_mb, limit = _max_bytes(env)
    where = f"{CODE_DIR_ENV}={text!r}"
    if text.lower() == "auto":
        found = local_source_packages()
        if not found:
            raise ConfigError(
                f"{where}: no rlinf package is installed from local source (editable or workspace); "
                "install with `pip install -e` / `uv sync`, or give the absolute path of a checkout",
                CODE_DIR_ENV,
            )
        return CodeSync(tuple(_package(n, p, limit_mb, limit) for n, p in found), "auto")
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise ConfigError(
            f"{where} is a relative path; give an absolute path (a workspace root or an rlinf package "
            "directory), `auto`, or 0 to turn sync off",
            CODE_DIR_ENV,
        )
    if not path.is_dir():
        raise ConfigError(f"{where}: no such directory", CODE_DIR_ENV)
    path = path.resolve()
    candidates: list[Path]
    if _is_package_dir(path):
        candidates = [path]
    else:
        candidates = sorted(p for p in path.glob("src/rlinf_*") if _is_package_dir(p))
        if not candidates:
            candidates = sorted(p for p in path.glob("packages/*/src/rlinf_*") if _is_package_dir(p))
    if not candidates:
        raise ConfigError(
            f"{where} holds no rlinf package: expected a workspace root (packages/*/src/rlinf_*/), a "
            "member directory (src/rlinf_*/) or a package directory (rlinf_*/__init__.py)",
            CODE_DIR_ENV,
        )
    return CodeSync(tuple(_package(p.name, p, limit_mb, limit) for p in candidates), str(path))

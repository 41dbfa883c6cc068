"""rlinf_scheduler."""

from __future__ import annotations

import importlib.metadata as _md

try:
    __version__ = _md.version("rlinf-scheduler")
except _md.PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0.0.0"

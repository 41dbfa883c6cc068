"""rlinf_algos."""

from __future__ import annotations

import importlib.metadata as _md

from rlinf_algos.saved_policy import load_policy as load_policy  # a run's policy, in a user's loop
from rlinf_algos.train_api import train as train  # the Python API of `rlinf train`

try:
    __version__ = _md.version("rlinf-algos")
except _md.PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0.0.0"

"""`import rlinf_core` stays light: no torch, ray, simulator, robot or network SDK."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "ray", "mujoco", "gymnasium", "easytier_pyo3", "franky", "pylibfranka", "numpy")


def test_import_rlinf_core_pulls_nothing_heavy():
    code = (
        "import sys, json\n"
        "import rlinf_core, rlinf_core.cli, rlinf_core.plugins, rlinf_core.config, rlinf_core.hookspecs\n"
        "from rlinf_core.plugins import load_plugins\n"
        "load_plugins(entry_points=[])\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == []


def test_public_names_are_exported():
    import rlinf_core

    for name in rlinf_core.__all__:
        assert hasattr(rlinf_core, name), name

"""The plugin imports nothing heavy and registers the hardware type, the env ids and `rlinf hw`."""

from __future__ import annotations

import json
import subprocess
import sys

from rlinf_core.plugins import load_plugins

HEAVY = ["mujoco", "gymnasium", "franky", "pylibfranka", "torch", "ray", "numpy", "pyrealsense2"]


def test_plugin_and_hardware_import_light() -> None:
    code = (
        "import sys, json\n"
        "import rlinf_hw_franka.plugin as p\n"
        "p.rlinf_register_hardware(); p.rlinf_register_envs()\n"
        "import click; g = click.Group('rlinf'); p.rlinf_register_commands(cli=g)\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_registrations() -> None:
    host = load_plugins()
    assert "hw-franka" in host.plugins, host.failures
    assert host.hardware.get("FRANKA").PLUGIN_NAME == "Franka"
    specs = host.envs
    assert specs["rlinf/FrankaReach-v0"].kwargs == {"backend": "mujoco"}
    assert specs["rlinf/FrankaReachReal-v0"].kwargs == {"backend": "franky"}
    assert specs["rlinf/FrankaReach-v0"].entry_point == "rlinf_hw_franka.env:FrankaEnv"
    row = next(r for r in host.describe() if r["name"] == "hw-franka")
    assert row["registers"]["commands"] == ["hw"]
    assert row["registers"]["hardware"] == ["Franka"]

"""Install-only-what-you-need, checked from built wheels in fresh virtual environments.

1. rlinf-core plus the third-party sample ``examples/rlinf-hw-demo``: ``rlinf plugins --json``
   lists the sample and the hardware type it registers, and its config model validates.
2. rlinf-core plus rlinf-hw-franka alone: installs without ray or torch, and ``rlinf plugins`` works.

Wheels are built with ``uv build`` and installed with ``uv pip`` from the package registry (or
uv's cache), as a user would install them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def sh(*args: object, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, f"{args} failed:\n{res.stdout}\n{res.stderr}"
    return res


@pytest.fixture(scope="module")
def wheels(tmp_path_factory, uv_bin) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    built = {}
    for name, folder in [
        ("rlinf-core", "packages/rlinf-core"),
        ("rlinf-hw-franka", "packages/rlinf-hw-franka"),
        ("rlinf-hw-demo", "examples/rlinf-hw-demo"),
    ]:
        sh(uv_bin, "build", "--wheel", "--out-dir", out, ROOT / folder)
        (wheel,) = out.glob(f"{name.replace('-', '_')}-*.whl")
        built[name] = wheel
    return built


def venv_with(tmp_path: Path, uv_bin: str, *wheel_files: Path) -> Path:
    venv = tmp_path / "venv"
    sh(uv_bin, "venv", "--quiet", "--python", "3.11", venv)
    python = venv / "bin" / "python"
    sh(uv_bin, "pip", "install", "--quiet", "--python", python, *wheel_files)
    return venv


def installed(uv_bin: str, venv: Path) -> set[str]:
    res = sh(uv_bin, "pip", "list", "--format", "json", "--python", venv / "bin" / "python")
    return {row["name"].lower() for row in json.loads(res.stdout)}


def test_third_party_plugin_from_its_own_wheel(tmp_path, uv_bin, wheels):
    venv = venv_with(tmp_path, uv_bin, wheels["rlinf-core"], wheels["rlinf-hw-demo"])
    res = sh(venv / "bin" / "rlinf", "plugins", "--json")
    data = json.loads(res.stdout)
    assert data["failures"] == []
    (row,) = data["plugins"]
    assert (row["name"], row["distribution"], row["version"]) == ("hw-demo", "rlinf-hw-demo", "0.1.0")
    assert row["registers"]["hardware"] == ["DemoArm"]
    # the vendor's config model is what validates its YAML entries
    code = (
        "from rlinf_core import load_plugins, ConfigError\n"
        "arm = load_plugins().hardware.get('demoarm')\n"
        "try:\n"
        "    arm.parse_config({'node_rank': 0, 'host': 'not-an-ip'}, 'cluster.node_groups[0].hardware.configs[0]')\n"
        "except ConfigError as err:\n"
        "    print(err)\n"
    )
    res = sh(venv / "bin" / "python", "-c", code)
    assert res.stdout.startswith("cluster.node_groups[0].hardware.configs[0].host:")
    assert "ray" not in installed(uv_bin, venv)


def test_core_and_franka_install_without_ray_or_torch(tmp_path, uv_bin, wheels):
    venv = venv_with(tmp_path, uv_bin, wheels["rlinf-core"], wheels["rlinf-hw-franka"])
    names = installed(uv_bin, venv)
    assert {"rlinf-core", "rlinf-hw-franka"} <= names
    assert not names & {"ray", "torch"}, f"unexpected heavy dependencies: {names & {'ray', 'torch'}}"
    res = sh(venv / "bin" / "rlinf", "plugins", "--json")
    data = json.loads(res.stdout)
    assert [p["distribution"] for p in data["plugins"]] == ["rlinf-hw-franka"]
    assert sh(venv / "bin" / "rlinf", "--version").stdout.splitlines() == [
        "rlinf-core 0.1.0",
        "rlinf-hw-franka 0.1.0",
    ]

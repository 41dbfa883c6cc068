"""The workspace as a whole: every member registers its plugin, versions line up, plugins stay light."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MEMBERS = {
    "rlinf-scheduler": ("scheduler", "rlinf_scheduler"),
    "rlinf-algos": ("algos", "rlinf_algos"),
    "rlinf-hw-franka": ("hw-franka", "rlinf_hw_franka"),
    "rlinf-net-easytier": ("net-easytier", "rlinf_net_easytier"),
}
HEAVY = ("torch", "ray", "mujoco", "gymnasium", "easytier_pyo3", "franky", "pylibfranka")


def rlinf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlinf_core", *args], capture_output=True, text=True, timeout=120
    )


def pyproject(member: str) -> dict:
    return tomllib.loads((ROOT / "packages" / member / "pyproject.toml").read_text())


def test_plugins_lists_the_four_plugins():
    res = rlinf("plugins", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["failures"] == []
    rows = {p["distribution"]: p for p in data["plugins"]}
    for dist, (ep_name, module) in MEMBERS.items():
        assert rows[dist]["name"] == ep_name
        assert rows[dist]["module"] == f"{module}.plugin"
        assert rows[dist]["version"] == pyproject(dist)["project"]["version"]


def test_version_lists_all_five_distributions():
    res = rlinf("--version")
    assert res.returncode == 0, res.stderr
    lines = set(res.stdout.splitlines())
    for member in ["rlinf-core", *MEMBERS]:
        assert f"{member} {pyproject(member)['project']['version']}" in lines


def test_members_follow_the_house_layout():
    for member in ["rlinf-core", *MEMBERS]:
        folder = ROOT / "packages" / member
        meta = pyproject(member)
        assert meta["build-system"]["build-backend"] == "hatchling.build"
        assert "dynamic" not in meta["project"] or "version" not in meta["project"]["dynamic"]
        for name in ("README.md", "CHANGELOG.md", "tests"):
            assert (folder / name).exists(), f"{member} lacks {name}"
        if member != "rlinf-core":
            ep_name, module = MEMBERS[member]
            assert meta["project"]["entry-points"]["rlinf"] == {ep_name: f"{module}.plugin"}
            assert "rlinf-core" in " ".join(meta["project"]["dependencies"])


def test_plugin_modules_import_nothing_heavy():
    code = (
        "import sys, json\n"
        "from rlinf_core.plugins import load_plugins\n"
        "host = load_plugins()\n"
        "assert not host.failures, host.failures\n"
        f"print(json.dumps([sorted(host.plugins), sorted(m for m in {HEAVY!r} if m in sys.modules)]))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    loaded, heavy = json.loads(res.stdout)
    assert sorted(ep for ep, _ in MEMBERS.values()) == loaded
    assert heavy == [], f"plugin.py modules imported {heavy}"

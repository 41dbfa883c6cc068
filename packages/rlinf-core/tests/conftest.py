"""Fixtures for rlinf-core tests: real installed-looking plugin distributions in a temp folder."""

from __future__ import annotations

import importlib.metadata as md
import itertools
import sys
import textwrap
from pathlib import Path

import pytest

_counter = itertools.count()


class FakeSite:
    """A folder on ``sys.path`` holding real ``*.dist-info`` distributions with ``rlinf`` entry points."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, dist: str, version: str, ep_name: str, source: str) -> str:
        """Create distribution ``dist`` whose plugin module has ``source``; return the module name."""
        module = f"rlinf_testplugin_{next(_counter)}"
        (self.root / f"{module}.py").write_text(textwrap.dedent(source))
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[rlinf]\n{ep_name} = {module}\n")
        return module

    @staticmethod
    def hardware_plugin(name: str, cls: str = "Arm") -> str:
        """Source of a plugin module registering one hardware type ``name`` (class ``cls``)."""
        return HARDWARE_PLUGIN.format(name=name, cls=cls)

    def entry_points(self) -> list[md.EntryPoint]:
        eps = []
        for dist in md.distributions(path=[str(self.root)]):
            eps.extend(dist.entry_points.select(group="rlinf"))
        return sorted(eps, key=lambda e: e.name)


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("RLINF_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("RLINF_LOAD_PLUGINS", raising=False)
    yield FakeSite(site)
    for name in [m for m in sys.modules if m.startswith("rlinf_testplugin_")]:
        del sys.modules[name]


HARDWARE_PLUGIN = """
from rlinf_core import HardwareConfig, HardwarePlugin, hookimpl

class {cls}Config(HardwareConfig):
    serial: str

class {cls}(HardwarePlugin):
    PLUGIN_NAME = "{name}"
    config_model = {cls}Config

@hookimpl
def rlinf_register_hardware():
    return [{cls}]
"""

"""The plugin manager factory and registries, loading real (temporary) distributions."""

from __future__ import annotations

import pytest

from rlinf_core import PluginError, load_plugins
from rlinf_core.hardware import HardwarePlugin


def test_loads_entry_points_and_builds_registry(fake_site):
    fake_site.add("rlinf-hw-arm", "1.2.3", "hw-arm", fake_site.hardware_plugin("Arm"))
    host = load_plugins(entry_points=fake_site.entry_points())
    assert host.failures == []
    info = host.plugins["hw-arm"]
    assert (info.distribution, info.version) == ("rlinf-hw-arm", "1.2.3")
    cls = host.hardware.get("arm")  # case-insensitive
    assert issubclass(cls, HardwarePlugin) and cls.PLUGIN_NAME == "Arm"
    assert "ARM" in host.hardware and host.hardware.names() == ["Arm"]
    assert host.hardware.owner("Arm").distribution == "rlinf-hw-arm"


def test_broken_plugin_is_reported_and_others_still_load(fake_site):
    fake_site.add("rlinf-hw-good", "0.1.0", "hw-good", fake_site.hardware_plugin("Good"))
    fake_site.add("rlinf-hw-broken", "0.0.9", "hw-broken", "import not_a_module_anywhere_xyz\n")
    fake_site.add("rlinf-hw-exits", "0.0.1", "hw-exits", "raise SystemExit(3)\n")
    host = load_plugins(entry_points=fake_site.entry_points())
    assert "hw-good" in host.plugins and host.hardware.names() == ["Good"]
    failures = {f.name: f for f in host.failures}
    assert set(failures) == {"hw-broken", "hw-exits"}
    broken = failures["hw-broken"]
    assert (broken.distribution, broken.version) == ("rlinf-hw-broken", "0.0.9")
    text = str(broken)
    assert "hw-broken" in text and "rlinf-hw-broken 0.0.9" in text and "ModuleNotFoundError" in text
    assert "Traceback" in broken.details


def test_unknown_hook_fails_check_pending_and_is_isolated(fake_site):
    fake_site.add(
        "rlinf-typo",
        "0.2.0",
        "typo",
        "from rlinf_core import hookimpl\n@hookimpl\ndef rlinf_register_hardwares():\n    return []\n",
    )
    fake_site.add("rlinf-hw-good", "0.1.0", "hw-good", fake_site.hardware_plugin("Good"))
    host = load_plugins(entry_points=fake_site.entry_points())
    assert "typo" not in host.plugins and "hw-good" in host.plugins
    (failure,) = host.failures
    assert failure.name == "typo" and failure.distribution == "rlinf-typo"
    assert "rlinf_register_hardwares" in failure.error and "rlinf_register_hardware" in failure.error


def test_bad_hook_signature_is_a_failure(fake_site):
    fake_site.add(
        "rlinf-sig",
        "0.1.0",
        "sig",
        "from rlinf_core import hookimpl\n@hookimpl\ndef rlinf_register_hardware(extra):\n    return []\n",
    )
    host = load_plugins(entry_points=fake_site.entry_points())
    assert [f.name for f in host.failures] == ["sig"] and "extra" in host.failures[0].error


def test_two_classes_claiming_one_name_is_an_error_naming_both(fake_site):
    fake_site.add("rlinf-hw-one", "1.0.0", "hw-one", fake_site.hardware_plugin("Arm", cls="ArmOne"))
    fake_site.add("rlinf-hw-two", "2.0.0", "hw-two", fake_site.hardware_plugin("ARM", cls="ArmTwo"))
    host = load_plugins(entry_points=fake_site.entry_points())
    with pytest.raises(PluginError) as info:
        host.hardware  # noqa: B018
    msg = str(info.value)
    for expected in ("ArmOne", "ArmTwo", "rlinf-hw-one 1.0.0", "rlinf-hw-two 2.0.0", "RLINF_DISABLE_PLUGINS"):
        assert expected in msg


def test_disable_and_load_filters(fake_site, monkeypatch):
    fake_site.add("rlinf-a", "0.1.0", "a", fake_site.hardware_plugin("A", cls="A"))
    fake_site.add("rlinf-b", "0.1.0", "b", fake_site.hardware_plugin("B", cls="B"))
    fake_site.add("rlinf-c", "0.1.0", "c", fake_site.hardware_plugin("C", cls="C"))
    monkeypatch.setenv("RLINF_DISABLE_PLUGINS", " a , nope")
    host = load_plugins(entry_points=fake_site.entry_points())
    assert sorted(host.plugins) == ["b", "c"]
    assert any("RLINF_DISABLE_PLUGINS names 'nope'" in w for w in host.warnings)
    monkeypatch.delenv("RLINF_DISABLE_PLUGINS")
    monkeypatch.setenv("RLINF_LOAD_PLUGINS", "c,a")
    host = load_plugins(entry_points=fake_site.entry_points())
    assert sorted(host.plugins) == ["a", "c"]
    assert host.warnings == []


def test_unknown_name_lists_available_and_provider(fake_site):
    fake_site.add("rlinf-hw-arm", "1.0.0", "hw-arm", fake_site.hardware_plugin("Arm"))
    host = load_plugins(entry_points=fake_site.entry_points())
    with pytest.raises(PluginError) as info:
        host.hardware.get("franka")
    msg = str(info.value)
    assert "unknown hardware type 'franka'" in msg and "installed: Arm" in msg
    assert "pip install rlinf-hw-franka" in msg
    with pytest.raises(PluginError, match=r"unknown algorithm 'ppo'; installed: none.*rlinf-algos"):
        host.algorithms.get("ppo")
    with pytest.raises(PluginError, match=r"unknown scheduler 'slurm'; installed: none$"):
        host.schedulers.get("slurm")


def test_registration_must_return_subclasses_with_names(fake_site):
    fake_site.add(
        "rlinf-bad",
        "0.1.0",
        "bad",
        "from rlinf_core import hookimpl\n@hookimpl\ndef rlinf_register_algorithms():\n    return [object]\n",
    )
    host = load_plugins(entry_points=fake_site.entry_points())
    with pytest.raises(
        PluginError, match=r"'bad' \(rlinf-bad 0.1.0\).*subclass of rlinf_core.algorithm.Algorithm"
    ):
        host.algorithms  # noqa: B018


def test_in_process_plugins_and_envs():
    from rlinf_core import EnvSpec, hookimpl

    class Plugin:
        @hookimpl
        def rlinf_register_envs(self):
            return [EnvSpec("rlinf/Test-v0", "x:Y", max_episode_steps=5)]

    host = load_plugins(entry_points=[], extra=[("mine", Plugin())])
    assert list(host.envs) == ["rlinf/Test-v0"]
    (row,) = host.describe()
    assert row["name"] == "mine" and row["registers"]["envs"] == ["rlinf/Test-v0"]

    host = load_plugins(entry_points=[], extra=[("one", Plugin()), ("two", Plugin())])
    with pytest.raises(PluginError, match="registered twice"):
        host.envs  # noqa: B018


def test_no_global_manager_is_built_at_import():
    import rlinf_core.plugins as plugins

    assert not any(isinstance(v, plugins.PluginHost) for v in vars(plugins).values())
    assert load_plugins(entry_points=[]) is not load_plugins(entry_points=[])


def test_describe_lists_the_estimators_and_losses_by_name():
    # what `rlinf plugins` shows: the functions' PLUGIN_NAME (else __name__), by hook
    from rlinf_core import hookimpl

    def clipped(*args):
        return None

    clipped.PLUGIN_NAME = "my_clip"

    def best_of_group(outcomes, cfg):
        return None

    class Plugin:
        @hookimpl
        def rlinf_register_advantage_estimators(self):
            return [best_of_group]

        @hookimpl
        def rlinf_register_policy_losses(self):
            return [clipped]

    (row,) = load_plugins(entry_points=[], extra=[("mine", Plugin())]).describe()
    assert row["registers"]["advantage_estimators"] == ["best_of_group"]
    assert row["registers"]["policy_losses"] == ["my_clip"]

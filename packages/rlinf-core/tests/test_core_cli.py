"""The ``rlinf`` CLI host, run as a user runs it: a real subprocess with real (temporary) plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

COMMAND_PLUGIN = """
import click
from rlinf_core import ConfigError, ConfigProblem, HardwareError, hookimpl

@hookimpl
def rlinf_register_commands(cli):
    @cli.command("boom-config")
    def boom_config():
        "Fail with a configuration error."
        raise ConfigError([ConfigProblem("cluster.num_nodes", "must be > 0 (got -1)"),
                           ConfigProblem("cluster.node_groups[1].label", "'node' is reserved")])

    @cli.command("boom-hw")
    def boom_hw():
        raise HardwareError("robot 10.0.0.2 on node 3 does not answer on port 1337")

    @cli.command("hello")
    @click.argument("who")
    def hello(who):
        click.echo(f"hello {who}")
"""


def run(fake_site, *args, env=None):
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake_site.root), os.environ.get("PYTHONPATH", "")]),
    }
    full_env.pop("RLINF_DEBUG", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rlinf_core", *args], capture_output=True, text=True, env=full_env, timeout=60
    )


@pytest.fixture
def site(fake_site):
    fake_site.add("rlinf-hw-arm", "1.2.3", "hw-arm", fake_site.hardware_plugin("Arm"))
    fake_site.add("rlinf-cmds", "0.3.0", "cmds", COMMAND_PLUGIN)
    fake_site.add("rlinf-broken", "0.0.1", "broken", "raise RuntimeError('vendor SDK missing')\n")
    return fake_site


def test_version_lists_every_rlinf_distribution(site):
    res = run(site, "--version")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "rlinf-core 0.1.0" in lines and "rlinf-hw-arm 1.2.3" in lines and "rlinf-cmds 0.3.0" in lines


def test_plugins_json_lists_plugins_registrations_and_failures(site):
    res = run(site, "plugins", "--json", env={"RLINF_LOAD_PLUGINS": "hw-arm,cmds,broken"})
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    rows = {p["name"]: p for p in data["plugins"]}
    assert set(rows) == {"hw-arm", "cmds"}
    assert rows["hw-arm"]["distribution"] == "rlinf-hw-arm" and rows["hw-arm"]["version"] == "1.2.3"
    assert rows["hw-arm"]["registers"]["hardware"] == ["Arm"]
    assert rows["cmds"]["registers"]["commands"] == ["boom-config", "boom-hw", "hello"]
    assert data["failures"] == [
        {
            "name": "broken",
            "distribution": "rlinf-broken",
            "version": "0.0.1",
            "error": "import of " + data["failures"][0]["error"].split("import of ")[1],
        }
    ]
    assert "vendor SDK missing" in data["failures"][0]["error"]
    # the broken plugin is a warning on stderr, without a traceback
    assert "plugin 'broken' (rlinf-broken 0.0.1) failed" in res.stderr
    assert "Traceback" not in res.stderr


def test_plugins_table(site):
    res = run(site, "plugins", env={"RLINF_LOAD_PLUGINS": "hw-arm", "COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "hw-arm" in res.stdout and "rlinf-hw-arm" in res.stdout and "hardware: Arm" in res.stdout


def test_plugin_commands_and_error_reporting(site):
    res = run(site, "hello", "world")
    assert (res.returncode, res.stdout) == (0, "hello world\n")

    res = run(site, "boom-config")
    assert res.returncode == 2
    assert res.stderr.splitlines()[-2:] == [
        "cluster.num_nodes: must be > 0 (got -1)",
        "cluster.node_groups[1].label: 'node' is reserved",
    ]
    assert "Traceback" not in res.stderr

    res = run(site, "boom-hw")
    assert res.returncode == 1
    assert "error: robot 10.0.0.2 on node 3 does not answer on port 1337" in res.stderr
    assert "Traceback" not in res.stderr

    res = run(site, "boom-hw", env={"RLINF_DEBUG": "1"})
    assert "Traceback" in res.stderr


def test_usage_errors_exit_2(site):
    res = run(site, "no-such-command")
    assert res.returncode == 2 and "No such command" in res.stderr
    res = run(site, "hello")
    assert res.returncode == 2 and "Missing argument" in res.stderr


def test_failing_command_registration_is_isolated(fake_site):
    fake_site.add(
        "rlinf-badcmd",
        "0.1.0",
        "badcmd",
        "from rlinf_core import hookimpl\n@hookimpl\ndef rlinf_register_commands(cli):\n    raise KeyError('x')\n",
    )
    fake_site.add("rlinf-cmds", "0.3.0", "cmds", COMMAND_PLUGIN)
    res = run(fake_site, "hello", "you")
    assert res.returncode == 0 and res.stdout == "hello you\n"
    assert (
        "plugin 'badcmd' (rlinf-badcmd 0.1.0) failed: rlinf_register_commands raised KeyError" in res.stderr
    )

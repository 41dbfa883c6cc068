"""Fast tests of rlinf-net-easytier that start no node: validation, renderings, parsing, state
directory rules, the plugin's import hygiene, and the easytier-core backend's command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rlinf_core.errors import ConfigError, NetworkError
from rlinf_net_easytier.backends import CoreBinaryBackend, parse_routes, tun_error_message
from rlinf_net_easytier.config import EasyTierConfig, load_secret, redact, to_toml
from rlinf_net_easytier.reach import check_peers, parse_peer_list, parse_port_list
from rlinf_net_easytier.state import instance_paths, state_dir

pytestmark = pytest.mark.xdist_group("loopback")  # fixed loopback addresses: see conftest.py


def cfg(**kw) -> EasyTierConfig:
    base = {
        "name": "edge-1",
        "role": "node",
        "network_name": "rlinf-cloud-edge",
        "secret_file": "/run/secrets/et",
        "ipv4": "10.10.0.11",
        "peers": ["tcp://203.0.113.7:11010"],
    }
    return EasyTierConfig.model_validate({**base, **kw})


def test_defaults_are_safe_for_a_private_cluster():
    c = cfg()
    core = c.core_config(None)
    assert core["flags"]["private_mode"] is True
    assert core["flags"]["disable_upnp"] is True
    assert core["stun_servers"] == [] and core["tcp_stun_servers"] == [] and core["stun_servers_v6"] == []
    assert core["flags"]["dev_name"] == "et0" and core["ipv4"] == "10.10.0.11/24"
    assert "network_secret" not in core["network_identity"]
    opened = cfg(public_stun=True, upnp=True, private_mode=False).core_config(None)
    assert "stun_servers" not in opened and opened["flags"]["disable_upnp"] is False
    assert opened["flags"]["private_mode"] is False


def test_bootstrap_listens_on_11010_by_default():
    c = cfg(role="bootstrap", peers=[])
    assert c.listen == ["tcp://0.0.0.0:11010"]
    assert cfg(role="bootstrap", peers=[], listen=["12000"]).listen == ["tcp://0.0.0.0:12000"]


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("ipv4", "10.10.0.300", "not an IPv4 address"),
        ("ipv4", "abc", "not an IPv4 address"),
        ("ipv4", "127.0.0.5", "cannot be an overlay address"),
        ("ipv4", "10.10.0.0/24", "network or broadcast"),
        ("ipv4", "10.10.0.5/32", "too narrow"),
        ("peers", ["tcp//1.2.3.4:11010"], "is not a URL"),
        ("peers", ["http://1.2.3.4:11010"], "valid schemes"),
        ("peers", ["tcp://1.2.3.4"], "has no port"),
        ("peers", ["tcp://1.2.3.4:99999"], "invalid port"),
        ("peers", ["tcp://:11010"], "has no host"),
        ("dev_name", "a-very-long-device-name", "device name"),
        ("name", "../etc", "instance name"),
        ("secret_env", "my secret value", "not an environment variable name"),
        ("network_name", "two words", "without spaces"),
    ],
)
def test_bad_values_name_what_is_wrong(field, value, fragment):
    with pytest.raises(ConfigError) as err:
        EasyTierConfig.from_mapping({**cfg().model_dump(mode="json"), field: value}, prefix="network")
    assert fragment in str(err.value)
    assert f"network.{field}" in str(err.value)


def test_secret_source_must_be_exactly_one_and_node_needs_a_peer():
    with pytest.raises(ConfigError, match="exactly one of --secret-file FILE or --secret-env VAR"):
        EasyTierConfig.from_mapping({**cfg().model_dump(mode="json"), "secret_env": "ET_SECRET"})
    with pytest.raises(ConfigError, match="a node needs at least one --peer"):
        EasyTierConfig.from_mapping({**cfg().model_dump(mode="json"), "peers": []})


def test_load_secret_from_file_and_env(tmp_path, monkeypatch):
    f = tmp_path / "s"
    f.write_text("hunter2-secret\n")
    assert load_secret(cfg(secret_file=str(f))) == "hunter2-secret"
    f.write_text("  \n")
    with pytest.raises(ConfigError, match="is empty"):
        load_secret(cfg(secret_file=str(f)))
    with pytest.raises(ConfigError, match="no such file"):
        load_secret(cfg(secret_file=str(tmp_path / "missing")))
    monkeypatch.setenv("ET_SECRET", "from-env")
    assert load_secret(cfg(secret_file=None, secret_env="ET_SECRET")) == "from-env"
    monkeypatch.delenv("ET_SECRET")
    with pytest.raises(ConfigError, match="ET_SECRET: the environment variable is not set"):
        load_secret(cfg(secret_file=None, secret_env="ET_SECRET"))


def test_toml_round_trips_and_carries_the_secret_only_when_asked():
    c = cfg(peers=["tcp://203.0.113.7:11010", "udp://198.51.100.2:11010"], mtu=1360)
    printed = tomllib.loads(to_toml(c.core_config(None), header="x"))
    assert printed["network_identity"] == {"network_name": "rlinf-cloud-edge"}
    assert [p["uri"] for p in printed["peer"]] == ["tcp://203.0.113.7:11010", "udp://198.51.100.2:11010"]
    assert printed["flags"]["mtu"] == 1360 and printed["flags"]["private_mode"] is True
    full = tomllib.loads(to_toml(c.core_config('we"ird\\secret')))
    assert full["network_identity"]["network_secret"] == 'we"ird\\secret'


def test_pyo3_accepts_the_rendered_toml(tmp_path):
    """The TOML we print is what easytier itself parses (checked with the real core)."""
    import easytier_pyo3

    c = cfg(no_tun=True)
    node = easytier_pyo3.Node(to_toml(c.core_config("s3cret")))
    assert node.state() == "Created"


def test_core_binary_backend_command_line_and_config_file(tmp_path):
    """easytier-core is not installed on this machine, so the binary is not run: we check that the
    command line holds no secret and the 0600 config file it would read is complete. The paths to
    the binaries are given explicitly (any file name works since nothing is executed)."""
    c = cfg(backend="easytier-core", no_tun=True)
    backend = CoreBinaryBackend(
        c, tmp_path / "edge-1.core.toml", core="/opt/et/easytier-core", cli="/opt/et/easytier-cli"
    )
    cmd = backend.command()
    assert cmd == ["/opt/et/easytier-core", "--config-file", str(tmp_path / "edge-1.core.toml")]
    text = backend.config_text("the-secret", 15999)
    parsed = tomllib.loads(text)
    assert parsed["network_identity"]["network_secret"] == "the-secret"
    assert parsed["rpc_portal"] == "127.0.0.1:15999"
    assert parsed["flags"]["no_tun"] is True and parsed["flags"]["bind_device"] is False
    assert all("the-secret" not in part for part in cmd)
    backend.rpc_port = 15999
    assert backend.cli_command("route") == [
        "/opt/et/easytier-cli",
        "--rpc-portal",
        "127.0.0.1:15999",
        "--output",
        "json",
        "route",
    ]


def test_core_binary_backend_requires_the_binary(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(NetworkError, match="needs the easytier-core binary on PATH"):
        CoreBinaryBackend(cfg(backend="easytier-core"), Path("/tmp/x.toml"))


def test_parse_routes_from_real_easytier_shapes():
    routes = [
        {
            "hostname": "b",
            "ipv4_addr": {"address": {"addr": 177209345}, "network_length": 24},
            "peer_id": 1,
            "next_hop_peer_id": 1,
            "cost": 1,
            "path_latency": 500,
        },
        {
            "hostname": "e2",
            "ipv4_addr": {"address": {"addr": 177209356}, "network_length": 24},
            "peer_id": 2,
            "next_hop_peer_id": 1,
            "cost": 2,
            "path_latency": 1000,
        },
    ]
    peers = [{"peer_id": 1, "conns": [{"stats": {"latency_us": "250"}, "loss_rate": 0.0}]}]
    rows = parse_routes(routes, peers)
    assert [(r["ipv4"], r["hostname"]) for r in rows] == [("10.144.0.1", "b"), ("10.144.0.12", "e2")]
    assert rows[0]["latency_ms"] == 0.25 and rows[0]["direct"] and rows[0]["next_hop"] is None
    assert rows[1]["latency_ms"] is None and rows[1]["next_hop"] == "b" and not rows[1]["direct"]


def test_tun_errors_map_to_the_docker_flags():
    msg = tun_error_message("rust tun error Operation not permitted (os error 1)", "et0")
    assert msg and "NET_ADMIN" in msg and "NET_RAW" in msg and "/dev/net/tun" in msg and "--no-tun" in msg
    msg = tun_error_message("rust tun error Inappropriate ioctl for device (os error 25)", "et0")
    assert msg and "/dev/net/tun is missing" in msg
    assert tun_error_message("required listener failed to start", "et0") is None


def test_reach_parsers_and_route_only_checks():
    assert parse_peer_list("10.10.0.1, 10.10.0.11") == ["10.10.0.1", "10.10.0.11"]
    with pytest.raises(ValueError, match=r"'10\.10\.0\.x' is not an IPv4"):
        parse_peer_list("10.10.0.1,10.10.0.x")
    assert parse_port_list("6379,8265") == [6379, 8265]
    with pytest.raises(ValueError, match="not a TCP port"):
        parse_port_list("6379,http")
    routes = [{"ipv4": "10.10.0.1", "latency_ms": 0.4}]
    res = check_peers(["10.10.0.1", "10.10.0.2"], routes=routes, tun=False)
    assert res["10.10.0.1"]["ok"] and not res["10.10.0.2"]["ok"]
    res = check_peers(["10.10.0.1"], [6379], routes=routes, tun=False)
    assert "--no-tun" in res["10.10.0.1"]["reason"]


def test_redact():
    assert redact("secret key s3 in s3", "s3") == "secret key <redacted> in <redacted>"
    assert redact("nothing", None) == "nothing"


def test_state_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("RLINF_STATE_DIR", str(tmp_path / "a"))
    assert state_dir() == tmp_path / "a"
    monkeypatch.delenv("RLINF_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "rlinf"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "rlinf"
    assert instance_paths("n").status == tmp_path / "home/.local/state/rlinf/net/n.status.json"


def test_plugin_and_package_import_without_easytier():
    code = (
        "import sys, rlinf_net_easytier.plugin as p, rlinf_net_easytier;"
        "p.rlinf_register_network_providers();"
        "import click; g = click.Group(); p.rlinf_register_commands(g);"
        "bad = [m for m in ('easytier_pyo3', 'torch', 'ray') if m in sys.modules];"
        "print(sorted(g.commands), bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['net'] []"


def test_provider_is_registered_with_the_plugin_host():
    from rlinf_core.plugins import load_plugins

    host = load_plugins()
    provider = host.network_providers.get("easytier")
    assert provider.PLUGIN_NAME == "easytier" and provider.config_model is EasyTierConfig


def test_cli_usage_errors_name_the_option(rlinf_cli, secret_file):
    path, _ = secret_file
    common = ["net", "up", "--role", "node", "--network-name", "n", "--secret-file", str(path), "--no-tun"]
    cases = [
        (["--ipv4", "10.0.0.999", "--peer", "tcp://127.0.0.1:1"], "invalid value for '--ipv4'"),
        (["--ipv4", "10.9.0.2", "--peer", "127.0.0.1:11010"], "invalid value for '--peer'"),
        (["--ipv4", "10.9.0.2"], "needs at least one --peer"),
        (
            ["--ipv4", "10.9.0.2", "--peer", "tcp://127.0.0.1:1", "--listen", "70000"],
            "invalid value for '--listen'",
        ),
    ]
    for extra, fragment in cases:
        proc = rlinf_cli(*common, *extra)
        assert proc.returncode == 2, proc.stderr
        assert fragment in proc.stderr and "Traceback" not in proc.stderr
    proc = rlinf_cli(
        "net",
        "up",
        "--role",
        "node",
        "--network-name",
        "n",
        "--ipv4",
        "10.9.0.2",
        "--peer",
        "tcp://127.0.0.1:1",
        "--secret-file",
        str(path.with_name("nope")),
    )
    assert proc.returncode == 2 and "--secret-file" in proc.stderr and "no such file" in proc.stderr
    proc = rlinf_cli("net", "verify", "--peers", "10.9.0.1,nope")
    assert proc.returncode == 2 and "'--peers'" in proc.stderr and "'nope' is not an IPv4" in proc.stderr


def test_config_file_errors_are_config_errors_with_yaml_paths(rlinf_cli, tmp_path, secret_file):
    path, _ = secret_file
    bad = tmp_path / "net.yaml"
    bad.write_text(
        f"network:\n  role: node\n  network_name: n\n  secret_file: {path}\n  ipv4: 10.9.0.900\n"
        "  peers: ['tcp://127.0.0.1:1']\n  colour: blue\n"
    )
    proc = rlinf_cli("net", "config", "--config", str(bad))
    assert proc.returncode == 2
    assert (
        "network.ipv4" in proc.stderr and "network.colour" in proc.stderr and "Traceback" not in proc.stderr
    )


def test_net_config_prints_toml_without_secret_and_writes_it_with_one(rlinf_cli, tmp_path, secret_file):
    path, secret = secret_file
    args = [
        "net",
        "config",
        "--role",
        "bootstrap",
        "--network-name",
        "rlinf-cloud-edge",
        "--secret-file",
        str(path),
        "--ipv4",
        "10.10.0.1",
        "--name",
        "easytier-bootstrap",
        "--hostname",
        "easytier-bootstrap",
    ]
    proc = rlinf_cli(*args)
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stdout
    parsed = tomllib.loads(proc.stdout)
    # the seed's bootstrap command: --hostname, --network-name, --private-mode true, --ipv4, --dev-name et0, -l 11010
    assert parsed["hostname"] == "easytier-bootstrap" and parsed["ipv4"] == "10.10.0.1/24"
    assert parsed["flags"]["private_mode"] is True and parsed["flags"]["dev_name"] == "et0"
    assert parsed["listeners"] == ["tcp://0.0.0.0:11010"]
    out = tmp_path / "et.toml"
    proc = rlinf_cli(*args, "--output", str(out))
    assert proc.returncode == 0 and secret not in proc.stdout
    assert tomllib.loads(out.read_text())["network_identity"]["network_secret"] == secret
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_net_unit_runs_the_node_in_the_foreground_with_capabilities(rlinf_cli, secret_file):
    path, secret = secret_file
    proc = rlinf_cli(
        "net",
        "unit",
        "--role",
        "node",
        "--network-name",
        "rlinf-cloud-edge",
        "--secret-file",
        str(path),
        "--ipv4",
        "10.10.0.11",
        "--name",
        "edge-1",
        "--peer",
        "tcp://203.0.113.7:11010",
    )
    assert proc.returncode == 0, proc.stderr
    unit = proc.stdout
    assert secret not in unit
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    for part in (
        "net up",
        "--role node",
        "--network-name rlinf-cloud-edge",
        f"--secret-file {path}",
        "--ipv4 10.10.0.11/24",
        "--peer tcp://203.0.113.7:11010",
        "--dev-name et0",
        "--private-mode",
    ):
        assert part in exec_start
    assert "--detach" not in exec_start
    assert "AmbientCapabilities=CAP_NET_ADMIN CAP_NET_RAW" in unit and "Restart=on-failure" in unit
    proc = rlinf_cli(
        "net",
        "unit",
        "--role",
        "node",
        "--network-name",
        "n",
        "--secret-env",
        "ET_SECRET",
        "--ipv4",
        "10.10.0.11",
        "--name",
        "edge-1",
        "--peer",
        "tcp://203.0.113.7:11010",
        "--exec",
        "easytier-core",
    )
    assert "--config-file /etc/easytier/edge-1.toml" in proc.stdout


def test_status_and_down_of_an_instance_that_is_not_running(rlinf_cli):
    proc = rlinf_cli("net", "status", "--name", "ghost", "--json")
    assert proc.returncode == 1 and "'ghost' is not running" in proc.stderr
    proc = rlinf_cli("net", "down", "--name", "ghost")
    assert proc.returncode == 0 and "not running" in proc.stdout


def test_overlay_address_api_errors(state_dir):
    from rlinf_net_easytier import overlay_address

    with pytest.raises(NetworkError, match="not running"):
        overlay_address("ghost")


def test_status_json_file_is_written_atomically(state_dir):
    from rlinf_net_easytier.state import write_status

    paths = instance_paths("x")
    paths.ensure()
    write_status(paths, {"state": "up"})
    assert json.loads(paths.status.read_text())["state"] == "up"
    assert not [p for p in os.listdir(paths.root) if p.startswith(".")]

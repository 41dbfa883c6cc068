"""``EasyTierProvider.bind_address_of(name)``: the core ``NetworkProvider`` hook through which
``rlinf node start --network easytier`` finds the address of an instance that ``rlinf net up
--detach`` runs, reached the way the runtime reaches it (the plugin registry). Real detached
nodes: no-TUN over loopback, and one with a TUN device in a network namespace the test creates
(skipped, with the reason, where that is not possible)."""

from __future__ import annotations

import pytest

from rlinf_core.errors import NetworkError
from rlinf_core.network import NetworkProvider
from rlinf_core.plugins import load_plugins

pytestmark = [pytest.mark.network, pytest.mark.xdist_group("loopback")]


def provider_class() -> type[NetworkProvider]:
    cls = load_plugins().network_providers.get("easytier")
    assert issubclass(cls, NetworkProvider)
    return cls


def up(name, ipv4, secret_path, *extra):
    return [
        "net", "up", "--name", name, "--role", "bootstrap", "--network-name", "rlinf-bind",
        "--ipv4", ipv4, "--secret-file", str(secret_path), "--timeout", "10", "--detach", *extra,
    ]  # fmt: skip


def test_an_instance_that_is_not_running_is_named(state_dir):
    with pytest.raises(NetworkError) as err:
        provider_class().bind_address_of("nowhere")
    msg = str(err.value)
    assert "overlay instance 'nowhere' is not running" in msg
    assert "no instance is running" in msg and "rlinf net up --name nowhere" in msg


def test_a_no_tun_instance_cannot_carry_ray(rlinf_cli, secret_file, get_free_port, monkeypatch):
    path, _ = secret_file
    port = get_free_port()
    r = rlinf_cli(*up("bind-lo", "10.232.0.1", path, "--no-tun", "--listen", f"tcp://127.0.0.1:{port}"))
    assert r.returncode == 0, r.stderr
    monkeypatch.setenv("RLINF_STATE_DIR", str(rlinf_cli.state))
    cls = provider_class()
    for name in ("bind-lo", None):  # by name, and as the only running instance (the default)
        with pytest.raises(NetworkError) as err:
            cls.bind_address_of(name)
        assert "'bind-lo' runs with --no-tun: no device carries 10.232.0.1" in str(err.value)
        assert "drop --no-tun" in str(err.value)
    with pytest.raises(NetworkError, match=r"'other' is not running .*running instances: bind-lo"):
        cls.bind_address_of("other")
    assert rlinf_cli("net", "down", "--name", "bind-lo").returncode == 0
    with pytest.raises(NetworkError, match="not running"):
        cls.bind_address_of("bind-lo")


@pytest.mark.slow
def test_a_tun_instance_gives_its_device_and_address(netlab3, rlinf_cli, secret_file, monkeypatch):
    path, _ = secret_file
    r = rlinf_cli(*up("bind-tun", "10.233.0.1", path, "--dev-name", "et7"), netns=netlab3.ns("b"))
    assert r.returncode == 0, r.stderr
    monkeypatch.setenv("RLINF_STATE_DIR", str(rlinf_cli.state))
    assert provider_class().bind_address_of("bind-tun") == ("et7", "10.233.0.1")
    # the device really carries the address in the instance's namespace
    out = netlab3.exec("b", "ip", "-4", "addr", "show", "dev", "et7")
    assert "inet 10.233.0.1/" in out.stdout, out.stdout + out.stderr

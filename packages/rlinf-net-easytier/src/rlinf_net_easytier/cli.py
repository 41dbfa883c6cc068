"""``rlinf net``: bring an EasyTier overlay up and down, inspect and verify it, and print the
equivalent easytier-core config and systemd unit."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from rlinf_core.config import load_yaml, validation_problems
from rlinf_core.errors import ConfigError, NetworkError
from rlinf_net_easytier.config import EasyTierConfig, load_secret, secret_file_is_private, to_toml

__all__ = ["net"]

# EasyTierConfig field -> the option that sets it (for error messages)
_OPTION_OF = {
    "name": "--name",
    "role": "--role",
    "network_name": "--network-name",
    "secret_file": "--secret-file",
    "secret_env": "--secret-env",
    "ipv4": "--ipv4",
    "listen": "--listen",
    "peers": "--peer",
    "hostname": "--hostname",
    "dev_name": "--dev-name",
    "private_mode": "--private-mode/--no-private-mode",
    "no_tun": "--no-tun",
    "public_stun": "--public-stun",
    "upnp": "--upnp",
    "mtu": "--mtu",
    "backend": "--backend",
    "ready_timeout": "--timeout",
}


def _node_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options that describe one node (shared by ``up``, ``config`` and ``unit``)."""
    options = [
        click.option(
            "--config",
            "config_file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="YAML file with these settings (top level or a `network:` section); options override it.",
        ),
        click.option(
            "--name", help="Instance name (default: this host's name); several may run on one host."
        ),
        click.option(
            "--role", type=click.Choice(["bootstrap", "node"]), help="bootstrap (listens) or node (dials)."
        ),
        click.option("--network-name", help="Overlay network name, the same on every node."),
        click.option(
            "--secret-file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="File holding the shared network secret (mode 600).",
        ),
        click.option(
            "--secret-env", metavar="VAR", help="Name of the environment variable holding the secret."
        ),
        click.option(
            "--ipv4", help="This node's fixed overlay address, e.g. 10.10.0.11 (prefix /24 unless given)."
        ),
        click.option(
            "--listen",
            multiple=True,
            help="Port or listener URL (repeatable); bootstrap default 11010, e.g. --listen tcp://0.0.0.0:11010.",
        ),
        click.option(
            "--peer", "peers", multiple=True, help="Peer to dial (repeatable), e.g. tcp://203.0.113.7:11010."
        ),
        click.option("--hostname", help="Name shown to peers (default: the instance name)."),
        click.option("--dev-name", help="TUN device name (default et0)."),
        click.option(
            "--private-mode/--no-private-mode",
            default=None,
            help="Refuse nodes of other networks (default: on).",
        ),
        click.option(
            "--no-tun", is_flag=True, default=None, help="Run without a TUN device (no root needed)."
        ),
        click.option(
            "--public-stun", is_flag=True, default=None, help="Use EasyTier's public STUN servers (off)."
        ),
        click.option("--upnp", is_flag=True, default=None, help="Map ports with UPnP (off)."),
        click.option("--mtu", type=int, help="TUN MTU (default: easytier's)."),
        click.option(
            "--backend",
            type=click.Choice(["pyo3", "easytier-core"]),
            help="pyo3: the core in-process (default); easytier-core: the binary on PATH.",
        ),
        click.option("--timeout", type=float, help="Seconds to wait for the first peer (default 30)."),
    ]
    for opt in reversed(options):
        fn = opt(fn)
    return fn


def _build_config(opts: dict[str, Any]) -> EasyTierConfig:
    """Options (and the --config file) -> validated config; bad values are usage errors naming the
    option, or a ConfigError with YAML paths for values from the file."""
    config_file = opts.pop("config_file", None)
    mapping = {
        "name": opts.get("name"),
        "role": opts.get("role"),
        "network_name": opts.get("network_name"),
        "secret_file": opts.get("secret_file"),
        "secret_env": opts.get("secret_env"),
        "ipv4": opts.get("ipv4"),
        "listen": list(opts.get("listen") or []) or None,
        "peers": list(opts.get("peers") or []) or None,
        "hostname": opts.get("hostname"),
        "dev_name": opts.get("dev_name"),
        "private_mode": opts.get("private_mode"),
        "no_tun": opts.get("no_tun"),
        "public_stun": opts.get("public_stun"),
        "upnp": opts.get("upnp"),
        "mtu": opts.get("mtu"),
        "backend": opts.get("backend"),
        "ready_timeout": opts.get("timeout"),
    }
    cli_values = {k: v for k, v in mapping.items() if v is not None}
    if config_file is not None:
        data = load_yaml(config_file)
        prefix = ""
        if isinstance(data.get("network"), dict):
            data, prefix = data["network"], "network"
        file_values = dict(data)
        try:
            EasyTierConfig.model_validate({**file_values, **cli_values})
        except ValidationError as err:
            problems = validation_problems(err, prefix)
            from_file = [
                p for p in problems if p.path.removeprefix(f"{prefix}.").split("[")[0] in file_values
            ]
            if from_file:
                raise ConfigError(
                    [type(p)(f"{config_file}: {p.path}", p.message) for p in from_file]
                ) from None
            _raise_usage(err)
        return EasyTierConfig.model_validate({**file_values, **cli_values})
    if "role" not in cli_values:
        raise click.UsageError("missing option '--role' (bootstrap or node)")
    for field, option in (("network_name", "--network-name"), ("ipv4", "--ipv4")):
        if field not in cli_values:
            raise click.UsageError(f"missing option '{option}'")
    try:
        return EasyTierConfig.model_validate(cli_values)
    except ValidationError as err:
        _raise_usage(err)
    raise AssertionError("unreachable")


def _raise_usage(err: ValidationError) -> None:
    lines = []
    for e in err.errors(include_url=False):
        field = e["loc"][0] if e["loc"] else ""
        msg = e["msg"].removeprefix("Value error, ")
        option = _OPTION_OF.get(str(field))
        lines.append(f"invalid value for '{option}': {msg}" if option else msg)
    raise click.UsageError("; ".join(lines))


@click.group("net")
def net() -> None:
    """EasyTier overlay network for cloud-edge clusters (rlinf-net-easytier).

    \b
    Bootstrap (public IP):  rlinf net up --role bootstrap --network-name N --secret-file F --ipv4 10.10.0.1 --detach
    Edge node:              rlinf net up --role node --network-name N --secret-file F --ipv4 10.10.0.11 \\
                                --peer tcp://BOOTSTRAP_IP:11010 --detach
    Then:                   rlinf net status; rlinf net verify --peers 10.10.0.1 --ports 6379
    """


def _print_status(status: dict[str, Any], *, header: str | None = None) -> None:
    if header:
        click.echo(header)
    click.echo(f"  overlay ipv4: {status.get('ipv4')}")
    click.echo(f"  device:       {status.get('device') or 'none (--no-tun)'}")
    click.echo(
        f"  network:      {status.get('network_name')} ({status.get('role')}, {status.get('backend')})"
    )
    if status.get("listeners"):
        click.echo(f"  listening:    {', '.join(status['listeners'])}")
    routes = status.get("routes") or []
    peers = {p.get("ipv4"): p for p in status.get("peers") or []}
    if not routes:
        click.echo("  peers:        none yet")
    else:
        click.echo(f"  peers ({len(routes)}):")
        click.echo(f"    {'ipv4':<16} {'hostname':<24} {'latency_ms':>10} {'loss':>6}  route")
        for r in routes:
            p = peers.get(r.get("ipv4"), {})
            lat = r.get("latency_ms")
            loss = p.get("loss_rate")
            via = "direct" if p.get("direct") else f"via {r.get('next_hop') or '?'}"
            click.echo(
                f"    {r.get('ipv4') or '-':<16} {r.get('hostname') or '-':<24} "
                f"{'-' if lat is None else f'{lat:.3f}':>10} {'-' if loss is None else f'{loss:.0%}':>6}  "
                f"{via} (cost {r.get('cost')})"
            )
    for problem in status.get("problems") or []:
        click.echo(f"  problem: {problem}")


@net.command("up")
@_node_options
@click.option(
    "--detach", is_flag=True, help="Run in the background (pidfile, log and status in the state dir)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON once up.")
def up_cmd(detach: bool, as_json: bool, **opts: Any) -> None:
    """Start an overlay node; print its overlay IP, device and peers once it is up.

    The secret is read from --secret-file or the variable named by --secret-env; it never
    appears on a command line, in output or in logs. Private mode is on and public STUN/UPnP are
    off unless asked for.
    """
    cfg = _build_config(opts)
    load_secret(cfg)  # fail fast, before anything starts
    if cfg.secret_file is not None and not secret_file_is_private(Path(cfg.secret_file)):
        click.echo(
            f"warning: --secret-file {cfg.secret_file} is readable by other users; chmod 600 it", err=True
        )

    def show(status: dict[str, Any]) -> None:
        if as_json:
            click.echo(json.dumps(status, indent=2, sort_keys=True))
        else:
            _print_status(status, header=f"overlay instance {cfg.name!r} is up")
        sys.stdout.flush()

    if detach:
        from rlinf_net_easytier.daemon import start_detached
        from rlinf_net_easytier.state import instance_paths

        status = start_detached(cfg)
        show(status)
        if not as_json:
            paths = instance_paths(cfg.name)
            click.echo(
                f"  pid {status.get('pid')}, log {paths.log}; stop with `rlinf net down --name {cfg.name}`"
            )
        return
    from rlinf_net_easytier.daemon import run_instance

    def show_fg(status: dict[str, Any]) -> None:
        show(status)
        if not as_json:
            click.echo("  running in the foreground; Ctrl-C stops it")

    rc = run_instance(cfg, on_up=show_fg)
    if rc:
        raise NetworkError(f"overlay instance {cfg.name!r} stopped unexpectedly")


@net.command("down")
@click.option("--name", help="Instance name (default: this host's name, or the only running instance).")
@click.option(
    "--timeout", type=float, default=10.0, show_default=True, help="Seconds to wait before SIGKILL."
)
def down_cmd(name: str | None, timeout: float) -> None:
    """Stop a running overlay node and remove its device."""
    from rlinf_net_easytier.api import resolve_instance_name
    from rlinf_net_easytier.daemon import stop_instance

    name = resolve_instance_name(name)
    pid = stop_instance(name, timeout=timeout)
    if pid is None:
        click.echo(f"overlay instance {name!r} is not running")
    else:
        click.echo(f"overlay instance {name!r} stopped (pid {pid})")


@net.command("status")
@click.option("--name", help="Instance name (default: this host's name, or the only running instance).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: ipv4, device, peers, routes, ...")
def status_cmd(name: str | None, as_json: bool) -> None:
    """This node's overlay IP and device, its peers and routes with latency and loss."""
    from rlinf_net_easytier.api import instance_status

    status = instance_status(name)
    if as_json:
        click.echo(json.dumps(status, indent=2, sort_keys=True))
        return
    _print_status(status, header=f"overlay instance {status.get('name')!r}: {status.get('state')}")


@net.command("verify")
@click.option(
    "--peers", "peers_text", required=True, help="Overlay addresses to check, e.g. 10.10.0.1,10.10.0.11."
)
@click.option(
    "--ports", "ports_text", help="TCP ports that must accept connections on every peer, e.g. 6379."
)
@click.option("--name", help="Local instance whose routes to consult (default: as for status).")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Seconds per check.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def verify_cmd(
    peers_text: str, ports_text: str | None, name: str | None, timeout: float, as_json: bool
) -> None:
    """Check that peers are reachable through the overlay; exit 1 naming the unreachable ones."""
    from rlinf_net_easytier.api import instance_status
    from rlinf_net_easytier.reach import check_peers, parse_peer_list, parse_port_list
    from rlinf_net_easytier.state import list_instances

    try:
        peers = parse_peer_list(peers_text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="'--peers'") from None
    try:
        ports = parse_port_list(ports_text)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="'--ports'") from None
    routes = None
    tun = True
    if name or list_instances():
        status = instance_status(name)
        routes = status.get("routes") or []
        tun = not status.get("no_tun")
    results = check_peers(peers, ports, routes=routes, tun=tun, timeout=timeout)
    bad = {ip: r["reason"] for ip, r in results.items() if not r["ok"]}
    if as_json:
        click.echo(json.dumps({"ok": not bad, "results": results}, indent=2, sort_keys=True))
    else:
        for ip, r in results.items():
            rtt = f" {r['rtt_ms']:.3f} ms" if r.get("rtt_ms") is not None else ""
            what = f"ok ({r['method']}{rtt})" if r["ok"] else f"UNREACHABLE: {r['reason']}"
            click.echo(f"  {ip:<16} {what}")
    if bad:
        raise NetworkError(
            "unreachable through the overlay: " + "; ".join(f"{ip} ({why})" for ip, why in bad.items())
        )


@net.command("config")
@_node_options
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the complete config, secret included, to this file (mode 600) instead of printing it.",
)
def config_cmd(output: Path | None, **opts: Any) -> None:
    """Print the easytier-core TOML config equivalent to these options (secret left out)."""
    from rlinf_net_easytier.state import atomic_write

    cfg = _build_config(opts)
    header = (
        f"easytier-core config for rlinf overlay instance {cfg.name} (role {cfg.role})\n"
        f"run: easytier-core --config-file {output or cfg.name + '.toml'}"
    )
    if output is not None:
        secret = load_secret(cfg)
        atomic_write(output, to_toml(cfg.core_config(secret), header=header), mode=0o600)
        click.echo(f"wrote {output} (mode 600; it contains the network secret)")
        return
    header += (
        "\nnetwork_secret is left out: add it under [network_identity], or write the whole file with\n"
        "`rlinf net config ... --output FILE` (mode 600)"
    )
    click.echo(to_toml(cfg.core_config(None), header=header), nl=False)


@net.command("unit")
@_node_options
@click.option(
    "--exec",
    "exec_kind",
    type=click.Choice(["rlinf", "easytier-core"]),
    default="rlinf",
    show_default=True,
    help="rlinf: ExecStart runs `rlinf net up` in the foreground; easytier-core: it runs the binary on a config file.",
)
@click.option(
    "--config-path",
    help="With --exec easytier-core: where the TOML (from `rlinf net config --output`) is installed.",
)
def unit_cmd(exec_kind: str, config_path: str | None, **opts: Any) -> None:
    """Print a systemd unit that runs this node as a service (secret read from a file)."""
    cfg = _build_config(opts)
    click.echo(render_unit(cfg, exec_kind=exec_kind, config_path=config_path), nl=False)


def render_unit(cfg: EasyTierConfig, *, exec_kind: str = "rlinf", config_path: str | None = None) -> str:
    """A systemd unit for ``cfg``; the secret stays in its file (or an EnvironmentFile)."""
    env_lines: list[str] = []
    if exec_kind == "easytier-core":
        binary = shutil.which("easytier-core") or "/usr/local/bin/easytier-core"
        path = config_path or f"/etc/easytier/{cfg.name}.toml"
        exec_start = shlex.join([binary, "--config-file", path])
        note = f"# {path}: `rlinf net config ... --output {path}` (mode 600, holds the secret)"
    else:
        binary = shutil.which("rlinf") or "rlinf"
        args = [
            binary,
            "net",
            "up",
            "--name",
            cfg.name,
            "--role",
            cfg.role,
            "--network-name",
            cfg.network_name,
        ]
        if cfg.secret_file is not None:
            args += ["--secret-file", str(Path(cfg.secret_file).expanduser().absolute())]
        else:
            args += ["--secret-env", str(cfg.secret_env)]
            env_lines.append(f"EnvironmentFile=/etc/rlinf/{cfg.name}.env")
        args += ["--ipv4", cfg.ipv4]
        for listener in cfg.listen:
            args += ["--listen", listener]
        for peer in cfg.peers:
            args += ["--peer", peer]
        if cfg.hostname:
            args += ["--hostname", cfg.hostname]
        if cfg.no_tun:
            args.append("--no-tun")
        else:
            args += ["--dev-name", cfg.dev_name]
        args.append("--private-mode" if cfg.private_mode else "--no-private-mode")
        if cfg.public_stun:
            args.append("--public-stun")
        if cfg.upnp:
            args.append("--upnp")
        if cfg.mtu:
            args += ["--mtu", str(cfg.mtu)]
        if cfg.backend != "pyo3":
            args += ["--backend", cfg.backend]
        exec_start = shlex.join(args)
        note = f"# {cfg.secret_source()}: {'a file of mode 600' if cfg.secret_file else f'set {cfg.secret_env}=... in the EnvironmentFile (mode 600)'}"
    caps = (
        "" if cfg.no_tun else "AmbientCapabilities=CAP_NET_ADMIN CAP_NET_RAW\nDeviceAllow=/dev/net/tun rw\n"
    )
    return (
        f"# systemd unit for rlinf overlay instance {cfg.name}; install as "
        f"/etc/systemd/system/rlinf-net-{cfg.name}.service\n"
        f"# then: systemctl daemon-reload && systemctl enable --now rlinf-net-{cfg.name}\n"
        f"{note}\n"
        "[Unit]\n"
        f"Description=rlinf EasyTier overlay node {cfg.name} ({cfg.role}, network {cfg.network_name})\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n"
        "\n"
        "[Service]\n"
        "Type=simple\n" + "".join(f"{line}\n" for line in env_lines) + f"ExecStart={exec_start}\n"
        "Restart=on-failure\n"
        "RestartSec=5\n"
        f"{caps}"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )

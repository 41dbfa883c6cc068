"""The ``rlinf cluster`` and ``rlinf node`` commands of rlinf-scheduler.

- ``rlinf cluster plan``: where every process would run (pure planning, nothing contacted);
- ``rlinf cluster status|wait|doctor``: inspect a running Ray cluster;
- ``rlinf node start|stop|list``: start and stop Ray on this node with its ``RLINF_NODE_RANK``.

:func:`register` adds both groups to the root ``rlinf`` group (the plugin's command hook calls it);
add a subcommand with ``@cluster.command()`` or ``@node.command()``. This module stays light: Ray
and the runtime are imported inside the commands only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from rlinf_core.cli import get_host
from rlinf_core.errors import ConfigError, SchedulerError, WaitTimeout

__all__ = ["cluster", "node", "register"]


# -- rlinf cluster plan --------------------------------------------------------------------------
@click.group("cluster")
def cluster() -> None:
    """Plan and inspect the cluster: node groups, component placement."""


@cluster.command("plan")
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--inventory",
    "inventory_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML of accelerators per node: nodes: [{node_ranks: '0-7', gpus: 8}, ...]; unlisted nodes have 0.",
)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(min=0),
    help="Give every node this many GPUs (instead of --inventory).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
@click.pass_context
def plan_cmd(
    ctx: click.Context, config: Path, inventory_path: Path | None, gpus_per_node: int | None, as_json: bool
) -> None:
    """Show where every process of every component would run.

    CONFIG is a full run config; only its `cluster` section is read. Nothing is contacted:
    robots come from the config's hardware.configs, accelerators from the inventory.
    """
    from rlinf_core.compose import load_config
    from rlinf_core.config import load_yaml
    from rlinf_scheduler.placement import Inventory, plan_placement, render_table

    if inventory_path is not None and gpus_per_node is not None:
        raise click.UsageError("give --inventory or --gpus-per-node, not both")
    data = load_config(config)
    from rlinf_core.pools import is_seed_form

    if "cluster" not in data and is_seed_form(data):
        _plan_pools(ctx, data, inventory_path, gpus_per_node, as_json)
        return
    if "cluster" not in data:
        raise ConfigError(
            f"{config} has no `cluster` section (top-level keys: {', '.join(map(str, data)) or 'none'})",
            "cluster",
        )
    from rlinf_core.compat import ignored_keys_warning, split_rlinf_cluster_keys

    section, ignored, _ = split_rlinf_cluster_keys(data["cluster"], keep_unknown=True)
    if ignored:  # RLinf's keys rlinf does not implement: accepted, named once
        click.echo(f"warning: {ignored_keys_warning(ignored)}", err=True)
    inventory: Inventory | dict | None
    if inventory_path is not None:
        inventory = load_yaml(
            inventory_path
        )  # validated by the planner, its problems reported with the config's
    elif gpus_per_node is not None:
        inventory = Inventory.uniform(gpus_per_node)
    else:
        inventory = None
    plan = plan_placement(section, inventory, hardware=get_host(ctx))
    if as_json:
        click.echo(plan.to_json())
    else:
        click.echo(render_table(plan), nl=False)


def _plan_pools(
    ctx: click.Context,
    data: dict[str, Any],
    inventory_path: Path | None,
    gpus_per_node: int | None,
    as_json: bool,
) -> None:
    """``rlinf cluster plan`` of a worker-pool config (seed 003): the ``cluster`` section its
    pools become (:func:`rlinf_core.pools.expand_pools`), then its plan. Without an inventory,
    the GPUs the pools imply (``ray_cluster.head_node_gpus``, the rollout GPUs over the other
    nodes) are the inventory."""
    import yaml

    from rlinf_core.config import load_yaml
    from rlinf_core.pools import expand_pools
    from rlinf_scheduler.placement import Inventory, plan_placement, render_table

    host = get_host(ctx)
    algo = data.get("algorithm")
    name = algo.get("name") if isinstance(algo, dict) else algo
    components: tuple[str, ...] = ("env", "rollout", "actor")
    sections: tuple[str, ...] = ("env", "model", "runner", "rollout", "actor")
    if isinstance(name, str) and name in host.algorithms:
        algo_cls = host.algorithms.get(name)
        components = tuple(algo_cls.components) or components
        sections = tuple(algo_cls.sections) or sections
    expansion = expand_pools(data, components, sections)
    if expansion.problems:
        raise ConfigError(expansion.problems)
    inventory: Any
    implied = False
    if inventory_path is not None:
        inventory = load_yaml(inventory_path)
    elif gpus_per_node is not None:
        inventory = Inventory.uniform(gpus_per_node)
    else:
        inventory, implied = expansion.inventory, True
    try:
        plan = plan_placement(expansion.cluster, inventory, hardware=host)
    except ConfigError as err:
        raise ConfigError(expansion.translate(err.problems)) from None
    if as_json:
        click.echo(
            json.dumps(
                {"cluster": expansion.cluster, "notes": expansion.notes, "plan": plan.to_dict()},
                indent=2,
            )
        )
        return
    click.echo("# worker-pool form (seed 003) expanded:")
    for note in expansion.notes:
        click.echo(f"#   {note}")
    click.echo("# the cluster section it became")
    click.echo(yaml.safe_dump({"cluster": expansion.cluster}, sort_keys=False))
    if implied:
        nodes = ", ".join(f"node {n['node_ranks']}: {n['gpus']} GPUs" for n in expansion.inventory["nodes"])
        click.echo(
            f"# inventory: implied by the worker pools ({nodes}); --inventory FILE plans against yours"
        )
    click.echo(render_table(plan), nl=False)


# -- rlinf node ----------------------------------------------------------------------------------
@click.group("node")
def node() -> None:
    """Start and stop Ray on this node (with its RLINF_NODE_RANK), tracked by PID."""


@node.command(
    "start",
    context_settings={"ignore_unknown_options": False},
    epilog="Arguments after `--` go to `ray start` unchanged, e.g. `-- --object-store-memory 2000000000`.",
)
@click.option(
    "--rank", type=click.IntRange(min=0), required=True, help="This node's RLINF_NODE_RANK (0..N-1)."
)
@click.option("--head", is_flag=True, help="Start the head node (usually rank 0).")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=6379, show_default=True, help="The head's port."
)
@click.option("--address", help="HOST:PORT of the head to join (worker nodes).")
@click.option("--node-ip", help="The address other nodes reach this node at (default: from --net-device).")
@click.option("--net-device", help="Interface for Ray and collectives; sets RLINF_COMM_NET_DEVICES.")
@click.option(
    "--network",
    metavar="PROVIDER",
    help="Bind Ray to an overlay network (e.g. easytier): node IP and RLINF_COMM_NET_DEVICES come from "
    "the provider's instance running on this host (`rlinf net up --detach`).",
)
@click.option(
    "--net-instance",
    metavar="NAME",
    help="The overlay instance to bind to (`rlinf net up --name NAME`; default: the host name).",
)
@click.option("--num-gpus", type=click.IntRange(min=0), help="Accelerators Ray reports on this node.")
@click.option("--num-cpus", type=click.IntRange(min=0), help="CPUs Ray reports on this node.")
@click.option("--temp-dir", type=click.Path(file_okay=False), help="Ray's temporary directory on this node.")
@click.option(
    "--auth",
    type=click.Choice(["token", "disabled"]),
    default=None,
    help="Ray token authentication (every node of one cluster must agree). Default: RAY_AUTH_MODE if set, "
    "else token; an --auth that contradicts RAY_AUTH_MODE is refused.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False),
    help="The auth token file (default: RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token; the head creates it with "
    "mode 600; a file open to other users is set to 600, or refused when that is not possible).",
)
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=300, show_default=True, help="Seconds for `ray start`."
)
@click.option("--json", "as_json", is_flag=True, help="Print the node record as JSON.")
@click.argument("ray_args", nargs=-1, type=click.UNPROCESSED)
def node_start(
    rank: int,
    head: bool,
    port: int,
    address: str | None,
    node_ip: str | None,
    net_device: str | None,
    network: str | None,
    net_instance: str | None,
    num_gpus: int | None,
    num_cpus: int | None,
    temp_dir: str | None,
    auth: str | None,
    token_file: str | None,
    timeout: float,
    as_json: bool,
    ray_args: tuple[str, ...],
) -> None:
    """Run `ray start` with RLINF_NODE_RANK (and RLINF_COMM_NET_DEVICES) in its environment.

    Head:   rlinf node start --rank 0 --head [--port 6379] [--node-ip IP | --net-device IFACE]

    Worker: rlinf node start --rank R --address HEAD_IP:6379 [--net-device IFACE]

    Over an overlay: add --network easytier [--net-instance NAME] on every node instead of
    --node-ip/--net-device (the worker's --address is the head's overlay IP).
    """
    from rlinf_scheduler.runtime.node import NodeStartOptions, join_instructions, start_node

    if head == bool(address):
        raise click.UsageError("give --head (start the head) or --address HEAD:PORT (join it), not both")
    if net_instance and not network:
        raise click.UsageError("--net-instance needs --network PROVIDER (e.g. --network easytier)")
    if network and (node_ip or net_device):
        raise click.UsageError(
            "--network takes the node IP and the net device from the overlay instance; "
            "drop --node-ip / --net-device"
        )
    opts = NodeStartOptions(
        rank=rank,
        head=head,
        port=port,
        address=address,
        node_ip=node_ip,
        net_device=net_device,
        num_gpus=num_gpus,
        num_cpus=num_cpus,
        temp_dir=str(Path(temp_dir).resolve()) if temp_dir else None,
        auth=auth,
        token_file=token_file,
        extra_args=ray_args,
        timeout=timeout,
        network=network,
        net_instance=net_instance,
    )
    rec = start_node(opts, providers=get_host().network_providers if network else None)
    if as_json:
        click.echo(json.dumps(rec.to_dict(), indent=2))
    else:
        click.echo(join_instructions(rec))


@node.command("stop")
@click.option(
    "--node-ip", help="Stop only the node bound to this address (default: every node started here)."
)
@click.option(
    "--grace", type=click.FloatRange(min=0), default=15, show_default=True, help="Seconds before SIGKILL."
)
def node_stop(node_ip: str | None, grace: float) -> None:
    """Stop the Ray processes `rlinf node start` started on this machine (by PID; never `ray stop`)."""
    from rlinf_scheduler.runtime.node import session_pids, stop_nodes

    stopped = stop_nodes(node_ip=node_ip, grace=grace)
    if not stopped:
        click.echo(
            "no node started by `rlinf node start` is recorded on this machine"
            + (f" for {node_ip}" if node_ip else "")
        )
        return
    for rec, pids in stopped:
        click.echo(f"stopped rank {rec.rank} ({rec.node_ip}, session {rec.sid}): {len(pids)} processes")
        if left := session_pids(rec.sid):
            click.echo(
                f"warning: {len(left)} process(es) of session {rec.sid} still alive 10 s after SIGKILL "
                f"(PIDs {', '.join(map(str, left))}; uninterruptible I/O?)",
                err=True,
            )


@node.command("list")
@click.option("--json", "as_json", is_flag=True)
def node_list(as_json: bool) -> None:
    """List the nodes `rlinf node start` started on this machine. A node is running only while its
    processes live and its head answers on its GCS port; otherwise its record is stale (a head that
    lost its GCS while its raylet lives on), shown with the command that clears it."""
    from rlinf_scheduler.runtime.node import head_answers, load_records, session_pids, stop_command

    rows = []
    for rec in load_records():
        d = rec.to_dict()
        d["running_processes"] = len(session_pids(rec.sid))
        d["head_answers"] = head_answers(rec)
        d["state"] = "running" if d["running_processes"] and d["head_answers"] else "stale"
        if d["state"] == "stale":
            d["clear_with"] = stop_command(rec)
        rows.append(d)
    if as_json:
        click.echo(json.dumps({"nodes": rows}, indent=2))
        return
    if not rows:
        click.echo("no node started by `rlinf node start` is recorded on this machine")
    for d in rows:
        on = f" on the {d['network']} overlay ({d['net_device']})" if d.get("network") else ""
        where = f"rank {d['rank']} {'head' if d['head'] else 'worker'} {d['node_ip']}{on} -> {d['address']}"
        if d["state"] == "running":
            click.echo(f"{where}: running, {d['running_processes']} processes (session {d['sid']})")
            continue
        why = "its head does not answer" if not d["head_answers"] else "none of its processes runs"
        left = f", {d['running_processes']} of its processes still run" if d["running_processes"] else ""
        click.echo(f"{where}: STALE ({why}{left}, session {d['sid']}); clear it with `{d['clear_with']}`")


# -- rlinf cluster status / wait / doctor --------------------------------------------------------
_ADDRESS = click.option(
    "--address", help="Ray address (default: RAY_ADDRESS, else the cluster running here)."
)


def _connect(address: str | None) -> Any:
    import logging

    from rlinf_scheduler.runtime.cluster import Cluster

    # inspection commands: no Ray INFO lines, no worker output forwarded
    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    return Cluster(address=address, wait=False, embedded=False, ray_init=quiet)


def _make_net_probe() -> Any:
    # nested, so it is pickled by value: a node without rlinf installed can still answer
    def net_probe(provider_env: str) -> dict[str, Any]:
        import fcntl
        import os
        import socket
        import struct

        def ipv4(dev: str) -> str | None:
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", dev.encode()[:15]))
            except OSError:
                return None
            return socket.inet_ntoa(packed[20:24])

        return {
            "provider": os.environ.get(provider_env) or None,
            "interfaces": {name: ipv4(name) for _, name in socket.if_nameindex()},
        }

    return net_probe


def _probe_networks(nodes: list[Any], timeout: float = 30.0) -> dict[str, dict[str, Any]]:
    """For every alive, probed node: the overlay provider it was started with
    (``RLINF_NET_PROVIDER``) and the IPv4 address of each of its interfaces, read on the node."""
    from rlinf_scheduler.runtime._ray import import_ray
    from rlinf_scheduler.runtime.node import NET_PROVIDER_ENV

    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    fn = ray.remote(num_cpus=0, max_retries=0)(_make_net_probe())
    refs = {
        n.node_id: fn.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False)
        ).remote(NET_PROVIDER_ENV)
        for n in nodes
        if n.alive and not n.probe_error
    }
    if not refs:
        return {}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    out: dict[str, dict[str, Any]] = {}
    for node_id, ref in refs.items():
        if ref not in ready:
            ray.cancel(ref, force=True)
            continue
        try:
            out[node_id] = ray.get(ref)
        except Exception:  # the main probe already reports nodes that cannot run tasks
            continue
    return out


def _network_view(node: Any, net: dict[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """The ``ip_device``, ``net_addresses`` and ``overlay`` keys of one node for ``cluster status``,
    and what is wrong with how it is bound (Ray's address not on its RLINF_COMM_NET_DEVICES)."""
    from rlinf_scheduler.runtime.node_info import NET_DEVICES_ENV

    if net is None:
        return {"ip_device": None, "overlay": None}, []
    interfaces: dict[str, str | None] = net["interfaces"]
    ip_device = next((dev for dev, ip in interfaces.items() if ip == node.ip), None)
    if ip_device is None and node.ip.startswith("127."):  # all of 127/8 is local on the loopback device
        ip_device = next((dev for dev, ip in interfaces.items() if ip and ip.startswith("127.")), None)
    keys: dict[str, Any] = {"ip_device": ip_device}
    problems: list[str] = []
    devices = [d.strip() for d in (node.env.get(NET_DEVICES_ENV) or "").split(",") if d.strip()]
    if devices:
        keys["net_addresses"] = {d: interfaces.get(d) for d in devices}
        for d in devices:
            if not interfaces.get(d):
                problems.append(
                    f"{node.where}: {NET_DEVICES_ENV} names {d!r}, which has no IPv4 address on that node"
                    + (" (is its overlay instance down?)" if net["provider"] else "")
                )
        if ip_device not in devices and any(interfaces.get(d) for d in devices):
            carried = ", ".join(f"{d} {interfaces[d]}" for d in devices if interfaces.get(d))
            problems.append(
                f"{node.where}: Ray is bound to {node.ip}"
                + (f" on {ip_device}" if ip_device else "")
                + f" but {NET_DEVICES_ENV} is {','.join(devices)} ({carried}): Ray and collectives would use "
                "different networks; restart Ray there with `rlinf node start --network PROVIDER` (overlay) or "
                "`--net-device DEV`"
            )
    provider = net["provider"]
    on_overlay = bool(provider) and ip_device is not None and ip_device in devices
    keys["overlay"] = {"provider": provider, "device": ip_device, "ipv4": node.ip} if on_overlay else None
    return keys, problems


def _status(address: str | None, num_nodes: int | None) -> dict[str, Any]:
    from rlinf_scheduler.runtime.cluster import cluster_problems

    c = _connect(address)
    try:
        nodes = c.probe()
        nets = _probe_networks(nodes)
    finally:
        c.shutdown()
    nodes.sort(key=lambda n: (n.rank is None, n.rank if n.rank is not None else 0, not n.alive))
    alive = [n for n in nodes if n.alive]
    if len(alive) == 1 and alive[0].rank is None and not alive[0].raw_rank:
        from dataclasses import replace

        nodes = [replace(n, rank=0) if n is alive[0] else n for n in nodes]
    rows = []
    problems = cluster_problems(nodes, num_nodes)
    for n in nodes:
        keys, found = _network_view(n, nets.get(n.node_id))
        rows.append({**n.to_dict(), **keys})
        problems.extend(found)
    return {"nodes": rows, "problems": problems}


@cluster.command("status")
@_ADDRESS
@click.option(
    "--nodes", "num_nodes", type=click.IntRange(min=1), help="Expected node count (cluster.num_nodes)."
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def status_cmd(address: str | None, num_nodes: int | None, as_json: bool) -> None:
    """List every node: rank, IP (and the device carrying it, with the overlay provider when Ray is
    bound to an overlay), alive, CPUs, GPUs, Python, versions; flag what is wrong."""
    data = _status(address, num_nodes)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    dists = sorted({d for n in data["nodes"] for d in n["versions"]}, key=lambda d: (d != "ray", d))
    table = Table(title="Ray cluster", box=box.SIMPLE_HEAD)
    for col in ("rank", "ip", "device", "alive", "cpus", "gpus", "python", *dists):
        table.add_column(col, overflow="fold")
    for n in data["nodes"]:
        gpus = str(n["gpus"]) + (f" {n['gpu_model']}" if n["gpu_model"] else "")
        table.add_row(
            "-" if n["rank"] is None else str(n["rank"]),
            n["ip"],
            (n.get("ip_device") or "?")
            + (f" ({n['overlay']['provider']} overlay)" if n.get("overlay") else ""),
            "yes" if n["alive"] else "NO",
            str(n["cpus"]),
            gpus,
            n["python"] or "?",
            *[n["versions"].get(d, "-") for d in dists],
        )
    console = Console(soft_wrap=False, width=200)
    console.print(table)
    if data["problems"]:
        console.print("problems:", markup=False)
        for p in data["problems"]:
            console.print(f"  - {p}", markup=False)
    else:
        console.print("no problems found", markup=False)


@cluster.command("wait")
@_ADDRESS
@click.option(
    "--nodes", "num_nodes", type=click.IntRange(min=1), required=True, help="At least this many live nodes."
)
@click.option(
    "--gpus", type=click.IntRange(min=0), default=0, show_default=True, help="At least this many GPUs in all."
)
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=300, show_default=True, help="Seconds to wait."
)
def wait_cmd(address: str | None, num_nodes: int, gpus: int, timeout: float) -> None:
    """Exit 0 once at least N nodes and G GPUs are alive; exit 1 at the timeout naming what is missing."""
    from rlinf_scheduler.runtime._ray import import_ray
    from rlinf_scheduler.runtime.auth import AuthRefused

    deadline = time.monotonic() + timeout
    c = None
    last_error = ""
    while c is None:
        try:
            c = _connect(address)
        except AuthRefused:
            raise  # not transient: waiting cannot fix credentials
        except SchedulerError as err:
            last_error = str(err)
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"waited {timeout:g} s for a Ray cluster: {last_error}") from None
            time.sleep(1.0)
    ray = import_ray()
    try:
        while True:
            alive = [n for n in ray.nodes() if n.get("Alive")]
            have_gpus = sum(int((n.get("Resources") or {}).get("GPU", 0)) for n in alive)
            if len(alive) >= num_nodes and have_gpus >= gpus:
                click.echo(f"ready: {len(alive)} nodes, {have_gpus} GPUs alive")
                return
            if time.monotonic() >= deadline:
                missing = []
                if len(alive) < num_nodes:
                    missing.append(
                        f"{num_nodes - len(alive)} more node(s) (alive {len(alive)} of {num_nodes})"
                    )
                if have_gpus < gpus:
                    missing.append(f"{gpus - have_gpus} more GPU(s) (alive {have_gpus} of {gpus})")
                raise WaitTimeout(f"waited {timeout:g} s; missing " + " and ".join(missing))
            time.sleep(1.0)
    finally:
        c.shutdown()


@cluster.command("doctor")
@_ADDRESS
@click.option(
    "--nodes", "num_nodes", type=click.IntRange(min=1), help="Expected node count (cluster.num_nodes)."
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A run config; its cluster.num_nodes is the expected node count.",
)
def doctor_cmd(address: str | None, num_nodes: int | None, config_path: Path | None) -> None:
    """Explain common cluster problems in plain words (unreachable head, head bound to 127.0.0.1,
    fewer nodes than num_nodes, version mismatch, auth). Exits 1 if something is wrong."""
    import os

    from rlinf_scheduler.runtime.cluster import (
        running_local_address,
        split_address,
        tcp_reachable,
        unreachable_message,
    )

    if config_path is not None:
        from rlinf_core.compose import load_config

        section = load_config(config_path).get("cluster")
        value = section.get("num_nodes") if isinstance(section, dict) else None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{config_path} has no valid cluster.num_nodes", "cluster.num_nodes")
        num_nodes = num_nodes or value
    findings: list[tuple[str, str]] = []

    def say(level: str, text: str) -> None:
        findings.append((level, text))
        click.echo(f"[{level}] {text}")

    addr = address or os.environ.get("RAY_ADDRESS") or running_local_address()
    if not addr:
        say(
            "error",
            "no Ray cluster found: RAY_ADDRESS is unset and none runs on this machine. Start the head with "
            "`rlinf node start --rank 0 --head --node-ip <reachable ip>` and the others with "
            "`rlinf node start --rank R --address <head ip>:6379`.",
        )
        raise SystemExit(1)
    say("ok", f"Ray address: {addr}")
    hostport = split_address(addr)
    if hostport is not None:
        host, port = hostport
        why = tcp_reachable(host, port, timeout=5.0)
        if why is not None:
            say("error", unreachable_message(addr, why))
            raise SystemExit(1)
        say("ok", f"the head answers on {host}:{port}")
        if host.startswith("127.") or host == "localhost":
            say(
                "warn",
                f"the head is bound to the loopback address {host}: nodes on other machines cannot join it. "
                "Restart the head with --node-ip (or --net-device) set to an address they can reach.",
            )
    try:
        data = _status(addr, num_nodes)
    except SchedulerError as err:
        say("error", str(err))
        raise SystemExit(1) from None
    alive = [n for n in data["nodes"] if n["alive"]]
    say("ok", f"{len(alive)} node(s) alive" + (f", cluster.num_nodes is {num_nodes}" if num_nodes else ""))
    if num_nodes and len(alive) < num_nodes:
        say(
            "error",
            f"fewer nodes than cluster.num_nodes ({len(alive)} < {num_nodes}): wait for the others to join "
            "(`rlinf cluster wait --nodes N`), check that `ray start` succeeded on each (its log, firewall, "
            "--address) and that they joined this cluster and not another one.",
        )
    for p in data["problems"]:
        level = "warn" if "are not used" in p else "error"
        if "versions differ" in p:
            p += " — install the same ray and rlinf on every node, then restart Ray there (or use RLINF_CODE_WORKING_DIR for rlinf)"
        if num_nodes and len(alive) < num_nodes and p.startswith("missing node ranks"):
            continue
        say(level, p)
    if any(level == "error" for level, _ in findings):
        raise SystemExit(1)
    click.echo("the cluster looks healthy")


def register(cli: click.Group) -> None:
    """Add the ``cluster`` and ``node`` groups to the root ``rlinf`` group."""
    cli.add_command(cluster)
    cli.add_command(node)

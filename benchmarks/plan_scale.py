"""How long the placement planner takes, and how much memory it needs, as clusters grow.

Scenarios (targets on a 2-core machine, from issue 3):

- ``seed-18``: the seeds' 18-node heterogeneous example (A800 + 4090 + 2 Franka + 400 agents),
  inventory 8 GPUs on nodes 0-15 (target < 20 ms);
- ``32x8``: 32 nodes x 8 GPUs, four components (actor, rollout sharing GPUs, reward in 8-GPU
  blocks, 100 agents per node) (target < 50 ms);
- ``10k``: a synthetic 10,000-node cluster, 8 GPUs on 8,000 of them, four groups, 80,000 processes
  (target < 2 s).

Columns, side by side: ``validate`` (resolve_cluster alone: models, ranks, plugin configs),
``plan`` (validate + plan_placement, what the runtime pays; wall clock, and CPU time, which is
steadier on a shared machine), ``plan+json`` (plus ``Plan.to_dict``
as ``rlinf cluster plan --json`` does), and the peak Python memory of ``plan`` (tracemalloc, in
a separate run so that tracing does not skew the timings). Timings are the median of the runs.

    uv run python benchmarks/plan_scale.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlinf_core import HardwareConfig, HardwarePlugin, hookimpl, load_plugins
from rlinf_core.cluster import resolve_cluster
from rlinf_core.config import load_yaml
from rlinf_scheduler.placement import Inventory, load_inventory, plan_placement

ROOT = Path(__file__).resolve().parents[1]


class _FrankaStandInConfig(HardwareConfig):
    robot_ip: str
    camera_serials: list[str] = []


class _FrankaStandIn(HardwarePlugin):
    """Used only when no installed plugin provides "Franka"; same config shape."""

    PLUGIN_NAME = "Franka"
    config_model = _FrankaStandInConfig


class _StandInPlugin:
    @hookimpl
    def rlinf_register_hardware(self) -> list[type]:
        return [_FrankaStandIn]


def hardware_registry() -> tuple[Any, str]:
    host = load_plugins()
    try:
        if "Franka" in host.hardware:
            owner = host.hardware.owner("Franka")
            return host.hardware, f"{owner.distribution} {owner.version}"
    except Exception:
        pass
    return load_plugins(entry_points=[], extra=[("bench-franka", _StandInPlugin())]).hardware, "stand-in"


def scenario_seed() -> tuple[dict[str, Any], Inventory]:
    cfg = load_yaml(ROOT / "examples" / "cluster_heterogeneous_18node.yaml")["cluster"]
    return cfg, load_inventory(ROOT / "examples" / "inventory_18node.yaml", 18)


def scenario_32x8() -> tuple[dict[str, Any], Inventory]:
    cfg = {
        "num_nodes": 32,
        "node_groups": [
            {
                "label": "train",
                "node_ranks": "0-15",
                "env_configs": [{"node_ranks": "0-15", "env_vars": [{"NCCL_IB_HCA": "mlx5"}]}],
            },
            {
                "label": "gen",
                "node_ranks": "16-31",
                "env_configs": [
                    {
                        "node_ranks": "16-31",
                        "python_interpreter_path": "/opt/venv/bin/python",
                        "env_vars": {"A": "1"},
                    }
                ],
            },
        ],
        "component_placement": {
            "actor": {"node_group": "train", "placement": "0-127"},
            "rollout": {"node_group": "gen", "placement": "0-127:0-255"},
            "reward": {"node_group": "cluster", "placement": "0-255:0-31"},
            "agent": {"node_group": "node", "placement": "0-31:0-3199"},
        },
    }
    return cfg, Inventory.uniform(8)


def scenario_10k() -> tuple[dict[str, Any], Inventory]:
    cfg = {
        "num_nodes": 10_000,
        "node_groups": [
            {
                "label": "train",
                "node_ranks": "0-2499",
                "env_configs": [{"node_ranks": "0-2499", "env_vars": {"X": "1"}}],
            },
            {"label": "gen-a", "node_ranks": "2500-4999"},
            {"label": "gen-b", "node_ranks": "5000-7999"},
            {"label": "cpu", "node_ranks": "8000-9999"},
        ],
        "component_placement": {
            "actor": {"node_group": "train", "placement": "all"},
            "rollout": {"node_group": "gen-a,gen-b", "placement": "all"},
            "env": {"node_group": "cpu", "placement": "all:0-7999"},
            "agent": {"node_group": "node", "placement": "0-9999"},
        },
    }
    inv = Inventory.from_data({"nodes": [{"node_ranks": "0-7999", "gpus": 8}]}, 10_000)
    return cfg, inv


SCENARIOS: dict[str, tuple[Callable[[], tuple[dict[str, Any], Inventory]], float]] = {
    "seed-18": (scenario_seed, 0.020),
    "32x8": (scenario_32x8, 0.050),
    "10k": (scenario_10k, 2.0),
}


def timed(fn: Callable[[], Any], repeats: int, clock: Callable[[], float] = time.perf_counter) -> float:
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def peak_mib(fn: Callable[[], Any]) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del result
    return peak / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="Write the figures to this JSON file.")
    parser.add_argument("--quick", action="store_true", help="Fewer repeats (a smoke run).")
    args = parser.parse_args(argv)

    hardware, franka_from = hardware_registry()
    rows = []
    for name, (make, target) in SCENARIOS.items():
        cfg, inv = make()
        big = name == "10k"
        repeats = (1 if args.quick else 5) if big else (3 if args.quick else 30)
        plan = plan_placement(cfg, inv, hardware=hardware)  # warm-up, and the figures below
        processes = sum(c.world_size for c in plan.components.values())
        t_validate = timed(lambda cfg=cfg: resolve_cluster(cfg, hardware), repeats)
        t_plan = timed(lambda cfg=cfg, inv=inv: plan_placement(cfg, inv, hardware=hardware), repeats)
        t_cpu = timed(
            lambda cfg=cfg, inv=inv: plan_placement(cfg, inv, hardware=hardware), repeats, time.process_time
        )
        t_json = timed(
            lambda cfg=cfg, inv=inv: plan_placement(cfg, inv, hardware=hardware).to_dict(), repeats
        )
        mem = peak_mib(lambda cfg=cfg, inv=inv: plan_placement(cfg, inv, hardware=hardware))
        rows.append(
            {
                "scenario": name,
                "nodes": plan.num_nodes,
                "components": len(plan.components),
                "processes": processes,
                "validate_ms": t_validate * 1e3,
                "plan_ms": t_plan * 1e3,
                "plan_cpu_ms": t_cpu * 1e3,
                "plan_json_ms": t_json * 1e3,
                "peak_mib": mem,
                "target_ms": target * 1e3,
                "within_target": t_plan <= target,
                "repeats": repeats,
            }
        )

    header = (
        "scenario",
        "nodes",
        "procs",
        "validate ms",
        "plan ms",
        "plan CPU ms",
        "plan+json ms",
        "peak MiB",
        "target ms",
        "ok",
    )
    table = [
        (
            r["scenario"],
            str(r["nodes"]),
            str(r["processes"]),
            f"{r['validate_ms']:.2f}",
            f"{r['plan_ms']:.2f}",
            f"{r['plan_cpu_ms']:.2f}",
            f"{r['plan_json_ms']:.2f}",
            f"{r['peak_mib']:.2f}",
            f"{r['target_ms']:.0f}",
            "yes" if r["within_target"] else "NO",
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(header)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in table:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    machine = f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}"
    print(
        f"\n{machine}; Franka type from: {franka_from}; medians of the repeats; peak = tracemalloc of one plan"
    )
    if args.json:
        payload = {"machine": machine, "franka_from": franka_from, "quick": args.quick, "results": rows}
        tmp = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2))
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Franka control-loop timing against franka-sim, and MuJoCo twin throughput.

1. Control loop at 10 Hz and 50 Hz: ``FrankaEnv("franky")`` drives franka-sim (the Franka network
   protocol simulator, started with uvx on 127.0.0.4) along a moving target. Per step: read the
   state, compute the action, send an asynchronous Cartesian motion, wait for the deadline.
   Reported: the period error (actual minus nominal period) at p50 / p99 and the missed
   deadlines. Side by side, the same loop paced by a naive ``time.sleep(period)`` after the work,
   which is what the deadline accounting of :class:`RateKeeper` replaces.
2. Simulation throughput (env steps/s, no real-time pacing): ``rlinf/FrankaReach-v0`` (state only,
   and with one 128x128 camera) next to gymnasium's own MuJoCo ``Reacher-v5``.

Usage::

    uv run python benchmarks/franka_control.py [--quick] [--json out.json] [--skip-sim-server]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"


def percentiles(errors_s: list[float]) -> dict[str, float]:
    a = np.abs(np.asarray(errors_s)) * 1000.0
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p99_ms": float(np.percentile(a, 99)),
        "max_ms": float(a.max()),
    }


def control_loop(host: str, hz: float, steps: int, pacing: str) -> dict[str, object]:
    """Run ``steps`` env steps at ``hz`` against franka-sim; pacing 'deadline' or 'naive'."""
    from rlinf_hw_franka.env import FrankaEnv

    env = FrankaEnv(
        "franky",
        robot_ip=host,
        gripper=False,
        control_hz=hz,
        realtime=(pacing == "deadline"),
        timing_info=True,
        max_delta_pos=0.3 / hz,  # at most 0.3 m/s whatever the rate
    )
    try:
        obs, _ = env.reset(options={"target": [0.45, 0.0, 0.6]})
        center = np.array([0.42, 0.0, 0.62])
        period = 1.0 / hz
        errors, works, overruns = [], [], 0
        last = time.perf_counter()
        for k in range(steps):
            t = k * period
            target = center + np.array(
                [0.08 * np.sin(0.8 * t), 0.12 * np.sin(0.5 * t), 0.05 * np.cos(0.6 * t)]
            )
            a = np.clip((target - obs["ee_pos"]) / env.max_delta_pos, -1, 1).astype(np.float32)
            t0 = time.perf_counter()
            obs, _, _, _, info = env.step(a)
            if pacing == "naive":
                work = time.perf_counter() - t0
                time.sleep(period)  # the naive loop: sleep a full period after the work
                now = time.perf_counter()
                errors.append((now - last) - period)
                works.append(work)
                overruns += (now - last) > period * 1.05
                last = now
            else:
                errors.append(info["period_error_s"])
                works.append(info["work_s"])
                overruns = info["overruns"]
        track = float(np.linalg.norm(obs["ee_pos"] - target))
    finally:
        env.close()
    return {
        "hz": hz,
        "pacing": pacing,
        "steps": steps,
        **percentiles(errors),
        "missed": int(overruns),
        "work_p50_ms": float(np.percentile(works, 50) * 1000),
        "final_tracking_error_mm": track * 1000,
    }


def sim_throughput(kind: str, seconds: float) -> dict[str, object]:
    import gymnasium as gym

    if kind == "Reacher-v5":
        env = gym.make("Reacher-v5")
    else:
        from rlinf_hw_franka.env import FrankaEnv

        env = FrankaEnv("mujoco", cameras=["front"] if kind.endswith("+camera") else None)
    env.reset(seed=0)
    env.action_space.seed(0)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        n += 1
        if term or trunc or (kind != "Reacher-v5" and n % 50 == 0):
            env.reset()
    dt = time.perf_counter() - t0
    env.close()
    return {"env": kind, "steps": n, "steps_per_s": n / dt}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (about 30 s in all)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--skip-sim-server", action="store_true", help="only the MuJoCo throughput part")
    args = parser.parse_args()

    results: dict[str, object] = {
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "quick": args.quick,
    }
    loops = []
    if not args.skip_sim_server:
        from rlinf_hw_franka.franka_sim import FrankaSimServer, FrankaSimUnavailable, prepare

        try:
            prepare()
            with FrankaSimServer("127.0.0.4") as sim:
                for hz in (10.0, 50.0):
                    steps = int(hz * (3 if args.quick else 20))
                    for pacing in ("deadline", "naive"):
                        print(f"control loop {hz:g} Hz, {pacing} pacing, {steps} steps ...", flush=True)
                        loops.append(control_loop(sim.host, hz, steps, pacing))
        except FrankaSimUnavailable as err:
            print(f"skipping the control-loop part: {err}", file=sys.stderr)
    results["control_loop"] = loops

    sims = []
    for kind in ("rlinf/FrankaReach-v0", "rlinf/FrankaReach-v0+camera", "Reacher-v5"):
        print(f"throughput {kind} ...", flush=True)
        sims.append(sim_throughput(kind, 3.0 if args.quick else 10.0))
    results["sim_throughput"] = sims

    print()
    if loops:
        print("Control loop against franka-sim (|actual period - nominal|)")
        print(
            f"{'rate':>6} {'pacing':>9} {'steps':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'missed':>7} {'work p50 ms':>12}"
        )
        for r in loops:
            print(
                f"{r['hz']:>5g}Hz {r['pacing']:>9} {r['steps']:>6} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
                f"{r['max_ms']:>8.2f} {r['missed']:>7} {r['work_p50_ms']:>12.2f}"
            )
        print()
    print("Simulation throughput (unpaced)")
    print(f"{'env':>30} {'steps':>8} {'steps/s':>10}")
    for r in sims:
        print(f"{r['env']:>30} {r['steps']:>8} {r['steps_per_s']:>10.0f}")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
        os.replace(tmp, args.json)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Env steps per second of an env family through rlinf against the simulator's own loop, on one
core (issue 49, item 7): where the cost of the child process, the pipe and the vector-env
wrapping goes.

For MetaWorld (``reach-v3``, random actions, state and ``pixels`` at 64x64), side by side in one
run:

- **bare**: MetaWorld's own loop in its interpreter (the venv ``rlinf env setup metaworld``
  made): ``env.step`` on one env per copy, reset when an episode ends, nothing else;
- **rlinf vector env**: :class:`~rlinf_algos.families.subproc.RemoteVectorEnv` (the simulator in
  a child process, observations and actions over the pipe);
- **rlinf stepper**: :class:`~rlinf_algos.envs.VectorEnvStepper`, what an env worker steps
  (episode statistics, action clipping, final observations).

Every process is pinned to one core (``taskset -c CORE``; the child inherits it), so the ratio is
the overhead per step. Beside the steps per second (wall clock, which other jobs on a loaded
machine's core also take), each side's CPU time per step is measured: the bare loop's process
time, and rlinf's env worker's plus its simulator process's (``/proc/PID/task/*/schedstat``).
The ``cpu overhead`` column leaves out the time other jobs run, but still grows with the load:
the env worker and its simulator block twice a step and get the core back after other jobs'
turns, most likely with a cold cache (the pieces timed apart sum to far less). Each batch of ``N`` steps is also timed alone (``p10 overhead``:
the 10th percentile of those times on each side): the bare loop's fastest batches are ones no
other job interrupted, but rlinf's step yields the core twice, so on a loaded machine even its
fastest batches include other jobs' turns; the figure nears a quiet machine's only at low load.
``overhead`` is from the medians over the repeats; each repeat's own ratios are kept
(``*_runs``) for the spread. ``benchmarks/env_families_breakdown.py`` times the pieces apart.
Usage::

    uv run python benchmarks/env_families.py --steps 3000 --json benchmarks/results/env_families_metaworld.json
    uv run python benchmarks/env_families.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import finish, fmt, machine

BARE = r"""
import json, os, sys, time
os.environ.setdefault("MUJOCO_GL", "egl")
import numpy as np, metaworld
n, steps, pixels = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "pixels"
bench = metaworld.MT1("reach-v3", seed=0)
kw = {"render_mode": "rgb_array", "camera_name": "corner", "width": 64, "height": 64} if pixels else {}
envs = [bench.train_classes["reach-v3"](**kw) for _ in range(n)]
for i, e in enumerate(envs):
    e.set_task(bench.train_tasks[i]); e.reset(seed=i)
    if pixels:
        import mujoco
        e.model.vis.quality.offsamples = 0
        e.render(); v = e.mujoco_renderer._get_viewer("rgb_array")
        v.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0; v.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
rng = np.random.default_rng(0); t = [0] * n; lap = []
start = time.perf_counter(); cpu = time.process_time()
for k in range(steps // n):
    t0 = time.perf_counter()
    for i, e in enumerate(envs):
        e.step(rng.uniform(-1, 1, 4)); t[i] += 1
        if pixels: e.render()
        if t[i] >= 500: e.reset(); t[i] = 0
    lap.append(time.perf_counter() - t0)
cpu, wall = time.process_time() - cpu, time.perf_counter() - start
print(json.dumps({"steps_per_s": (steps // n) * n / wall, "cpu_s": cpu / ((steps // n) * n),
                  "p10_s": float(np.percentile(lap, 10)) / n}))
"""


def bare(python: str, n: int, steps: int, mode: str, core: int) -> dict[str, float]:
    """``steps_per_s`` and ``cpu_s`` (CPU seconds per env step) of MetaWorld's own loop."""
    out = subprocess.run(
        ["taskset", "-c", str(core), python, "-c", BARE, str(n), str(steps), mode],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cpu_of(pid: int) -> float:
    """CPU seconds the process ``pid`` has run, all its threads (nanoseconds in schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def through_rlinf(n: int, steps: int, mode: str, which: str) -> dict[str, float]:
    """``steps_per_s`` and ``cpu_s`` (this process's and the simulator's CPU seconds per env
    step) through the vector env or the stepper."""
    from rlinf_algos.envs import VectorEnvStepper

    obs_mode = "state" if mode == "state" else "pixels"
    st = VectorEnvStepper("reach-v3", n, 0, family="metaworld", obs_mode=obs_mode, image_size=(64, 64))
    rng = np.random.default_rng(0)
    try:
        raw = st.envs.unwrapped
        pid = raw.proc.pid
        step = st.step if which == "stepper" else raw.step
        lap = []
        child, cpu, start = _cpu_of(pid), time.process_time(), time.perf_counter()
        for _ in range(steps // n):
            t0 = time.perf_counter()
            step(rng.uniform(-1, 1, (n, 4)).astype(np.float32))
            lap.append(time.perf_counter() - t0)
        wall, cpu, child = time.perf_counter() - start, time.process_time() - cpu, _cpu_of(pid) - child
        done = (steps // n) * n
        return {
            "steps_per_s": done / wall,
            "cpu_s": (cpu + child) / done,
            "p10_s": float(np.percentile(lap, 10)) / n,
        }
    finally:
        st.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--envs", default="1,8")
    p.add_argument("--modes", default="state,pixels")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--core", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="500 steps, state, 1 repeat")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--note", action="append", default=[], help="a line for the JSON's notes")
    args = p.parse_args()
    if args.quick:
        args.steps, args.modes, args.repeats = 500, "state", 1
    os.sched_setaffinity(0, {args.core})
    from rlinf_algos.families import get_family
    from rlinf_algos.families.venvs import setup_family

    python = str(setup_family(get_family("metaworld"), log=lambda *_: None))
    t0 = time.perf_counter()
    report = {
        "title": "Env family throughput: MetaWorld through rlinf vs its own loop (one core)",
        "machine": machine(("rlinf-algos", "gymnasium", "numpy"), core=args.core),
        "rows": [],
    }
    if args.note:
        report["notes"] = list(args.note)
    print(
        f"{'mode':<8} {'envs':>4} {'bare':>8} {'vector env':>11} {'stepper':>8} {'overhead':>9} "
        f"{'bare cpu/step':>14} {'rlinf cpu/step':>15} {'cpu overhead':>13} {'p10 overhead':>13}"
    )
    for mode in args.modes.split(","):
        for n in (int(x) for x in args.envs.split(",")):
            b, v, s = [], [], []
            for _ in range(args.repeats):  # interleaved, so load changes hit every side alike
                b.append(bare(python, n, args.steps, mode, args.core))
                v.append(through_rlinf(n, args.steps, mode, "vector"))
                s.append(through_rlinf(n, args.steps, mode, "stepper"))
            med = {
                k: float(np.median([r["steps_per_s"] for r in x])) for k, x in (("b", b), ("v", v), ("s", s))
            }
            cpu_b = float(np.median([r["cpu_s"] for r in b]))
            cpu_s = float(np.median([r["cpu_s"] for r in s]))
            row = {
                "family": "metaworld",
                "task": "reach-v3",
                "mode": mode,
                "envs": n,
                "bare_steps_per_s": med["b"],
                "vector_env_steps_per_s": med["v"],
                "stepper_steps_per_s": med["s"],
                "overhead_pct": 100.0 * (1 - med["s"] / med["b"]),
                "overhead_pct_runs": [
                    100.0 * (1 - y["steps_per_s"] / x["steps_per_s"]) for x, y in zip(b, s, strict=True)
                ],
                "bare_cpu_us_per_step": 1e6 * cpu_b,
                "stepper_cpu_us_per_step": 1e6 * cpu_s,
                "cpu_overhead_pct": 100.0 * (cpu_s / cpu_b - 1),
                "cpu_overhead_pct_runs": [
                    100.0 * (y["cpu_s"] / x["cpu_s"] - 1) for x, y in zip(b, s, strict=True)
                ],
                "bare_p10_us_per_step": 1e6 * float(np.median([r["p10_s"] for r in b])),
                "stepper_p10_us_per_step": 1e6 * float(np.median([r["p10_s"] for r in s])),
                "p10_overhead_pct_runs": [
                    100.0 * (y["p10_s"] / x["p10_s"] - 1) for x, y in zip(b, s, strict=True)
                ],
                "repeats": args.repeats,
            }
            row["p10_overhead_pct"] = 100.0 * (
                row["stepper_p10_us_per_step"] / row["bare_p10_us_per_step"] - 1
            )
            report["rows"].append(row)
            print(
                f"{mode:<8} {n:>4} {fmt(row['bare_steps_per_s']):>8} {fmt(row['vector_env_steps_per_s']):>11} "
                f"{fmt(row['stepper_steps_per_s']):>8} {fmt(row['overhead_pct'], '.1f'):>8}% "
                f"{fmt(row['bare_cpu_us_per_step']):>11} us {fmt(row['stepper_cpu_us_per_step']):>12} us "
                f"{fmt(row['cpu_overhead_pct'], '.1f'):>12}% {fmt(row['p10_overhead_pct'], '.1f'):>12}%"
            )
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

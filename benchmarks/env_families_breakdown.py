"""What rlinf's env worker adds to each MetaWorld step, piece by piece (issue 49, item 7): the
costs ``benchmarks/env_families.py`` sums, timed apart so that a loaded machine does not hide
them. Each piece is the fastest of many short timings (the time it takes when no other job
interrupts it), on one core:

- **simulator**: MetaWorld's ``env.step`` (``reach-v3``), in its own interpreter;
- **backend**: the same through rlinf's MetaWorld backend (``child/metaworld_backend.py``);
- **server**: the simulator process's whole step (``child/server.py``): the backend's steps,
  the actions read from and the results written into the shared block;
- **env worker**: ``VectorEnvStepper.step`` in rlinf's interpreter (episode statistics, action
  clipping, the vector env's copies out of the block) with the exchange itself left out;
- **exchange**: a step of the vector env against a simulator process whose backend does nothing
  (the frames, the system calls, the switches between the two processes, both sides' Python),
  less the vector env's own work, which the env worker column has;
- **pipe round trip**: an 8-byte write and read each way between two bare processes on the core
  (the floor of the exchange).

The added work per env step is ``server - simulator + (env worker + exchange) / N``; what it
leaves out is what a loaded core costs a process that blocks twice a step (other jobs run in
between and take its cache), which the wall-clock ratio of ``env_families.py`` shows. Usage::

    uv run python benchmarks/env_families_breakdown.py --json benchmarks/results/env_families_breakdown.json
"""

from __future__ import annotations

import argparse
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import finish, fmt, machine

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import numpy as np, server, wire
n, rounds = int(sys.argv[1]), int(sys.argv[2])
fd = os.memfd_create("rlinf-bench-block")
srv = server.Server(server._load_backend("metaworld_backend.py"), fd)
spaces = srv.make({"tasks": ["reach-v3"] * n, "max_episode_steps": 10**9})["spaces"]
srv.reset([0] * n, [None] * n)
for e in srv.sim.envs:
    e.max_path_length = 10**9
lay = wire.Layout.for_step(n, 4, spaces["obs"])
os.ftruncate(fd, lay.size)
srv.share(lay.to_plain())
acts = srv.views["actions"]
acts[:] = np.random.default_rng(0).uniform(-1, 1, acts.shape)
a64 = np.asarray(acts, np.float64)
sim, envs = srv.sim, srv.sim.envs
def simulator():
    for i, e in enumerate(envs):
        e.step(a64[i])
def backend():
    for i in range(n):
        sim.step(i, acts[i])
fs = {"simulator": simulator, "backend": backend, "server": srv.step}
best = {k: 1e9 for k in fs}
for _ in range(rounds):
    for k, f in fs.items():
        t0 = time.perf_counter(); f(); best[k] = min(best[k], time.perf_counter() - t0)
print(json.dumps({k: v / n for k, v in best.items()}))
"""


def child_side(python: str, n: int, rounds: int, core: int) -> dict[str, float]:
    from rlinf_algos.families.subproc import CHILD_DIR

    out = subprocess.run(
        ["taskset", "-c", str(core), python, "-c", CHILD, str(n), str(rounds)],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=str(CHILD_DIR),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


NULL_BACKEND = """
import numpy as np
class Null:
    def __init__(self, spec):
        self.num_envs = len(spec["tasks"])
        self.obs = np.zeros(39, np.float32)
    def spaces(self):
        return {"obs": {"kind": "box", "shape": [39], "dtype": "float32"},
                "action": {"low": np.full(4, -1.0, np.float32), "high": np.full(4, 1.0, np.float32)}}
    def reset(self, i, seed, init):
        return self.obs, {}
    def step(self, i, action):
        return self.obs, 0.0, False, False, {"success": False}
    def close(self):
        pass
def make(spec):
    return Null(spec)
"""


def _fastest(f: Any, rounds: int) -> float:
    best = 1e9
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def env_worker(n: int, rounds: int) -> tuple[float, float]:
    """Seconds per batch of ``VectorEnvStepper.step`` and of the bare vector env's step, both
    without the exchange."""
    from rlinf_algos.envs import VectorEnvStepper

    st = VectorEnvStepper("reach-v3", n, 0, family="metaworld")
    try:
        raw = st.envs.unwrapped
        raw.proc.step = dict  # the block keeps the last step's results: the worker's own work alone
        actions = np.random.default_rng(0).uniform(-1, 1, (n, 4)).astype(np.float32)
        return _fastest(lambda: st.step(actions), rounds), _fastest(lambda: raw.step(actions), rounds)
    finally:
        st.close()


def exchange(n: int, rounds: int) -> float:
    """Seconds per batch of the vector env's step against a simulator process doing nothing."""
    import tempfile

    from rlinf_algos.families.subproc import RemoteVectorEnv

    with tempfile.TemporaryDirectory() as tmp:
        backend = Path(tmp) / "null_backend.py"
        backend.write_text(NULL_BACKEND)
        env = RemoteVectorEnv("null", sys.executable, backend, {"tasks": ["null"] * n}, timeout=60.0)
        try:
            env.reset(seed=0)
            actions = np.zeros((n, 4), np.float32)
            return _fastest(lambda: env.step(actions), rounds)
        finally:
            env.close()


def pipe_round_trip(rounds: int) -> float:
    """Seconds of the fastest 8-byte frame each way between two processes on this core."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:  # the echo: what the simulator process does, without the simulator
        os.close(w1)
        os.close(r2)
        while chunk := os.read(r1, 8):
            os.write(w2, chunk)
        os._exit(0)
    os.close(r1)
    os.close(w2)
    best = 1e9
    try:
        for _ in range(rounds):
            t0 = time.perf_counter()
            os.write(w1, b"\0" * 8)
            select.select([r2], [], [], 10.0)
            os.read(r2, 8)
            best = min(best, time.perf_counter() - t0)
    finally:
        os.close(w1)
        os.close(r2)
        os.waitpid(pid, 0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="1,8")
    p.add_argument("--rounds", type=int, default=400, help="timings per piece (the fastest is kept)")
    p.add_argument("--core", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    os.sched_setaffinity(0, {args.core})
    from rlinf_algos.families import get_family
    from rlinf_algos.families.venvs import setup_family

    python = str(setup_family(get_family("metaworld"), log=lambda *_: None))
    t0 = time.perf_counter()
    report = {
        "title": "Env family step cost, piece by piece: MetaWorld reach-v3 through rlinf (one core)",
        "machine": machine(("rlinf-algos", "gymnasium", "numpy"), core=args.core),
        "rows": [],
    }
    rtt = pipe_round_trip(args.rounds * 5)
    print(
        f"{'envs':>4} {'simulator':>10} {'backend':>8} {'server':>8} {'env worker':>11} {'exchange':>9} "
        f"{'pipe rtt':>9} {'added/step':>11} {'added':>7}   (us per env step; env worker, exchange and "
        "pipe per batch / N)"
    )
    for n in (int(x) for x in args.envs.split(",")):
        child = child_side(python, n, args.rounds, args.core)
        worker, vector = env_worker(n, args.rounds)
        swap = max(0.0, exchange(n, args.rounds) - vector)
        added = child["server"] - child["simulator"] + (worker + swap) / n
        row = {
            "family": "metaworld",
            "task": "reach-v3",
            "envs": n,
            "simulator_us": 1e6 * child["simulator"],
            "backend_us": 1e6 * child["backend"],
            "server_us": 1e6 * child["server"],
            "env_worker_us": 1e6 * worker / n,
            "exchange_us": 1e6 * swap / n,
            "pipe_round_trip_us": 1e6 * rtt / n,
            "added_us_per_step": 1e6 * added,
            "added_pct": 100.0 * added / child["simulator"],
        }
        report["rows"].append(row)
        print(
            f"{n:>4} {fmt(row['simulator_us'], '.1f'):>10} {fmt(row['backend_us'], '.1f'):>8} "
            f"{fmt(row['server_us'], '.1f'):>8} {fmt(row['env_worker_us'], '.1f'):>11} "
            f"{fmt(row['exchange_us'], '.1f'):>9} {fmt(row['pipe_round_trip_us'], '.1f'):>9} "
            f"{fmt(row['added_us_per_step'], '.1f'):>11} {fmt(row['added_pct'], '.1f'):>6}%"
        )
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

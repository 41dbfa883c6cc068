"""Env steps/s of a ManiSkill3 task: the bare ManiSkill loop against rlinf's adapter
(:class:`rlinf_algos.maniskill_env.ManiSkillVectorEnv`), on one core.

- ``bare``: ``gym.make(task, num_envs=1, sim_backend="cpu")`` envs (ManiSkill's CPU simulator
  takes one scene per env, so N sub-envs are N envs), stepped in a Python loop with torch
  actions, each reset (``env.reset()``) when its episode ends; observations stay torch tensors.
- ``adapter``: ``ManiSkillVectorEnv(task, N)`` stepped with numpy ``[N, A]`` actions: numpy
  observations, same-step autoreset with ``final_obs`` and success flags.

Both take the same uniform random actions (seeded). Env creation is not timed; every repeat
runs ``--steps`` vector steps after a reset with seed ``--seed``, alternating bare and adapter.
The process is pinned to one CPU (``--cpu``) with one torch thread.

Usage::

    uv run python benchmarks/maniskill_adapter.py [--task PushCube-v1] [--num-envs 1 8]
        [--steps 500] [--repeats 3] [--json benchmarks/results/maniskill_adapter.json]

Needs the Vulkan driver (``uv run python -m rlinf_algos.vulkan setup`` on a CPU machine).
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from _report import finish, fmt, machine

DISTS = ("mani-skill", "sapien", "torch", "numpy", "gymnasium", "rlinf-algos")


def bare_envs(task: str, n: int, obs_mode: str) -> list[Any]:
    import gymnasium as gym

    from rlinf_algos.maniskill_env import import_maniskill

    import_maniskill()  # the same Vulkan set-up as the adapter
    return [
        gym.make(task, num_envs=1, obs_mode=obs_mode, sim_backend="cpu", render_backend="cpu")
        for _ in range(n)
    ]


def run_bare(envs: list[Any], actions: np.ndarray, seed: int) -> float:
    """Seconds for ``len(actions)`` steps of every env in ``envs``."""
    import torch

    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    acts = torch.as_tensor(actions)
    t0 = time.perf_counter()
    for step in range(len(acts)):
        for i, env in enumerate(envs):
            _, _, terminated, truncated, _ = env.step(acts[step, i : i + 1])
            if bool(terminated[0]) or bool(truncated[0]):
                env.reset()
    return time.perf_counter() - t0


def run_adapter(envs: Any, actions: np.ndarray, seed: int) -> float:
    envs.reset(seed=seed)
    t0 = time.perf_counter()
    for step in range(len(actions)):
        envs.step(actions[step])
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v1")
    parser.add_argument("--obs-mode", default="state", choices=["state"])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=500, help="vector steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu", type=int, default=0, help="the CPU to pin to (-1: no pinning)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "maniskill_adapter",
        "title": f"ManiSkill3 {args.task} ({args.obs_mode}, CPU sim): bare ManiSkill loop vs rlinf's adapter",
        "seeds": [args.seed],
        "machine": machine(DISTS, pinned_cpu=args.cpu, torch_threads=1),
        "config": {k: v for k, v in vars(args).items() if k != "json"} | {"json": str(args.json)},
        "rows": [],
        "figures": [],  # the rows as benchmarks/results_table.py shows them
        "source": "benchmarks/maniskill_adapter.py --json",
    }
    warnings.filterwarnings("ignore")
    import torch

    from rlinf_algos.maniskill_env import ManiSkillVectorEnv

    torch.set_num_threads(1)
    print(
        f"{args.task} ({args.obs_mode}), {args.steps} vector steps x {args.repeats} repeats, CPU {args.cpu}"
    )
    print(f"{'num_envs':>8}  {'bare steps/s':>22}  {'adapter steps/s':>22}  {'overhead':>8}")
    for n in args.num_envs:
        actions = np.random.default_rng(args.seed).uniform(-1, 1, (args.steps, n, 8)).astype(np.float32)
        bare = bare_envs(args.task, n, args.obs_mode)
        adapter = ManiSkillVectorEnv(args.task, n, obs_mode=args.obs_mode, sim_backend="cpu")
        assert actions.shape[2:] == adapter.single_action_space.shape
        rates: dict[str, list[float]] = {"bare": [], "adapter": []}
        for _ in range(args.repeats):
            rates["bare"].append(n * args.steps / run_bare(bare, actions, args.seed))
            rates["adapter"].append(n * args.steps / run_adapter(adapter, actions, args.seed))
        for env in bare:
            env.close()
        adapter.close()
        med = {k: statistics.median(v) for k, v in rates.items()}
        overhead = 100.0 * (med["bare"] / med["adapter"] - 1.0)
        row = {
            "num_envs": n,
            "bare_steps_per_s": rates["bare"],
            "adapter_steps_per_s": rates["adapter"],
            "bare_median": med["bare"],
            "adapter_median": med["adapter"],
            "overhead_pct": overhead,
        }
        cells = {k: f"{fmt(med[k])} ({fmt(min(v))}-{fmt(max(v))})" for k, v in rates.items()}
        print(f"{n:>8}  {cells['bare']:>22}  {cells['adapter']:>22}  {fmt(overhead, '+.1f'):>7}%")
        report["rows"].append(row)
        report["figures"].append(
            {
                "num_envs": n,
                "bare steps/s, median (min-max)": cells["bare"],
                "adapter steps/s, median (min-max)": cells["adapter"],
                "overhead": f"{overhead:+.1f} %",
            }
        )
    print("overhead: bare median / adapter median - 1 (time per env step added by the adapter)")
    report["conditions"] = (
        f"load average {report['machine']['load_at_start'][0]:.1f} at the start, {os.getloadavg()[0]:.1f} at "
        f"the end ({os.cpu_count()} CPUs, shared); pinned to CPU {args.cpu}, 1 torch thread"
    )
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

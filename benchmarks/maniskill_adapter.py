"""Env steps/s of a ManiSkill3 task: the bare ManiSkill loop against rlinf's adapter
(:class:`rlinf_algos.maniskill_env.ManiSkillVectorEnv`), on one core.

- ``bare``: ``gym.make(task, num_envs=1, sim_backend="cpu")`` envs (ManiSkill's CPU simulator
  takes one scene per env, so N sub-envs are N envs), stepped in a Python loop with torch
  actions, each reset (``env.reset()``) when its episode ends; observations stay torch tensors.
- ``adapter``: ``ManiSkillVectorEnv(task, N)`` stepped with numpy ``[N, A]`` actions: numpy
  observations, same-step autoreset with ``final_obs`` and success flags.

Both take the same uniform random actions (seeded). Env creation and the reset (seed
``--seed``) opening each window are not timed. A repeat is a pair of windows of ``--steps``
vector steps, bare and adapter back to back (which goes first alternates); the overhead is the
median over the pairs of the ratio of their CPU times (``time.process_time``: this process
alone, so other jobs on a shared machine move it far less than wall time). ``--obs-mode rgb``: one camera at
``--image-size`` with the ``minimal`` shader pack, observations as ManiSkill gives them (bare)
or ``{"image", "state"}`` (adapter).
The process is pinned to one CPU (``--cpu``) with one torch thread.

Usage::

    uv run python benchmarks/maniskill_adapter.py [--task PushCube-v1] [--obs-mode state|rgb]
        [--num-envs 1 8] [--steps 100] [--repeats 20] [--json benchmarks/results/maniskill_adapter.json]

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


def bare_envs(task: str, n: int, obs_mode: str, size: int) -> list[Any]:
    import gymnasium as gym

    from rlinf_algos.maniskill_env import import_maniskill

    import_maniskill()  # the same Vulkan set-up as the adapter
    kwargs: dict[str, Any] = {"obs_mode": obs_mode, "sim_backend": "cpu", "render_backend": "cpu"}
    if obs_mode == "rgb":
        kwargs["sensor_configs"] = {"shader_pack": "minimal", "width": size, "height": size}
    return [gym.make(task, num_envs=1, **kwargs) for _ in range(n)]


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def run_bare(envs: list[Any], actions: np.ndarray, seed: int) -> tuple[float, float]:
    """(wall, CPU) seconds for ``len(actions)`` steps of every env in ``envs``."""
    import torch

    for i, env in enumerate(envs):
        env.reset(seed=seed + i)
    acts = torch.as_tensor(actions)
    wall, cpu = _clocks()
    for step in range(len(acts)):
        for i, env in enumerate(envs):
            _, _, terminated, truncated, _ = env.step(acts[step, i : i + 1])
            if bool(terminated[0]) or bool(truncated[0]):
                env.reset()
    return time.perf_counter() - wall, time.process_time() - cpu


def run_adapter(envs: Any, actions: np.ndarray, seed: int) -> tuple[float, float]:
    envs.reset(seed=seed)
    wall, cpu = _clocks()
    for step in range(len(actions)):
        envs.step(actions[step])
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PushCube-v1")
    parser.add_argument("--obs-mode", default="state", choices=["state", "rgb"])
    parser.add_argument("--image-size", type=int, default=64, help="rgb: square images of this side")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=100, help="vector steps per window")
    parser.add_argument("--repeats", type=int, default=20, help="pairs of windows (bare, adapter)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu", type=int, default=0, help="the CPU to pin to (-1: no pinning)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    size_text = f" {args.image_size}x{args.image_size}" if args.obs_mode == "rgb" else ""
    report: dict[str, Any] = {
        "benchmark": "maniskill_adapter",
        "title": f"ManiSkill3 {args.task} ({args.obs_mode}{size_text}, CPU sim): bare ManiSkill loop vs rlinf's adapter",
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
        f"{args.task} ({args.obs_mode}{size_text}), {args.steps} vector steps x {args.repeats} repeats, CPU {args.cpu}"
    )
    print("env steps/s (wall) and per CPU-second of this process: median (min-max) over the repeats")
    heads = ("bare /s", "adapter /s", "bare /CPU-s", "adapter /CPU-s")
    print(f"{'num_envs':>8}  " + "  ".join(f"{h:>16}" for h in heads) + f"  {'overhead':>8}")
    for n in args.num_envs:
        actions = np.random.default_rng(args.seed).uniform(-1, 1, (args.steps, n, 8)).astype(np.float32)
        bare = bare_envs(args.task, n, args.obs_mode, args.image_size)
        size = (args.image_size, args.image_size)
        adapter = ManiSkillVectorEnv(args.task, n, obs_mode=args.obs_mode, sim_backend="cpu", image_size=size)
        assert actions.shape[2:] == adapter.single_action_space.shape
        wall: dict[str, list[float]] = {"bare": [], "adapter": []}  # steps/s
        cpu: dict[str, list[float]] = {"bare": [], "adapter": []}  # steps per CPU-second
        for r in range(args.repeats):  # alternating which goes first
            for kind in ("bare", "adapter") if r % 2 == 0 else ("adapter", "bare"):
                run = run_bare if kind == "bare" else run_adapter
                w, c = run(bare if kind == "bare" else adapter, actions, args.seed)
                wall[kind].append(n * args.steps / w)
                cpu[kind].append(n * args.steps / c)
        for env in bare:
            env.close()
        adapter.close()
        # each repeat is a pair of windows run back to back: the ratio of their CPU times is
        # what the adapter adds, whatever else the machine runs; the median over the pairs
        paired = [b / a - 1.0 for b, a in zip(cpu["bare"], cpu["adapter"], strict=True)]
        overhead = 100.0 * statistics.median(paired)

        def cell(v: list[float]) -> str:
            return f"{fmt(statistics.median(v))} ({fmt(min(v))}-{fmt(max(v))})"

        row = {
            "num_envs": n,
            "bare_steps_per_s": wall["bare"],
            "adapter_steps_per_s": wall["adapter"],
            "bare_steps_per_cpu_s": cpu["bare"],
            "adapter_steps_per_cpu_s": cpu["adapter"],
            "overhead_pct": overhead,
            "overhead_pct_per_pair": [100.0 * x for x in paired],
        }
        print(
            f"{n:>8}  {cell(wall['bare']):>16}  {cell(wall['adapter']):>16}  {cell(cpu['bare']):>16}  "
            f"{cell(cpu['adapter']):>16}  {fmt(overhead, '+.1f'):>7}%"
        )
        report["rows"].append(row)
        report["figures"].append(
            {
                "num_envs": n,
                "bare steps/s": cell(wall["bare"]),
                "adapter steps/s": cell(wall["adapter"]),
                "bare steps per CPU-s": cell(cpu["bare"]),
                "adapter steps per CPU-s": cell(cpu["adapter"]),
                "adapter overhead (CPU time, median of pairs)": (
                    f"{overhead:+.1f} % ({100 * min(paired):+.0f} to {100 * max(paired):+.0f} %)"
                ),
            }
        )
    print(
        "overhead: adapter CPU time / bare CPU time - 1 of each pair of back-to-back windows, median over pairs"
    )
    report["conditions"] = (
        f"load average {report['machine']['load_at_start'][0]:.1f} at the start, {os.getloadavg()[0]:.1f} at "
        f"the end ({os.cpu_count()} CPUs, shared); pinned to CPU {args.cpu}, 1 torch thread"
    )
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

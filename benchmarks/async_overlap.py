"""What bounded staleness buys on placed runs (issue 51 item 2): throughput at
``rollout.max_staleness`` k = 0, 1, 2, learner and rollout in their own Ray processes.

- ``grpo_arith``: ``rlinf train examples/grpo_arith.yaml`` (actor, rollout and reward workers
  on an embedded Ray), shortened: ``--sft-steps`` warm-start steps, ``--iterations`` iterations
  of ``--prompts`` prompts x 8 samples, no evaluation between iterations, and
  ``algorithm.skip_uniform_groups=false``: the update runs on every sequence, as
  ``benchmarks/grpo_lm.py --placed`` times it. Without it a policy this short a warm start
  leaves (no correct answer yet, every group's reward uniform) has nothing to train on, the
  update costs nothing and there is nothing for the generation to overlap: the figures of
  ``results/async_overlap_quiet.json`` (k = 1 at 0.6x) measured that, generation alone, plus
  the second forward the behaviour log-probs then took. Figure: samples/s = every iteration's
  sequences over the last row's ``wall_s`` (the run's clock starts when the workers are up and
  the warm start is done; the last row is written once everything in flight is trained on).
- ``halfcheetah``: ``rlinf train examples/ppo_halfcheetah.yaml`` (env, rollout and actor
  workers), shortened to ``--ppo-iterations`` iterations of 2048 env steps. Figure: env steps/s
  = the last row's step over its ``wall_s``.

Not the span between the first and the last row: an asynchronous run writes iteration ``i``'s
row only when iteration ``i + k`` starts, so that span leaves out generation it counts.

Where the time goes: each row of the table also has the mean seconds of the phases the metrics
rows hold (``generate_s``/``update_s``; ``rollout_s``/``update_s``), and, sampled every 0.5 s
from ``/proc`` (psutil) over the processes under the run, the CPU seconds each role (driver,
actor, rollout, reward, env, the Ray daemons and channels as ``ray``) spent per iteration
between the first and the last metrics row (``cpu_per_iter``) and the cores the run used then
(``cores_used``). Overlap pays only where a core is idle while the other phase runs: on a
machine whose cores are all busy with other jobs, the two phases share the same cores.

With k = 0 generation and update take turns; with k > 0 the rollout of the next iteration(s)
overlaps the update (the language-model side: :mod:`rlinf_algos.lm.run`; embodied:
:mod:`rlinf_algos.embodied.placed`). Each run is its own ``rlinf`` process, one at a time;
``--repeats`` rounds are interleaved (k = 0, 1, 2, then again) and the table gives each run
and the ratio to k = 0 of the same round. The machine's load (``uptime``'s 1-minute average)
is recorded at each run's start and end: on a shared machine only the ratios within one round
compare.

``--learning``: the held-out accuracy of grpo_arith after equal wall time (``--time-limit``
seconds of GRPO) at k = 0 and 1 over ``--seeds``, every run from the same warm-started folder
(``--model-path``; ``--warm-start-command`` records how it was made).

``--learning --runs halfcheetah``: HalfCheetah PPO at k = 0 and 1 over ``--seeds``, each run
``--cheetah-steps`` env steps with a metrics row every 8192; the figure is the training return
(the mean over the last 100 episodes, as every row has it) at equal wall time: the last row at
or before T, where T is the shortest run's last row (every run reached it), and at equal env
steps (the last row), both per seed and as mean +- sd over the seeds.

Usage::

    uv run python benchmarks/async_overlap.py [--repeats 1] [--json benchmarks/results/async_overlap.json]
    uv run python benchmarks/async_overlap.py --learning --model-path WARM/warm_start/policy \\
        [--learning-overrides "task.num_terms=[2]"] [--time-limit 120] [--seeds 0,1,2]
    uv run python benchmarks/async_overlap.py --learning --runs halfcheetah [--cheetah-steps 300000]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _report import finish, machine  # noqa: E402


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


ROLES = {
    "ray::ActorWorker": "actor",
    "ray::RolloutWorker": "rollout",
    "ray::RewardWorker": "reward",
    "ray::EnvWorker": "env",
    "ray::ReferenceWorker": "reference",
}
"""Ray worker processes by the name Ray gives them (``ray::<class>.<method>``), and their role."""


class CpuWatch(threading.Thread):
    """Every ``period`` seconds: the rows of ``run_dir/metrics.csv`` and the CPU seconds (user +
    system) of every process under ``pid`` by role (a process takes the role of its nearest
    ancestor that has one; the rlinf process is the ``driver``, the Ray daemons and channel
    actors ``ray``). Keeps the samples at the first and the last row it saw."""

    def __init__(self, pid: int, run_dir: Path, period: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.run_dir, self.period = pid, run_dir, period
        self.stop = threading.Event()
        self.cpu: dict[int, tuple[str, float]] = {}  # pid -> (role, CPU seconds), last seen
        self.first: tuple[int, float, dict[int, float]] | None = None
        self.last: tuple[int, float, dict[int, float]] | None = None

    def _rows(self) -> int:
        try:
            with (self.run_dir / "metrics.csv").open() as f:
                return max(0, sum(1 for _ in f) - 1)
        except OSError:
            return 0

    def _sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        role_of: dict[int, str] = {self.pid: "driver"}
        for p in procs:
            try:
                name = " ".join(p.cmdline()[:1])
                t = p.cpu_times()
                ppid = p.ppid()
            except psutil.Error:
                continue
            role = next((r for prefix, r in ROLES.items() if name.startswith(prefix)), None)
            role = role or role_of.get(p.pid) or ("ray" if p.pid != self.pid else "driver")
            if p.pid != self.pid and role == "ray" and role_of.get(ppid) not in (None, "driver", "ray"):
                role = role_of[ppid]  # a child of a worker (a simulator's process) is its worker's
            role_of[p.pid] = role
            self.cpu[p.pid] = (role, float(t.user + t.system))

    def run(self) -> None:
        while not self.stop.wait(self.period):
            self._sample()
            rows = self._rows()
            snap = (rows, time.perf_counter(), {pid: c for pid, (_, c) in self.cpu.items()})
            if rows >= 1 and self.first is None:
                self.first = snap
            if rows >= 1:
                self.last = snap

    def figures(self) -> dict[str, Any]:
        """``cpu_per_iter`` (CPU seconds per iteration by role) and ``cores_used`` between the
        first and the last row sampled; empty when fewer than two rows were seen."""
        if self.first is None or self.last is None or self.last[0] <= self.first[0]:
            return {}
        (r0, t0, c0), (r1, t1, c1) = self.first, self.last
        by_role: dict[str, float] = {}
        for pid, c in c1.items():
            role = self.cpu[pid][0]
            by_role[role] = by_role.get(role, 0.0) + c - c0.get(pid, 0.0)
        n = r1 - r0
        return {
            "cpu_per_iter": {r: round(v / n, 3) for r, v in sorted(by_role.items())},
            "cores_used": round(sum(by_role.values()) / max(t1 - t0, 1e-9), 2),
            "cpu_window_rows": n,
        }


def _train(
    example: str, overrides: list[str], run_dir: Path, timeout: float
) -> tuple[float, list[str], dict]:
    exe = Path(sys.executable).parent / "rlinf"
    cmd = [
        str(exe),
        "train",
        str(ROOT / "examples" / example),
        "--run-dir",
        str(run_dir),
        "--quiet",
        *overrides,
    ]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    t0 = time.perf_counter()
    # its own session: with the kernel's autogroup scheduling (sched_autogroup_enabled) each
    # session gets its share of the CPU, so a run started beside another from one shell would
    # otherwise split one share with it
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=run_dir.parent,
        start_new_session=True,
    )  # fmt: skip
    watch = CpuWatch(proc.pid, run_dir)
    watch.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise SystemExit(f"{shlex.join(cmd)} took more than {timeout:g} s (--timeout)") from None
    finally:
        watch.stop.set()
        watch.join(5.0)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}\n{err[-3000:]}")
    return time.perf_counter() - t0, ["rlinf", "train", f"examples/{example}", *overrides], watch.figures()


def grpo(k: int, args: argparse.Namespace, tmp: Path, tag: str) -> dict[str, Any]:
    run = tmp / f"grpo_k{k}_{tag}"
    overrides = [
        f"sft.steps={args.sft_steps}", f"algorithm.iterations={args.iterations}",
        f"algorithm.prompts_per_iter={args.prompts}", "runner.eval_interval=0", "runner.log_interval=1",
        "task.eval_size=16", "runner.time_limit_s=null", "runner.scheduler=ray", f"rollout.max_staleness={k}",
        f"runner.seed={args.seed}", "algorithm.skip_uniform_groups=false",
    ]  # fmt: skip
    load = os.getloadavg()[0]
    took, cmd, cpu = _train("grpo_arith.yaml", overrides, run, args.timeout)
    rows = _rows(run)
    seqs = sum(int(r["sequences"]) for r in rows)
    span = float(rows[-1]["wall_s"])
    summary = json.loads((run / "summary.json").read_text())
    return {
        "run": "grpo_arith", "k": k, "samples_per_s": round(seqs / span, 2), "timed_s": round(span, 1),
        "iterations": len(rows), "staleness_mean": _mean(rows, "staleness_mean"),
        "stale_dropped": summary.get("stale_dropped", 0), "load_1min": round(load, 1),
        "load_1min_end": round(os.getloadavg()[0], 1), "run_s": round(took, 1),
        "phase_s": {c: _mean(rows, f"{c}_s") for c in ("generate", "reward", "update", "sync")},
        **cpu, "command": shlex.join(cmd),
    }  # fmt: skip


def halfcheetah(k: int, args: argparse.Namespace, tmp: Path, tag: str) -> dict[str, Any]:
    run = tmp / f"cheetah_k{k}_{tag}"
    overrides = [
        f"runner.total_steps={2048 * args.ppo_iterations}", "runner.log_interval=2048",
        "runner.checkpoint_interval=0", f"rollout.max_staleness={k}", f"runner.seed={args.seed}",
    ]  # fmt: skip
    load = os.getloadavg()[0]
    took, cmd, cpu = _train("ppo_halfcheetah.yaml", overrides, run, args.timeout)
    rows = _rows(run)
    steps = float(rows[-1]["step"])
    span = float(rows[-1]["wall_s"])
    return {
        "run": "halfcheetah_ppo", "k": k, "env_steps_per_s": round(steps / span, 1), "timed_s": round(span, 1),
        "iterations": len(rows), "load_1min": round(load, 1), "load_1min_end": round(os.getloadavg()[0], 1),
        "run_s": round(took, 1), "phase_s": {c: _mean(rows, f"{c}_s") for c in ("rollout", "update", "wait")},
        **cpu, "command": shlex.join(cmd),
    }  # fmt: skip


def learning(k: int, seed: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """``--learning``: grpo_arith from the warm-started folder ``--model-path`` for
    ``--time-limit`` seconds of GRPO (``runner.time_limit_s``: no iteration starts after it;
    an asynchronous run then trains on what is in flight), then the held-out accuracy."""
    run = tmp / f"learn_k{k}_s{seed}"
    overrides = [
        "model.path=WARM_START/policy", "model.init=null", "sft.steps=0", f"runner.time_limit_s={args.time_limit}",
        "algorithm.iterations=100000", "runner.eval_interval=0", "runner.log_interval=5", "runner.scheduler=ray",
        f"runner.seed={seed}", f"rollout.max_staleness={k}", *args.learning_overrides,
    ]  # fmt: skip
    real = [f"model.path={args.model_path}" if o.startswith("model.path=") else o for o in overrides]
    load = os.getloadavg()[0]
    took, _, cpu = _train("grpo_arith.yaml", real, run, args.timeout)
    summary = json.loads((run / "summary.json").read_text())
    rows = _rows(run)
    return {
        "run": "grpo_arith_learning", "k": k, "seed": seed,
        "accuracy_before": summary["accuracy_before"], "accuracy_after": summary["accuracy_after"],
        "eval_size": summary["eval_size"], "iterations": summary["iterations"], "grpo_s": summary["grpo_s"],
        "samples": sum(int(r["sequences"]) for r in rows), "stale_dropped": summary.get("stale_dropped", 0),
        "load_1min": round(load, 1), "load_1min_end": round(os.getloadavg()[0], 1), "run_s": round(took, 1),
        **cpu, "command": shlex.join(["rlinf", "train", "examples/grpo_arith.yaml", *overrides]),
    }  # fmt: skip


def _seeds_by_k(
    run: Any, seeds: list[int], args: argparse.Namespace, report: dict[str, Any], line: Any
) -> list[dict[str, Any]]:
    """``run(k, seed, args, tmp)`` for each seed at k = 0 then 1 (interleaved: both k of a seed
    under about the same load); after each, what is measured so far to ``--json`` (should a later
    run not finish) and ``line(row)`` printed."""
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rlinf-async-") as tmp:
        for seed in seeds:
            for k in (0, 1):
                row = run(k, seed, args, Path(tmp))
                figures.append(row)
                if args.json:
                    partial = {**report, "figures": figures, "partial": True}
                    args.json.write_text(json.dumps(partial, indent=2, default=str) + "\n")
                print(
                    f"seed {seed} k={k}  {line(row)}  (load {row['load_1min']}-{row['load_1min_end']})",
                    flush=True,
                )
    return figures


def cheetah_learning(k: int, seed: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """``--learning --runs halfcheetah``: one PPO run of ``--cheetah-steps`` env steps; its
    learning curve (env step, wall seconds, training return) from the metrics rows."""
    run = tmp / f"cheetah_learn_k{k}_s{seed}"
    overrides = [
        f"runner.total_steps={args.cheetah_steps}", "runner.log_interval=8192", "runner.checkpoint_interval=0",
        f"rollout.max_staleness={k}", f"runner.seed={seed}",
    ]  # fmt: skip
    load = os.getloadavg()[0]
    took, cmd, cpu = _train("ppo_halfcheetah.yaml", overrides, run, args.timeout)
    rows = _rows(run)
    curve = [
        (int(float(r["step"])), round(float(r["wall_s"]), 2), round(float(r["episode_return_mean"]), 1))
        for r in rows
        if r.get("episode_return_mean") not in (None, "", "nan")
    ]
    return {
        "run": "halfcheetah_ppo_learning", "k": k, "seed": seed, "curve": curve,
        "env_steps_per_s": round(curve[-1][0] / curve[-1][1], 1) if curve else None,
        "load_1min": round(load, 1), "load_1min_end": round(os.getloadavg()[0], 1), "run_s": round(took, 1),
        **cpu, "command": shlex.join(cmd),
    }  # fmt: skip


def _at_wall(curve: list[tuple[int, float, float]], t: float) -> tuple[int, float]:
    """(env step, training return) of the last row at or before wall second ``t``."""
    before = [c for c in curve if c[1] <= t + 1e-9]
    step, _, ret = before[-1] if before else curve[0]
    return step, ret


def main_cheetah_learning(args: argparse.Namespace, report: dict[str, Any], t0: float) -> None:
    import statistics

    seeds = [int(x) for x in args.seeds.split(",")]
    report["title"] = (
        "Bounded staleness: HalfCheetah PPO training return at equal wall time, rollout.max_staleness 0 and 1"
    )
    report["seeds"] = seeds
    report["command"] = shlex.join(["python", *sys.argv])

    def line(row: dict[str, Any]) -> str:
        step, wall, ret = row["curve"][-1]
        return f"{step} steps in {wall:.0f} s ({row['env_steps_per_s']} steps/s), return {ret:.1f}"

    figures = _seeds_by_k(cheetah_learning, seeds, args, report, line)
    t_equal = min(r["curve"][-1][1] for r in figures)
    summary: dict[str, Any] = {"equal_wall_s": round(t_equal, 1)}
    for r in figures:
        r["at_equal_wall"] = dict(zip(("step", "return"), _at_wall(r["curve"], t_equal), strict=True))
    for k in (0, 1):
        rs = [r for r in figures if r["k"] == k]
        at_t = [r["at_equal_wall"]["return"] for r in rs]
        final = [r["curve"][-1][2] for r in rs]
        summary[f"k{k}"] = {
            "return_at_equal_wall_mean": round(statistics.mean(at_t), 1),
            "return_at_equal_wall_sd": round(statistics.stdev(at_t), 1) if len(at_t) > 1 else None,
            "steps_at_equal_wall_mean": round(statistics.mean(r["at_equal_wall"]["step"] for r in rs)),
            "return_at_equal_steps_mean": round(statistics.mean(final), 1),
            "return_at_equal_steps_sd": round(statistics.stdev(final), 1) if len(final) > 1 else None,
            "env_steps_per_s_mean": round(statistics.mean(r["env_steps_per_s"] for r in rs), 1),
        }
        s = summary[f"k{k}"]
        print(
            f"k={k}: at {t_equal:.0f} s {s['return_at_equal_wall_mean']} +- {s['return_at_equal_wall_sd']} "
            f"({s['steps_at_equal_wall_mean']} steps); at {args.cheetah_steps} steps "
            f"{s['return_at_equal_steps_mean']} +- {s['return_at_equal_steps_sd']}; "
            f"{s['env_steps_per_s_mean']} steps/s"
        )
    report["figures"] = figures
    report["summary"] = summary
    report["conditions"] = (
        f"2-core machine; 1-minute load at each run's start in load_1min "
        f"(start {report['machine']['load_at_start'][0]:.1f})"
    )
    report["notes"] = [
        "return: the training return of the metrics row (mean over the last 100 finished episodes of the "
        "stochastic policy), one row every 8192 env steps",
        "equal wall time: the shortest run's last row; each run's figure is its last row at or before it",
        "wall_s counts from when the workers are up (Ray's start is not in it)",
    ]
    finish(report, t0, args.json)


def main_learning(args: argparse.Namespace, report: dict[str, Any], t0: float) -> None:
    import statistics

    if args.model_path is None:
        raise SystemExit("--learning needs --model-path (a warm-started policy folder)")
    seeds = [int(x) for x in args.seeds.split(",")]
    report["title"] = (
        "Bounded staleness: grpo_arith held-out accuracy at equal wall time, rollout.max_staleness 0 and 1"
    )
    report["seeds"] = seeds
    report["warm_start"] = args.warm_start_command
    # the command as run, the warm start's folder named as the figures name it (no machine path)
    report["command"] = shlex.join(
        ["python", *(("WARM_START/policy" if a == str(args.model_path) else a) for a in sys.argv)]
    )

    def line(row: dict[str, Any]) -> str:
        return (
            f"held-out {row['accuracy_before']:.3f} -> {row['accuracy_after']:.3f}  {row['iterations']} "
            f"iterations, {row['samples']} samples in {row['grpo_s']:.0f} s"
        )

    figures = _seeds_by_k(learning, seeds, args, report, line)
    summary = {}
    for k in (0, 1):
        acc = [r["accuracy_after"] for r in figures if r["k"] == k]
        its = [r["iterations"] for r in figures if r["k"] == k]
        summary[f"k{k}"] = {
            "accuracy_after_mean": round(statistics.mean(acc), 4),
            "accuracy_after_sd": round(statistics.stdev(acc), 4) if len(acc) > 1 else None,
            "iterations_mean": round(statistics.mean(its), 1),
        }
        print(f"k={k}: held-out after {summary[f'k{k}']['accuracy_after_mean']:.3f} "
              f"+- {summary[f'k{k}']['accuracy_after_sd']}, {summary[f'k{k}']['iterations_mean']} iterations")  # fmt: skip
    report["figures"] = figures
    report["summary"] = summary
    report["conditions"] = (
        f"2-core machine shared with other jobs; 1-minute load at each run's start in load_1min "
        f"(start {report['machine']['load_at_start'][0]:.1f})"
    )
    report["notes"] = [
        f"each run: {args.time_limit:g} s of GRPO (runner.time_limit_s) from the same warm-started policy "
        "(WARM_START: the run directory of the warm_start command), then the held-out exact match (greedy)",
        "k = 1 trains on what is in flight when the time is up, so its GRPO time can pass the limit by about "
        "one update: grpo_s says how long each ran",
    ]
    finish(report, t0, args.json)


def _autogroup() -> str:
    try:
        on = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return "unknown"
    return "on" if on else "off"


def _mean(rows: list[dict[str, str]], col: str) -> float | None:
    vals = [float(r[col]) for r in rows if r.get(col) not in (None, "")]
    return round(sum(vals) / len(vals), 3) if vals else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds of k = 0, 1, 2")
    p.add_argument("--iterations", type=int, default=30, help="grpo_arith iterations per run")
    p.add_argument("--prompts", type=int, default=32, help="grpo_arith prompts per iteration (x 8 samples)")
    p.add_argument("--sft-steps", type=int, default=20, help="grpo_arith warm-start steps")
    p.add_argument(
        "--ppo-iterations", type=int, default=30, help="HalfCheetah PPO iterations of 2048 env steps"
    )
    p.add_argument("--runs", default="grpo,halfcheetah", help="which runs: grpo, halfcheetah or both")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ks", default="0,1,2", help="the max_staleness values, k = 0 first (the ratios' base)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds one rlinf run may take")
    p.add_argument("--json", type=Path, default=None, help="write the record here")
    p.add_argument("--learning", action="store_true", help="instead: held-out accuracy at equal wall time")
    p.add_argument("--model-path", type=Path, default=None, help="--learning: the warm-started policy folder")
    p.add_argument(
        "--warm-start-command", default=None, help="--learning: how that folder was made (recorded)"
    )
    p.add_argument("--time-limit", type=float, default=120.0, help="--learning: seconds of GRPO per run")
    p.add_argument("--seeds", default="0,1,2", help="--learning: the seeds")
    p.add_argument(
        "--cheetah-steps", type=int, default=300_000, help="--learning --runs halfcheetah: env steps per run"
    )
    p.add_argument(
        "--learning-overrides",
        nargs="*",
        default=[],
        help="--learning: further overrides (the warm start's task)",
    )
    args = p.parse_args()
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "title": "Bounded staleness: throughput at rollout.max_staleness k = 0, 1, 2 (placed runs)",
        "machine": machine(("torch", "ray", "gymnasium")),
        "seeds": [args.seed],
        "source": "benchmarks/async_overlap.py",
    }
    if args.learning and args.runs == "halfcheetah":
        main_cheetah_learning(args, report, t0)
        return
    if args.learning:
        main_learning(args, report, t0)
        return
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    ks = [int(k) for k in args.ks.split(",")]
    if ks[0] != 0:
        p.error("--ks: start with 0, the base of the ratios")
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rlinf-async-") as tmp:
        for rep in range(args.repeats):
            for name, fn, col in (
                ("grpo", grpo, "samples_per_s"),
                ("halfcheetah", halfcheetah, "env_steps_per_s"),
            ):
                if name not in runs:
                    continue
                base = None
                for k in ks:
                    row = fn(k, args, Path(tmp), f"r{rep}")
                    row["round"] = rep + 1
                    base = row[col] if k == 0 else base
                    row["ratio_to_k0"] = round(row[col] / base, 3) if base else None
                    figures.append(row)
                    if args.json:  # what is measured so far, should a later run not finish
                        partial = {**report, "figures": figures, "partial": True}
                        args.json.write_text(json.dumps(partial, indent=2, default=str) + "\n")
                    phases = "  ".join(f"{p} {v:.2f}s" for p, v in row["phase_s"].items() if v is not None)
                    cpu = "  ".join(f"{r} {v:.2f}" for r, v in row.get("cpu_per_iter", {}).items())
                    print(
                        f"round {rep + 1}  {row['run']:16s} k={k}  {col} {row[col]:9.2f}  "
                        f"x{row['ratio_to_k0']:.3f} of k=0  (timed {row['timed_s']} s, load "
                        f"{row['load_1min']}-{row['load_1min_end']})\n    per iteration: {phases}; CPU s: {cpu}; "
                        f"cores used {row.get('cores_used', '-')}",
                        flush=True,
                    )
    report["figures"] = figures
    report["conditions"] = (
        f"2-core machine shared with other jobs; 1-minute load at each run's start in load_1min "
        f"(start {report['machine']['load_at_start'][0]:.1f})"
    )
    report["notes"] = [
        "ratio_to_k0 compares runs of the same round; the load moves between runs, so a ratio within a "
        "few percent of 1 is noise",
        "grpo_arith: learner, rollout and reward in their own Ray worker processes on one node; "
        "halfcheetah: env, rollout and actor workers",
        "grpo_arith runs with algorithm.skip_uniform_groups=false (the update on every sequence, as a "
        "learning run's batch with rewards to learn from costs) after a short warm start",
        "phase_s: mean seconds per iteration from the metrics rows; cpu_per_iter: CPU seconds per "
        "iteration of each role's processes between the first and the last metrics row (sampled every "
        "0.5 s); cores_used: their sum over that window's wall time",
        f"autogroup scheduling: {_autogroup()}; with it the kernel shares the CPU between sessions "
        "first, so a run whose session competes with G busy sessions gets about 2/G cores whatever k is: "
        "overlap then only fills the run's own idle gaps",
    ]
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

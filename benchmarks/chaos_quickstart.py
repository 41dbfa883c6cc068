"""Chaos: a quickstart-sized PPO run while env, rollout and learner processes are killed.

Two runs of ``examples/quickstart.yaml`` (PPO on InvertedPendulum-v5: one env worker with 2
pipeline stages, one rollout worker, one actor), one after the other on one embedded Ray, the
same seed and settings:

- ``undisturbed``: nothing is killed;
- ``chaos``: a thread kills a worker process with SIGKILL at random times (``--kills`` kills,
  at least 10, seeded by ``--seed``): the victim is the env worker, the rollout worker or the
  learner (the actor worker) with equal odds, its PID as the worker reports it
  (``pids`` of the run the callbacks get, renewed after every restart). Each kill waits until an iteration
  has started since the previous one (the run recovered and runs again), then a delay drawn
  uniformly from 0 to 2 undisturbed iterations, so kills land anywhere in an iteration:
  collecting, updating, writing a checkpoint. Kills start once the first iteration ran and stop
  when the budget is collected.

Reported: the restarts, the batches dropped, the env steps lost per kill (a dead env or rollout
worker costs its iteration's partial batch; a dead learner goes back to the newest checkpoint),
the extra wall time over the undisturbed run, the final returns, and a check over every update
the learner made that it took one generation's data of one weight version, never newer than the
learner itself (``batch_log`` of the run: a batch of the lineage a restart threw away, or
one mixing two generations or versions, would fail it).

The learner restarts from the newest checkpoint, so ``runner.checkpoint_interval`` bounds the
steps a learner kill loses; quickstart's 50,000 would let one kill cost half the run, so both
runs use ``--checkpoint-interval`` (default 10,240: five iterations). ``runner.max_restarts`` is
raised to cover the kills.

Usage::

    uv run python benchmarks/chaos_quickstart.py [--quick] [--seed S] [--kills N] [--json PATH]

``--quick``: 40,960 env steps, checkpoints every 8,192. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

from _report import finish, fmt, machine

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "quickstart.yaml"
DISTS = ("rlinf-algos", "rlinf-scheduler", "ray", "torch", "gymnasium", "mujoco")
VICTIMS = ("env", "rollout", "actor")


def _is_ray_worker(pid: int) -> bool:
    """``pid`` is (still) a Ray worker process: never signal a recycled PID."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().startswith(b"ray::")
    except OSError:
        return False


class Killer:
    """Kills a random worker process of the run at random times (seeded)."""

    def __init__(self, seed: int, kills: int, iteration_s: float) -> None:
        self.rng = random.Random(seed)
        self.kills, self.iteration_s = kills, iteration_s
        self.run: Any = None
        self.turns = 0  # iterations started
        self.turned = threading.Condition()
        self.total = 0
        self.started = threading.Event()
        self.done = threading.Event()
        self.log: list[dict[str, Any]] = []
        self.skipped = 0
        self.t0 = time.perf_counter()

    def on_iteration(self, run: Any, k: int) -> None:
        self.run = run
        with self.turned:
            self.turns += 1
            self.turned.notify_all()
        if k >= 1 and not self.started.is_set():
            self.t0 = time.perf_counter()
            self.started.set()

    def loop(self) -> None:
        self.started.wait()
        run = self.run
        while len(self.log) < self.kills and not self.done.is_set():
            delay = self.rng.uniform(0.0, 2.0) * self.iteration_s
            victim = self.rng.choice(VICTIMS)
            seen = self.turns
            with self.turned:  # the run recovered from the last kill: an iteration started since
                while self.turns == seen and not self.done.is_set():
                    self.turned.wait(1.0)
            if self.done.wait(delay):
                return
            if run.steps >= self.total:
                return
            pid = (run.pids.get(victim) or [0])[0]
            if not pid or not _is_ray_worker(pid):
                self.skipped += 1
                continue
            self.log.append(
                {
                    "t_s": round(time.perf_counter() - self.t0, 1),
                    "victim": "learner" if victim == "actor" else victim,
                    "pid": pid,
                    "env_steps": run.steps,
                    "iteration": run.iteration,
                    "dropped_env_steps_before": run.dropped_env_steps,
                    "learner_restarts_before": len(run.learner_restarts),
                }
            )
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                self.log.pop()
                self.skipped += 1


def train(args: argparse.Namespace, run_dir: Path, killer: Killer | None) -> dict[str, Any]:
    from rlinf_algos.training import run_training
    from rlinf_core.config import load_yaml

    overrides = [
        f"runner.total_steps={args.total_steps}",
        f"runner.checkpoint_interval={args.checkpoint_interval}",
        f"runner.max_restarts={max(10, 3 * args.kills)}",
        f"runner.seed={args.seed}",
        "runner.loggers=[csv]",
    ]
    seen: dict[str, Any] = {}

    def on_iteration(run: Any, k: int) -> None:
        seen["run"] = run
        if killer is not None:
            killer.on_iteration(run, k)

    thread = None
    if killer is not None:
        killer.total = args.total_steps
        thread = threading.Thread(target=killer.loop, daemon=True)
        thread.start()
    t0 = time.perf_counter()
    try:
        summary = run_training(
            load_yaml(CONFIG),
            run_dir=run_dir,
            overrides=overrides,
            callbacks={"on_iteration": on_iteration},
            config_path=CONFIG,
        )
    finally:
        if killer is not None:
            killer.done.set()
            killer.started.set()
            thread.join(timeout=30)
    summary["driver_wall_s"] = time.perf_counter() - t0
    summary["batch_log"] = list(seen["run"].batch_log)
    summary["overrides"] = overrides
    return summary


def check_batches(batches: list[dict[str, Any]], staleness: int = 1) -> dict[str, int]:
    """Count the updates that mixed generations or weight versions, or took data newer than the
    learner or staler than ``staleness`` versions."""
    out = {"updates_checked": len(batches), "mixed_generations": 0, "mixed_versions": 0}
    out |= {"newer_than_learner": 0, "staler_than_allowed": 0}
    for b in batches:
        out["mixed_generations"] += len(b["gens"]) != 1
        out["mixed_versions"] += len(b["versions"]) != 1
        if b["versions"]:
            out["newer_than_learner"] += max(b["versions"]) > b["learner_version"]
            out["staler_than_allowed"] += min(b["versions"]) < b["learner_version"] - staleness
    return out


def per_kill(killer: Killer, chaos: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per kill: what it cost. Env steps lost: the partial batches dropped until the next
    kill, plus, for a learner kill, the steps between its checkpoint and its death."""
    rows = []
    learner = chaos["learner_restarts"]
    ends = [k["dropped_env_steps_before"] for k in killer.log[1:]] + [chaos["dropped_env_steps"]]
    for kill, end in zip(killer.log, ends, strict=True):
        dropped = end - kill["dropped_env_steps_before"]
        row = {
            "t (s)": kill["t_s"],
            "victim": kill["victim"],
            "at env step": kill["env_steps"],
            "partial batch dropped (env steps)": dropped,
            "learner steps lost": None,
            "restored from": None,
        }
        if kill["victim"] == "learner" and kill["learner_restarts_before"] < len(learner):
            event = learner[kill["learner_restarts_before"]]
            row["learner steps lost"] = event["steps_lost"]
            row["restored from"] = Path(event["checkpoint"]).name if event["checkpoint"] else "start"
        row["env steps lost"] = dropped + (row["learner steps lost"] or 0)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40,960 env steps (a few minutes)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the kills and the runs")
    parser.add_argument("--kills", type=int, default=12, help="kills in the chaos run (>= 10)")
    parser.add_argument("--total-steps", type=int, default=None, help="default 100,000 (quickstart's)")
    parser.add_argument("--checkpoint-interval", type=int, default=None, help="default 10,240")
    parser.add_argument("--json", type=Path, default=None, help="write the report here")
    args = parser.parse_args(argv)
    args.total_steps = args.total_steps or (40_960 if args.quick else 100_000)
    args.checkpoint_interval = args.checkpoint_interval or (8_192 if args.quick else 10_240)
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "title": "Chaos: quickstart PPO with env, rollout and learner processes killed at random times",
        "machine": machine(DISTS),
        "seeds": [args.seed],
        "source": "benchmarks/chaos_quickstart.py",
    }
    from rlinf_scheduler.runtime.cluster import Cluster

    cluster = Cluster(1, ray_init={"num_cpus": 2})  # both runs attach to it (start not counted)
    try:
        with tempfile.TemporaryDirectory(prefix="rlinf-chaos-") as tmp:
            print(f"undisturbed run: {args.total_steps} env steps ...", flush=True)
            calm = train(args, Path(tmp) / "undisturbed", None)
            iteration_s = calm["wall_s"] / max(1, calm["iterations"])
            killer = Killer(args.seed, args.kills, iteration_s)
            print(f"chaos run: {args.kills} kills (an iteration takes {iteration_s:.2f} s) ...", flush=True)
            chaos = train(args, Path(tmp) / "chaos", killer)
    finally:
        cluster.shutdown()

    kills = per_kill(killer, chaos)
    check = check_batches(chaos["batch_log"])
    victims = {v: sum(k["victim"] == v for k in kills) for v in ("env", "rollout", "learner")}
    lost = [k["env steps lost"] for k in kills]
    learner_lost = [k["learner steps lost"] for k in kills if k["learner steps lost"] is not None]
    summary = {
        "env steps": args.total_steps,
        "checkpoint interval": args.checkpoint_interval,
        "kills": len(kills),
        "kills of env / rollout / learner": f"{victims['env']} / {victims['rollout']} / {victims['learner']}",
        "kills skipped (no live worker to kill)": killer.skipped,
        "restarts": chaos["restarts"],
        "learner restarts": len(chaos["learner_restarts"]),
        "dropped batches": chaos["dropped_batches"],
        "dropped env steps (partial batches)": chaos["dropped_env_steps"],
        "env steps lost per kill, mean": round(sum(lost) / len(lost)) if lost else None,
        "env steps lost per kill, max": max(lost) if lost else None,
        "learner steps lost, max (bound: checkpoint interval)": max(learner_lost) if learner_lost else None,
        "wall s, undisturbed": round(calm["wall_s"], 1),
        "wall s, chaos": round(chaos["wall_s"], 1),
        "extra wall s": round(chaos["wall_s"] - calm["wall_s"], 1),
        "extra wall, % of undisturbed": round(100 * (chaos["wall_s"] / calm["wall_s"] - 1), 1),
        "final return, undisturbed": calm["final_return_mean"],
        "final return, chaos": chaos["final_return_mean"],
        "completed": chaos["total_env_steps"] >= args.total_steps and "error" not in chaos,
        **{f"batch check: {k.replace('_', ' ')}": v for k, v in check.items()},
    }
    report["figures"] = {"summary": summary, "kills": kills}
    report["command"] = " ".join(
        ["uv run python benchmarks/chaos_quickstart.py", *(argv if argv is not None else sys.argv[1:])]
    )
    report["notes"] = [
        "Both runs: examples/quickstart.yaml with " + ", ".join(chaos["overrides"]) + "; one embedded "
        "Ray for both (its start is not counted). Wall times are summary.json's wall_s (from the "
        "first iteration to the end, worker restarts included).",
        "Env steps lost per kill: the partial batches dropped until the next kill, plus for a learner "
        "kill the steps between the checkpoint it restarted from and its death.",
        "Batch check: over every update of the chaos run, the generations and weight versions of the "
        "items the learner took (one rollout rank, so one trajectory per update): any mixed, newer "
        "than the learner, or staler than rollout.max_staleness would be counted.",
    ]

    print(f"\nchaos benchmark: {args.total_steps} env steps of quickstart PPO, seed {args.seed}\n")
    for k, v in summary.items():
        print(f"  {k:<58} {v if not isinstance(v, float) else fmt(v, '.1f')}")
    print(f"\n  {'t (s)':>7} {'victim':<8} {'at step':>8} {'dropped':>8} {'learner lost':>13}  restored from")
    for k in kills:
        print(
            f"  {k['t (s)']:>7} {k['victim']:<8} {k['at env step']:>8} "
            f"{k['partial batch dropped (env steps)']:>8} {fmt(k['learner steps lost'], 'd'):>13}  "
            f"{k['restored from'] or '-'}"
        )
    start, end = report["machine"]["load_at_start"][0], os.getloadavg()[0]
    report["conditions"] = f"load average {start:.1f} at the start, {end:.1f} at the end"
    return finish(report, t0, args.json)


if __name__ == "__main__":
    main()

"""rlinf beside Stable-Baselines3 at equal wall time, one seed at a time (``maniskill_vs_sb3.py``,
``metaworld_vs_sb3.py``): the example's settings read from its YAML, both sides as pinned child
processes, rlinf stopped with SIGTERM once its training clock reaches the wall budget, rlinf's
policy evaluated by ``rlinf eval --suite``, and the rows those benchmarks print and keep.

:func:`run_pair` runs one seed: with ``parallel`` both sides at the same time, rlinf pinned to
CPU 0 and SB3 to CPU 1 (SB3 then capped at the wall budget, since the rlinf run's own time is
not known yet); without it, rlinf first and SB3 after it, capped at the rlinf run's training
time, each pinned to CPU 0. Imports neither Stable-Baselines3 nor torch (the SB3 side is a
child process; ``_sb3`` builds its PPO from :func:`settings`)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _report import fmt, machine

__all__ = [
    "Pair",
    "cap_rlinf",
    "curve_summary",
    "figure_rows",
    "metrics_rows",
    "new_report",
    "open_envs",
    "portable",
    "print_row",
    "rlinf_result",
    "run_pair",
    "run_seeds",
    "schedule",
    "settings",
    "side_arguments",
    "side_cpus",
    "start",
    "wait_for",
]

EVAL_EPISODES = 50
EVAL_SEED = 10_000
DISTS = ("rlinf-algos", "stable-baselines3", "torch", "gymnasium")  # the versions a report records
HOURS = 3600.0  # slack past the wall budget before a side counts as hung


def side_cpus(args: argparse.Namespace) -> tuple[int, int]:
    """rlinf's and SB3's CPUs: ``--cpus R,S``, else ``(0, 1)`` with ``--parallel``, else ``(0, 0)``."""
    if args.cpus:
        r, b = (int(c) for c in args.cpus.split(","))
        return r, b
    return (0, 1) if args.parallel else (0, 0)


def schedule(args: argparse.Namespace) -> str:
    """How the sides of a seed ran, in words (the report's machine and conditions say it)."""
    r, b = side_cpus(args)
    if args.rlinf_only:
        return f"rlinf only, on CPU {r} (SB3's side of these seeds is run by another invocation)"
    if args.sb3_only:
        return f"SB3 only, on CPU {b}, capped at the wall budget (rlinf's side is run by another invocation)"
    if args.parallel:
        return f"rlinf (CPU {r}) and SB3 (CPU {b}) of a seed at the same time; SB3 capped at the wall budget"
    return f"rlinf on CPU {r}, then SB3 on CPU {b} capped at the rlinf run's training time"


def settings(config: Path) -> dict[str, Any]:
    """The example's settings, with rlinf's defaults where it says nothing: ``ppo`` (the
    algorithm section), ``model``, ``env`` and ``runner`` (raw YAML)."""
    import yaml

    from rlinf_algos.models.config import ModelConfig
    from rlinf_algos.ppo.config import PPOConfig

    raw = yaml.safe_load(config.read_text())
    return {
        "ppo": PPOConfig(**raw["algorithm"]).model_dump(),
        "model": ModelConfig(**raw.get("model", {})).model_dump(),
        "env": raw["env"],
        "runner": raw["runner"],
    }


def open_envs(config: Path, num_envs: int, seed: int, task: str | None = None) -> Any:
    """The vector env rlinf builds for ``config`` (its family and options; ``task`` in place of
    its ``env.id`` when given)."""
    from rlinf_algos.envs import open_vector_env

    env = settings(config)["env"]
    envs, _ = open_vector_env(
        task or env["id"],
        num_envs,
        seed,
        family=env["family"],
        options=env.get("options") or {},
        max_episode_steps=env.get("max_episode_steps"),
    )
    return envs


# -- processes ------------------------------------------------------------------------------------


def _pinned(cpu: int | None) -> Any:
    if cpu is None or cpu >= (os.cpu_count() or 1):
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def start(cmd: list[str], cpu: int | None, log: Path) -> subprocess.Popen[bytes]:
    """``cmd`` in the background, one intra-op thread, pinned to ``cpu``, output appended to ``log``."""
    with log.open("ab") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), preexec_fn=_pinned(cpu))


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def cap_rlinf(proc: subprocess.Popen[bytes], run_dir: Path, wall: float, timeout: float) -> bool:
    """Wait for the rlinf run; SIGTERM it once its training clock reaches ``wall`` seconds (from
    the first metrics row on: that row's ``wall_s`` places the clock's start). rlinf finishes the
    iteration in flight and writes its policy and summary
    (:class:`rlinf_algos.runtime.stop.DeferredStop`). Returns whether it was stopped so."""
    t_launch, clock0, stopped = time.perf_counter(), None, False
    while proc.poll() is None:
        if time.perf_counter() - t_launch > timeout:
            proc.kill()
            raise RuntimeError(f"rlinf train ({run_dir}) took more than {timeout:.0f} s; killed")
        if clock0 is None:
            rows = metrics_rows(run_dir)
            if rows:
                clock0 = time.perf_counter() - float(rows[-1]["wall_s"])
        if not stopped and clock0 is not None and time.perf_counter() - clock0 >= wall:
            proc.send_signal(signal.SIGTERM)
            stopped = True
        time.sleep(0.5)
    return stopped


def wait_for(proc: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError(f"{what} took more than {timeout:.0f} s; killed") from None
    if rc != 0:
        raise RuntimeError(f"{what} exited with {rc} (see its log)")


def rlinf_eval(run_dir: Path, suite: str, cpu: int | None, log: Path) -> Path:
    """``rlinf eval RUN --suite SUITE --episodes-per-task 50`` (deterministic, reset seeds
    10000..10049, the family's fixed initial states where it has them), pinned to ``cpu``,
    unless its result file is there already. Returns that file."""
    out = run_dir / "eval" / f"{suite.replace(':', '_')}-seed{EVAL_SEED}.json"
    if not out.exists():
        cmd = ["rlinf", "eval", str(run_dir), "--suite", suite, "--episodes-per-task", str(EVAL_EPISODES)]
        with log.open("ab") as f:
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), preexec_fn=_pinned(cpu), timeout=1800
            ).returncode
        if rc != 0:
            raise RuntimeError(f"rlinf eval {run_dir} exited with {rc} (see {log})")
    return out


def _num(row: dict[str, str], key: str) -> float | None:
    v = row.get(key)
    return None if v in (None, "", "nan") else float(v)


def rlinf_result(run_dir: Path, eval_file: Path, stopped: bool) -> dict[str, Any]:
    """The rlinf side's figures: env steps and training seconds (its ``summary.json``), its
    training curve (``metrics.csv``), and the evaluation's success rates."""
    summary = json.loads((run_dir / "summary.json").read_text())
    task = json.loads(eval_file.read_text())["tasks"][0]
    curve = [
        {
            "step": int(float(row["step"])),
            "wall_s": _num(row, "wall_s"),
            "success_rate": _num(row, "success_rate"),
            "episode_return_mean": _num(row, "episode_return_mean"),
        }
        for row in metrics_rows(run_dir)
    ]
    return {
        "env_steps": int(summary.get("total_env_steps", 0)),
        "train_s": float(summary.get("wall_s") or 0.0),
        "stopped_at_wall": stopped,
        "curve": curve,
        "episodes": task["episodes"],
        "success_at_end": {k: task["success_at_end"][k] for k in ("rate", "ci95")},
        "success_once": {k: task["success_once"][k] for k in ("rate", "ci95")},
    }


@dataclass
class Pair:
    """One seed of a benchmark: where its two sides write, and how they are started.

    ``rlinf_cmd``: the ``rlinf train`` command line; ``sb3_cmd(wall)``: the SB3 child's, capped
    at ``wall`` seconds; ``suite``: what ``rlinf eval --suite`` evaluates the rlinf policy on."""

    seed: int
    run_root: Path
    name: str  # the task, in the files' names
    rlinf_cmd: list[str]
    sb3_cmd: Callable[[float], list[str]]
    suite: str

    def path(self, side: str, suffix: str = "") -> Path:
        return self.run_root / f"{side}-{self.name}-s{self.seed}{suffix}"


def run_pair(
    pair: Pair,
    wall: float,
    *,
    parallel: bool,
    reuse: bool = False,
    sb3_only: bool = False,
    rlinf_only: bool = False,
    cpus: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One seed, both sides (or one): ``{"seed", "rlinf", "sb3"}``. ``reuse`` keeps what the run
    root already holds (a finished rlinf run, its evaluation, SB3's result). ``cpus``: rlinf's
    and SB3's CPUs (default ``(0, 1)`` with ``parallel``, else ``(0, 0)``), so that two one-sided
    invocations can run at once on their own cores."""
    run_dir, sb3_out = pair.path("rlinf"), pair.path("sb3", ".json")
    rlinf_log, sb3_log = pair.path("rlinf", ".log"), pair.path("sb3", ".log")
    do_rlinf = not sb3_only and not (reuse and (run_dir / "summary.json").exists())
    do_sb3 = not rlinf_only and not (reuse and sb3_out.exists())
    stopped_file = run_dir / "stopped_at_wall"
    row: dict[str, Any] = {"seed": pair.seed}
    sb3 = None
    rlinf_cpu, sb3_cpu = cpus or ((0, 1) if parallel else (0, 0))
    if do_rlinf:
        proc = start(pair.rlinf_cmd, rlinf_cpu, rlinf_log)
        if do_sb3 and parallel:
            sb3 = start(pair.sb3_cmd(wall), sb3_cpu, sb3_log)
        if cap_rlinf(proc, run_dir, wall, timeout=wall + HOURS):
            stopped_file.write_text("SIGTERM at the wall budget\n")
        if not (run_dir / "summary.json").exists():
            raise RuntimeError(
                f"rlinf train wrote no summary in {run_dir} (exit {proc.returncode}; see {rlinf_log})"
            )
    if not sb3_only:
        eval_file = rlinf_eval(run_dir, pair.suite, rlinf_cpu, rlinf_log)
        row["rlinf"] = rlinf_result(run_dir, eval_file, stopped_file.exists())
    if do_sb3 and sb3 is None:
        sb3 = start(pair.sb3_cmd(row["rlinf"]["train_s"] if "rlinf" in row else wall), sb3_cpu, sb3_log)
    if sb3 is not None:
        wait_for(sb3, f"SB3 seed {pair.seed} (log {sb3_log})", timeout=wall + HOURS)
    if not rlinf_only:
        row["sb3"] = json.loads(sb3_out.read_text())
    return row


def side_arguments(p: argparse.ArgumentParser, wall: float) -> None:
    """The options every equal-wall benchmark takes: ``--seeds``, ``--wall``, ``--parallel``,
    ``--run-root``, ``--reuse``, ``--sb3-only``, ``--rlinf-only``, ``--json``, ``--note``."""
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--wall", type=float, default=wall, help="seconds of training each side gets")
    p.add_argument("--parallel", action="store_true", help="both sides of a seed at once, one CPU each")
    p.add_argument("--run-root", type=Path, default=None)
    p.add_argument("--reuse", action="store_true", help="keep what the run root already holds for a seed")
    p.add_argument("--sb3-only", action="store_true")
    p.add_argument("--rlinf-only", action="store_true")
    p.add_argument(
        "--cpus",
        default=None,
        help="R,S: the CPUs rlinf and SB3 are pinned to (default 0,1 with --parallel, else 0,0)",
    )
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--note", action="append", default=[], help="a line for the report's notes (repeatable)")


def new_report(
    args: argparse.Namespace,
    s: dict[str, Any],
    *,
    title: str,
    steps: int,
    config: str,
    train: str,
    suite: str,
    simulators: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A report before its seeds ran: the machine, the schedule, the budget, the example
    ``config`` and its settings ``s``, and the commands (``train``: the ``rlinf train`` line's
    overrides; ``suite``: what ``rlinf eval --suite`` evaluates on); :func:`run_seeds` fills in
    the rest; ``simulators``: distributions whose versions it records besides rlinf's, SB3's,
    torch's and gymnasium's. The benchmark is the script that is running."""
    task = suite.split(":", 1)[1]
    script = Path(sys.argv[0]).name
    return {
        "title": title,
        "machine": machine((*DISTS, *simulators), schedule=schedule(args)),
        "seeds": [int(x) for x in args.seeds.split(",")],
        "task": task,
        "wall_budget_s": args.wall,
        "max_env_steps": steps,
        "config": config,
        "settings": {"algorithm": s["ppo"], "model": s["model"], "env": s["env"]},
        "command": [
            f"uv run rlinf train {config} {train} runner.scheduler=local runner.seed=S runner.total_steps={steps} "
            f"runner.loggers=[csv] --run-dir RUNS/rlinf-{task}-sS  (SIGTERM once its training clock reaches "
            f"{args.wall:.0f} s)",
            f"uv run rlinf eval RUNS/rlinf-{task}-sS --suite {suite} --episodes-per-task {EVAL_EPISODES}",
            f"uv run --group bench python benchmarks/{script} " + " ".join(portable(sys.argv[1:])),
        ],
        "rows": [],
        "figures": [],
        "source": f"benchmarks/{script}",
        "notes": list(args.note),
    }


def run_seeds(report: dict[str, Any], args: argparse.Namespace, pair: Callable[[int], Pair]) -> None:
    """Each of ``report["seeds"]`` through :func:`run_pair` (``pair(seed)`` says how), printing
    its rows as it ends; fills the report's ``rows``, ``figures``, per-side means, ``notes`` and
    ``conditions`` (the schedule, the wall budget and the load before and after each seed)."""
    loads = []
    for seed in report["seeds"]:
        load = os.getloadavg()[0]
        row = run_pair(
            pair(seed),
            args.wall,
            parallel=args.parallel,
            reuse=args.reuse,
            sb3_only=args.sb3_only,
            rlinf_only=args.rlinf_only,
            cpus=side_cpus(args),
        )
        row["load_before"], row["load_after"] = load, os.getloadavg()[0]
        loads.append((load, row["load_after"]))
        report["rows"].append(row)
        report["figures"].extend(figure_rows(row))
        print_row(row)
    for side in ("rlinf", "sb3"):
        rates = [r[side]["success_at_end"]["rate"] for r in report["rows"] if side in r]
        if rates:
            report[f"{side}_success_at_end_mean"] = float(np.mean(rates))
            line = (
                f"{side}: success_at_end {np.mean(rates):.3f} +- {np.std(rates):.3f} over {len(rates)} seeds"
            )
            report["notes"].append(line)
            print(line)
    report["conditions"] = (
        f"{schedule(args)}; wall budget {args.wall:.0f} s of training per side; load average "
        f"(1 min) before/after each seed: {', '.join(f'{a:.1f}/{b:.1f}' for a, b in loads)} "
        f"({os.cpu_count()} CPUs, shared)"
    )


# -- report ---------------------------------------------------------------------------------------


def curve_summary(curve: list[dict[str, Any]]) -> dict[str, Any]:
    """Training success at the first logged point, the best, and the last (None when no episode
    had finished)."""
    pts = [p for p in curve if p.get("success_rate") is not None]
    if not pts:
        return {"first": None, "best": None, "last": None}
    return {
        "first": pts[0]["success_rate"],
        "best": max(p["success_rate"] for p in pts),
        "last": pts[-1]["success_rate"],
        "last_step": pts[-1]["step"],
    }


def figure_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for side in ("rlinf", "sb3"):
        if side not in row:
            continue
        r = row[side]
        c = curve_summary(r["curve"])
        out.append(
            {
                "seed": row["seed"],
                "peer": side,
                "env_steps": r["env_steps"],
                "train_s": round(r["train_s"], 1),
                "success_at_end": r["success_at_end"]["rate"],
                "success_at_end_ci95": [round(x, 3) for x in r["success_at_end"]["ci95"]],
                "success_once": r["success_once"]["rate"],
                "success_once_ci95": [round(x, 3) for x in r["success_once"]["ci95"]],
                "train_success_first": c["first"],
                "train_success_last": c["last"],
                "eval_episodes": r.get("episodes", EVAL_EPISODES),
            }
        )
    return out


def print_row(row: dict[str, Any]) -> None:
    for fig in figure_rows(row):
        print(
            f"seed {fig['seed']} {fig['peer']:<5}: {fig['env_steps']:>7} steps in {fmt(fig['train_s'])} s; "
            f"success_at_end {fig['success_at_end']:.2f} ({fig['success_at_end_ci95'][0]:.2f}-"
            f"{fig['success_at_end_ci95'][1]:.2f}), success_once {fig['success_once']:.2f}; training "
            f"success {fmt(fig['train_success_first'], '.2f')} -> {fmt(fig['train_success_last'], '.2f')}",
            flush=True,
        )


def portable(argv: list[str]) -> list[str]:
    """``argv`` with the run root as ``RUNS`` and an absolute ``--json`` path as ``OUT.json``
    (the report names no path of the machine it ran on)."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--run-root":
            out[i + 1] = "RUNS"
        elif arg == "--json" and Path(out[i + 1]).is_absolute():
            out[i + 1] = "OUT.json"
    return out

"""DAPO and GSPO beside GRPO on ``examples/grpo_arith.yaml``: held-out accuracy at equal wall time,
over seeds, through the command a user types.

For every seed the GRPO run goes first and runs the example's own warm start; DAPO and GSPO then
start from that run's warm-started policy (``model.path=W/grpo-S/warm_start/policy``,
``sft.steps=0``), so the three differ only in their objective. Each trains for the same GRPO
seconds (``runner.time_limit_s``, ``algorithm.iterations`` out of reach) and is evaluated once
at the end (greedy exact match on the example's 256 held-out problems):

- ``grpo``: the example as it is (``adv_estimator: grpo``, ``policy_loss: ppo_clip``, clip
  0.2 / 0.28, token-mean, uniform groups skipped);
- ``dapo``: ``policy_loss: dapo`` and dynamic sampling (``max_draws: 3``); the soft overlong
  punishment is left out (the task caps responses at its longest solution + 8 tokens, so it
  would never apply);
- ``gspo``: ``policy_loss: gspo`` with the paper's clip range (3e-4 / 4e-4).

Usage::

    uv run python benchmarks/objectives_arith.py                                  # seeds 0, 1, 2
    uv run python benchmarks/objectives_arith.py --quick                          # seed 0, short
    uv run python benchmarks/objectives_arith.py --json benchmarks/results/objectives_arith_3seeds.json
    uv run python benchmarks/objectives_arith.py --set task.num_terms=[2] --set sft.target_accuracy=0.25
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/grpo_arith.yaml"
VARIANTS: dict[str, list[str]] = {
    "grpo": [],
    "dapo": ["algorithm.policy_loss=dapo", "+algorithm.dynamic_sampling={max_draws: 3}"],
    "gspo": ["algorithm.policy_loss=gspo", "algorithm.clip_low=0.0003", "algorithm.clip_high=0.0004"],
}


def _rlinf(args: list[str], log: Path) -> tuple[float, str]:
    """Run ``rlinf ARGS`` from the repository root; the seconds it took and the command."""
    cmd = [str(Path(sys.executable).parent / "rlinf"), *args]
    shown = shlex.join(["rlinf", *args])
    t = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=7200)
    if proc.returncode != 0:
        raise SystemExit(f"{shown} failed ({proc.returncode}); see {log}")
    return time.perf_counter() - t, shown


def one_seed(seed: int, budget: float, work: Path, extra: list[str], done: Any) -> list[dict[str, Any]]:
    rows = []
    for name, overrides in VARIANTS.items():
        run_dir = work / f"{name}-{seed}"
        start = [] if name == "grpo" else [
            f"model.path={work / f'grpo-{seed}' / 'warm_start' / 'policy'}", "~model.init", "sft.steps=0",
        ]  # fmt: skip
        args = [
            "train", EXAMPLE, "runner.scheduler=local", f"runner.seed={seed}", f"runner.time_limit_s={budget}",
            "algorithm.iterations=100000", "runner.eval_interval=0", "runner.checkpoint_interval=0",
            *extra, *start, *overrides, "--run-dir", str(run_dir), "--quiet",
        ]  # fmt: skip
        wall, cmd = _rlinf(args, work / f"{name}-{seed}.log")
        cmd = cmd.replace(f"{work}/", "W/")  # the record names no folder of this machine
        s = json.loads((run_dir / "summary.json").read_text())
        rows.append(
            {
                "seed": seed,
                "objective": name,
                "before": s["accuracy_before"],
                "after": s["accuracy_after"],
                "gain pp": round(100 * (s["accuracy_after"] - s["accuracy_before"]), 1),
                "iterations": s["iterations"],
                "grpo s": s["grpo_s"],
                "command": cmd,
                "wall s": round(wall, 1),
            }
        )
        done(rows[-1])
    return rows


def table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = sorted(rows, key=lambda r: (r["objective"], r["seed"]))
    for name in VARIANTS:
        mine = [r for r in rows if r["objective"] == name]
        if len(mine) > 1:
            after = [r["after"] for r in mine]
            gains = [r["gain pp"] for r in mine]
            out.append(
                {
                    "seed": "mean +- std",
                    "objective": name,
                    "after": f"{statistics.mean(after):.3f} +- {statistics.stdev(after):.3f}",
                    "gain pp": f"{statistics.mean(gains):.1f} +- {statistics.stdev(gains):.1f}",
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument(
        "--budget", type=float, default=60.0, help="GRPO seconds of every run (runner.time_limit_s)"
    )
    ap.add_argument("--jobs", type=int, default=1, help="seeds run side by side")
    ap.add_argument("--quick", action="store_true", help="seed 0, a short warm start, 20 s of training")
    ap.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="an override for every run (repeatable), e.g. task.num_terms=[2] for a shorter warm start",
    )  # fmt: skip
    ap.add_argument("--work", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here (after every run)")
    args = ap.parse_args()
    extra: list[str] = list(args.overrides)
    if args.quick:
        args.seeds, args.budget = [0], 20.0
        extra += ["sft.steps=300", "task.eval_size=64"]
    work = args.work or Path(tempfile.mkdtemp(prefix="objectives-arith-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    started = datetime.now(UTC).strftime("%Y-%m-%d")

    def done(row: dict[str, Any]) -> None:
        rows.append(row)
        print(f"seed {row['seed']} {row['objective']:5s} after {row['after']:.3f} ({row['gain pp']:+.1f} pp) "
              f"in {row['iterations']} iterations, {row['grpo s']:.0f} s", flush=True)  # fmt: skip
        if args.json is not None:
            write(args.json, rows, args, started)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda s: one_seed(s, args.budget, work, extra, done), args.seeds))
    print(f"{'objective':9s} {'seed':>11s} {'before':>7s} {'after':>15s} {'gain pp':>12s} {'iters':>6s}")
    for r in table(rows):
        print(
            f"{r['objective']:9s} {r['seed']!s:>11s} {r.get('before', ''):>7} {r['after']!s:>15} "
            f"{r['gain pp']!s:>12} {r.get('iterations', '')!s:>6}"
        )


def write(path: Path, rows: list[dict[str, Any]], args: argparse.Namespace, date: str) -> None:
    data = {
        "title": "DAPO and GSPO beside GRPO on examples/grpo_arith.yaml: held-out accuracy at equal wall time",
        "date": date,
        "machine": f"{os.cpu_count()}-core CPU VM shared with other jobs",
        "conditions": (
            f"runner.scheduler local, torch_threads 1, {args.budget:g} s of training each "
            "(runner.time_limit_s), one greedy evaluation on the example's held-out problems at the end; "
            "DAPO and GSPO start from the GRPO run's warm start of the same seed"
        ),
        "command": [
            f"uv run python benchmarks/objectives_arith.py --seeds {' '.join(map(str, args.seeds))} "
            f"--budget {args.budget:g}"
            + "".join(f" --set {o}" for o in args.overrides)
            + (" --quick" if args.quick else "")
        ],
        "seeds": args.seeds,
        "variants": {k: v or ["the example as it is"] for k, v in VARIANTS.items()},
        "figures": table(rows),
        "source": "summary.json of each rlinf train run",
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    main()

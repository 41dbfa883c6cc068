"""What bounded staleness buys on placed runs (issue 51 item 2): throughput at
``rollout.max_staleness`` k = 0, 1, 2, learner and rollout in their own Ray processes.

- ``grpo_arith``: ``rlinf train examples/grpo_arith.yaml`` (actor, rollout and reward workers
  on an embedded Ray), shortened: ``--sft-steps`` warm-start steps (the throughput does not
  depend on what the policy knows, only on how long its responses are), ``--iterations``
  iterations of ``--prompts`` prompts x 8 samples, no evaluation between iterations. Figure:
  samples/s = every iteration's sequences over the last row's ``wall_s`` (the run's clock starts
  when the workers are up and the warm start is done; the last row is written once everything
  in flight is trained on).
- ``halfcheetah``: ``rlinf train examples/ppo_halfcheetah.yaml`` (env, rollout and actor
  workers), shortened to ``--ppo-iterations`` iterations of 2048 env steps. Figure: env steps/s
  = the last row's step over its ``wall_s``.

Not the span between the first and the last row: an asynchronous run writes iteration ``i``'s
row only when iteration ``i + k`` starts, so that span leaves out generation it counts.

With k = 0 generation and update take turns; with k > 0 the rollout of the next iteration(s)
overlaps the update (the language-model side: :mod:`rlinf_algos.lm.run`; embodied:
:mod:`rlinf_algos.embodied.placed`). Each run is its own ``rlinf`` process, one at a time;
``--repeats`` rounds are interleaved (k = 0, 1, 2, then again) and the table gives each run
and the ratio to k = 0 of the same round. The machine's load (``uptime``'s 1-minute average)
is recorded at each run's start: on a shared machine only the ratios within one round compare.

Usage::

    uv run python benchmarks/async_overlap.py [--repeats 1] [--json benchmarks/results/async_overlap.json]

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
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _report import finish, machine  # noqa: E402

KS = (0, 1, 2)


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def _train(example: str, overrides: list[str], run_dir: Path, timeout: float) -> tuple[float, list[str]]:
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
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=run_dir.parent)
    if out.returncode != 0:
        raise SystemExit(
            f"{shlex.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )
    return time.perf_counter() - t0, ["rlinf", "train", f"examples/{example}", *overrides]


def grpo(k: int, args: argparse.Namespace, tmp: Path, tag: str) -> dict[str, Any]:
    run = tmp / f"grpo_k{k}_{tag}"
    overrides = [
        f"sft.steps={args.sft_steps}", f"algorithm.iterations={args.iterations}",
        f"algorithm.prompts_per_iter={args.prompts}", "runner.eval_interval=0", "runner.log_interval=1",
        "task.eval_size=16", "runner.time_limit_s=null", "runner.scheduler=ray", f"rollout.max_staleness={k}",
        f"runner.seed={args.seed}",
    ]  # fmt: skip
    load = os.getloadavg()[0]
    took, cmd = _train("grpo_arith.yaml", overrides, run, args.timeout)
    rows = _rows(run)
    seqs = sum(int(r["sequences"]) for r in rows)
    span = float(rows[-1]["wall_s"])
    summary = json.loads((run / "summary.json").read_text())
    return {
        "run": "grpo_arith", "k": k, "samples_per_s": round(seqs / span, 2), "timed_s": round(span, 1),
        "iterations": len(rows), "staleness_mean": _mean(rows, "staleness_mean"),
        "stale_dropped": summary.get("stale_dropped", 0), "load_1min": round(load, 1),
        "run_s": round(took, 1), "command": shlex.join(cmd),
    }  # fmt: skip


def halfcheetah(k: int, args: argparse.Namespace, tmp: Path, tag: str) -> dict[str, Any]:
    run = tmp / f"cheetah_k{k}_{tag}"
    overrides = [
        f"runner.total_steps={2048 * args.ppo_iterations}", "runner.log_interval=2048",
        "runner.checkpoint_interval=0", f"rollout.max_staleness={k}", f"runner.seed={args.seed}",
    ]  # fmt: skip
    load = os.getloadavg()[0]
    took, cmd = _train("ppo_halfcheetah.yaml", overrides, run, args.timeout)
    rows = _rows(run)
    steps = float(rows[-1]["step"])
    span = float(rows[-1]["wall_s"])
    return {
        "run": "halfcheetah_ppo", "k": k, "env_steps_per_s": round(steps / span, 1), "timed_s": round(span, 1),
        "iterations": len(rows), "load_1min": round(load, 1), "run_s": round(took, 1),
        "command": shlex.join(cmd),
    }  # fmt: skip


def _mean(rows: list[dict[str, str]], col: str) -> float | None:
    vals = [float(r[col]) for r in rows if r.get(col) not in (None, "")]
    return round(sum(vals) / len(vals), 3) if vals else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds of k = 0, 1, 2")
    p.add_argument("--iterations", type=int, default=8, help="grpo_arith iterations per run")
    p.add_argument("--prompts", type=int, default=16, help="grpo_arith prompts per iteration (x 8 samples)")
    p.add_argument("--sft-steps", type=int, default=20, help="grpo_arith warm-start steps")
    p.add_argument(
        "--ppo-iterations", type=int, default=8, help="HalfCheetah PPO iterations of 2048 env steps"
    )
    p.add_argument("--runs", default="grpo,halfcheetah", help="which runs: grpo, halfcheetah or both")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds one rlinf run may take")
    p.add_argument("--json", type=Path, default=None, help="write the record here")
    args = p.parse_args()
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "title": "Bounded staleness: throughput at rollout.max_staleness k = 0, 1, 2 (placed runs)",
        "machine": machine(("torch", "ray", "gymnasium")),
        "seeds": [args.seed],
        "source": "benchmarks/async_overlap.py",
    }
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
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
                for k in KS:
                    row = fn(k, args, Path(tmp), f"r{rep}")
                    row["round"] = rep + 1
                    base = row[col] if k == 0 else base
                    row["ratio_to_k0"] = round(row[col] / base, 3) if base else None
                    figures.append(row)
                    if args.json:  # what is measured so far, should a later run not finish
                        partial = {**report, "figures": figures, "partial": True}
                        args.json.write_text(json.dumps(partial, indent=2, default=str) + "\n")
                    print(
                        f"round {rep + 1}  {row['run']:16s} k={k}  {col} {row[col]:9.2f}  "
                        f"x{row['ratio_to_k0']:.3f} of k=0  (timed {row['timed_s']} s, load {row['load_1min']})",
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
    ]
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

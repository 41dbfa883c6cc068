"""The verl-format language-model examples over seeds, through the commands a user types:

    rlinf sft   examples/grpo_verl_format/sft.yaml      runner.seed=S data.seed=S --run-dir W/sft-S
    rlinf train examples/grpo_verl_format/grpo.yaml     model.path=W/sft-S/policy runner.seed=S --run-dir W/full-S
    rlinf train examples/grpo_verl_format/grpo_lora.yaml model.path=W/sft-S/policy runner.seed=S --run-dir W/lora-S

For every seed it records the warm start's validation exact match and the GRPO runs' validation
score (mean reward of ``compute_score.py`` on ``val.parquet``, greedy) before and after, with the
wall seconds of each command; the spread over seeds closes the table. A seed's three commands
run in order; ``--jobs 2`` runs two seeds side by side (each command has one torch thread), which
stretches wall times but leaves the scores as they are.

Usage::

    uv run python benchmarks/lm_examples_seeds.py                          # seeds 0,1,2
    uv run python benchmarks/lm_examples_seeds.py --seeds 0 --modes full   # one run
    uv run python benchmarks/lm_examples_seeds.py --json benchmarks/results/grpo_verl_format_3seeds.json
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
EXAMPLE = Path("examples/grpo_verl_format")
CONFIGS = {"full": EXAMPLE / "grpo.yaml", "lora": EXAMPLE / "grpo_lora.yaml"}


def _rlinf(args: list[str], log: Path) -> tuple[float, str]:
    """Run ``rlinf ARGS`` from the repository root; the seconds it took and the command."""
    cmd = [str(Path(sys.executable).parent / "rlinf"), *args]
    shown = shlex.join(["rlinf", *args])
    t = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"{shown} failed ({proc.returncode}); see {log}")
    return time.perf_counter() - t, shown


def one_seed(seed: int, modes: list[str], work: Path) -> list[dict[str, Any]]:
    sft_dir = work / f"sft-{seed}"
    sft_s, sft_cmd = _rlinf(
        [
            "sft",
            str(EXAMPLE / "sft.yaml"),
            f"runner.seed={seed}",
            f"data.seed={seed}",
            "--run-dir",
            str(sft_dir),
            "--quiet",
        ],
        work / f"sft-{seed}.log",
    )
    sft = json.loads((sft_dir / "summary.json").read_text())
    rows = []
    for mode in modes:
        run_dir = work / f"{mode}-{seed}"
        wall, cmd = _rlinf(
            ["train", str(CONFIGS[mode]), f"model.path={sft_dir / 'policy'}", f"runner.seed={seed}",
             "--run-dir", str(run_dir), "--quiet"],
            work / f"{mode}-{seed}.log",
        )  # fmt: skip
        s = json.loads((run_dir / "summary.json").read_text())
        before, after = s["val_score_before"], s["val_score_after"]
        rows.append(
            {
                "seed": seed,
                "mode": mode,
                "sft exact match": sft.get("val_exact_match_after"),
                "sft s": round(sft_s, 1),
                "val before": round(before, 3),
                "val after": round(after, 3),
                "gain": round(after - before, 3),
                "accuracy before": round(s["accuracy_before"], 3),
                "accuracy after": round(s["accuracy_after"], 3),
                "grpo wall s": round(wall, 1),
                "iterations": s.get("iterations"),
                "commands": [sft_cmd.replace(str(work), "W"), cmd.replace(str(work), "W")],
            }
        )
        print(
            f"seed {seed} {mode}: val {before:.3f} -> {after:.3f} ({after - before:+.3f}) in {wall:.0f} s",
            flush=True,
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    ap.add_argument("--modes", default="full,lora", help="full,lora or one of them")
    ap.add_argument("--jobs", type=int, default=1, help="seeds run side by side")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    ap.add_argument("--json", type=Path, default=None, help="write the record here")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in CONFIGS]
    if bad:
        raise SystemExit(f"--modes: {bad[0]!r} is not one of {', '.join(CONFIGS)}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rlinf-lm-seeds-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            rows = [r for rs in pool.map(lambda s: one_seed(s, modes, work), seeds) for r in rs]
    rows.sort(key=lambda r: (r["mode"], r["seed"]))
    for mode in modes:
        gains = [r["gain"] for r in rows if r["mode"] == mode]
        afters = [r["val after"] for r in rows if r["mode"] == mode]
        spread = f" +- {statistics.stdev(gains):.3f}" if len(gains) > 1 else ""
        rows.append({"seed": "mean", "mode": mode, "gain": f"{statistics.mean(gains):.3f}{spread}",
                     "val after": round(statistics.mean(afters), 3)})  # fmt: skip
        pp = [
            100 * (r["accuracy after"] - r["accuracy before"])
            for r in rows
            if r["mode"] == mode and "accuracy after" in r
        ]
        rows[-1]["accuracy gain pp"] = f"{statistics.mean(pp):.1f}" + (
            f" +- {statistics.stdev(pp):.1f}" if len(pp) > 1 else ""
        )
        print(
            f"{mode}: gain {statistics.mean(gains):+.3f}{spread}, accuracy {rows[-1]['accuracy gain pp']} pp over seeds {seeds}"
        )
    record = {
        "title": "GRPO on the verl-format example after `rlinf sft`, full fine-tuning and LoRA, over seeds",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()}-CPU machine, torch_threads 1",
        "conditions": f"load average {load0[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end; "
        f"{args.jobs} seed(s) side by side; {time.perf_counter() - t0:.0f} s in all",
        "command": shlex.join(["uv", "run", "python", "benchmarks/lm_examples_seeds.py", *sys.argv[1:]]),
        "seeds": seeds,
        "figures": rows,
        "source": "issue 20 (the examples' full runs)",
        "notes": [
            "val: mean reward of examples/grpo_verl_format/compute_score.py on val.parquet (128 prompts), "
            "greedy, before and after GRPO; accuracy: the share of those answers that are right (reward 1); "
            "sft exact match: the warm start's greedy outputs equal to the reference worked answer on the "
            "same prompts."
        ],
    }
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

"""LLM GRPO on CPU: rollout generation throughput, and the time of one GRPO iteration by phase.

Part 1, generation (``tokens/s``): the example's policy (a Qwen2-architecture model folder,
hidden 128, 4 layers) generating ``NEW`` tokens after a 12-token prompt, side by side:

- ``kv-cache`` (what the rollout worker runs, :func:`rlinf_algos.lm.hf.generate`): batched,
  left-padded prefill, the model's KV cache, rows leaving the cache as they finish,
  ``torch.inference_mode``;
- ``hf-generate``: transformers' own ``model.generate(do_sample=True)`` on the same batch (the
  library peer);
- ``no-cache``: the same sampler recomputing the whole sequence every step (the naive peer);
- at batch 1, 32 and 256 (one at a time vs batched).

Part 2, GRPO iteration (seconds per phase: ``generate``, ``reward``, ``reference``, ``update``,
``sync``): the in-process loop of ``examples/grpo_arith.yaml`` (single agent),
``examples/grpo_multiagent.yaml`` (lead + subagents) and its ``flat`` baseline, with their
batch sizes (prompts x group size), ``kl_coef`` 0.01 so the reference phase runs and no group
left out of the update, after a short warm start so responses are well formed (an untrained
policy rambles to ``max_new_tokens``).

The machine is shared, so wall-clock figures move with its load; CPU time is reported too.

Part 3, on request: the multi-agent example against its flat single-agent baseline, the same
warm-start and GRPO budget for both (two full training runs):

Part 4, on request (``--placed``): placed ``grpo_lm`` samples/s, ``examples/grpo_arith.yaml``
shortened on its own scheduler (Ray: rollout, reward, reference when ``kl_coef > 0``, actor
workers), at ``kl_coef`` 0 (the example's) and 0.01; samples/s is the episodes of an iteration
over its wall time (row to row, the first iteration left out). ``--src TREE`` (repeatable) runs
the same measurement on other source trees (their ``packages/*/src`` first on ``PYTHONPATH``,
for the driver and, inherited, its Ray workers), interleaved with this one, so before and after
share the machine's load:

    uv run python benchmarks/grpo_lm.py [--quick] [--json PATH] [--threads N]
    uv run python benchmarks/grpo_lm.py --compare-multiagent RUN_ROOT [--reuse] [key=value ...] [--json PATH]
    uv run python benchmarks/grpo_lm.py --placed [--src TREE ...] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _report import fmt

from rlinf_algos.lm import hf
from rlinf_algos.lm.config import LMModelConfig, ModelInitConfig, load_lm_sections
from rlinf_algos.lm.flow import train_lm
from rlinf_algos.lm.run import PHASES
from rlinf_algos.lm.tokens import LMTokenizer
from rlinf_core.config import apply_overrides, load_yaml

ROOT = Path(__file__).resolve().parents[1]


def _no_cache_generate(model: Any, prompts: list[list[int]], new: int, gen: torch.Generator) -> int:
    """The naive peer: one full forward over the whole (equal-length) batch per new token."""
    ids = torch.tensor(prompts)
    with torch.inference_mode():
        for _ in range(new):
            probs = torch.softmax(model(input_ids=ids, use_cache=False).logits[:, -1], dim=-1)
            nxt = torch.multinomial(probs, 1, generator=gen)
            ids = torch.cat([ids, nxt], dim=1)
    return len(prompts) * new


def _hf_generate(model: Any, prompts: list[list[int]], new: int, seed: int) -> int:
    """The library peer: transformers' ``generate`` (sampling, its own KV cache), no early stop."""
    torch.manual_seed(seed)
    ids = torch.tensor(prompts)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            top_k=0,
            max_new_tokens=new,
            min_new_tokens=new,
            pad_token_id=0,
        )
    return (out.shape[1] - ids.shape[1]) * len(prompts)


def bench_generation(quick: bool) -> list[dict[str, Any]]:
    folder = Path(tempfile.mkdtemp(prefix="rlinf-bench-lm-")) / "model"
    init = ModelInitConfig(hidden_size=128, num_layers=4, num_heads=4, max_position_embeddings=256)
    hf.new_model_folder(folder, init, seed=0)
    tok = LMTokenizer.from_folder(folder)
    model = hf.load_causal_lm(LMModelConfig(path=str(folder)), trainable=False).eval()
    new = 32 if quick else 64
    prompt = tok.encode("12+34+56+78=", bos=True)
    rows = []
    for batch in (1, 32, 256):
        prompts = [prompt] * batch
        for name in ("kv-cache", "hf-generate", "no-cache"):
            reps = 1 if quick or batch == 256 else 3
            walls, cpus = [], []
            n_tok = 0
            for r in range(reps):
                gen = torch.Generator().manual_seed(r)
                t, c = time.perf_counter(), time.process_time()
                if name == "kv-cache":
                    n_tok = hf.generate(model, prompts, new, [], temperature=1.0, generator=gen).num_tokens
                elif name == "hf-generate":
                    n_tok = _hf_generate(model, prompts, new, r)
                else:
                    n_tok = _no_cache_generate(model, prompts, new, gen)
                walls.append(time.perf_counter() - t)
                cpus.append(time.process_time() - c)
            wall, cpu = statistics.median(walls), statistics.median(cpus)
            rows.append(
                {
                    "batch": batch,
                    "sampler": name,
                    "new_tokens": n_tok,
                    "wall_s": wall,
                    "tokens_per_s": n_tok / wall,
                    "tokens_per_cpu_s": n_tok / max(cpu, 1e-9),
                }
            )
    return rows


def bench_iteration(quick: bool) -> list[dict[str, Any]]:
    cases = [
        ("single", "grpo_arith.yaml", []),
        ("multiagent", "grpo_multiagent.yaml", []),
        ("flat", "grpo_multiagent.yaml", ["task.mode=flat"]),
    ]
    iters = 2 if quick else 4
    rows = []
    for label, name, extra in cases:
        overrides = [
            *extra,
            f"sft.steps={60 if quick else 300}",
            f"algorithm.iterations={iters}",
            "algorithm.kl_coef=0.01",
            "algorithm.skip_uniform_groups=false",  # time the update on every sequence
            "task.eval_size=16",
            "runner.eval_interval=0",
            "runner.time_limit_s=null",
        ]
        if quick:
            overrides += ["algorithm.prompts_per_iter=8"]
        run = load_lm_sections(apply_overrides(load_yaml(ROOT / "examples" / name), overrides))
        with tempfile.TemporaryDirectory() as d:
            train_lm(run, d, log=None)
            metrics = [json.loads(x) for x in (Path(d) / "metrics.jsonl").read_text().splitlines()]
        metrics = metrics[1:] or metrics  # the first iteration warms up allocators
        row: dict[str, Any] = {
            "mode": label,
            "episodes": run.algorithm.prompts_per_iter * run.algorithm.group_size,
            "sequences": statistics.mean(m["sequences"] for m in metrics),
            "gen_tokens": statistics.mean(m["generated_tokens"] for m in metrics),
            "tokens_per_s": statistics.mean(m["tokens_per_s"] for m in metrics),
        }
        for p in PHASES:
            row[f"{p}_s"] = statistics.mean(m[f"{p}_s"] for m in metrics)
        row["iteration_s"] = sum(row[f"{p}_s"] for p in PHASES)
        rows.append(row)
    return rows


def compare_multiagent(run_root: Path, overrides: list[str], reuse: bool = False) -> list[dict[str, Any]]:
    """Part 3 (``--compare-multiagent``): ``examples/grpo_multiagent.yaml`` trained twice with the
    same warm-start steps and GRPO iterations, lead + subagents (``multiagent``) and one agent
    holding the full context (``flat``), side by side (two processes at once, so they share
    whatever load the machine has); held-out accuracy before and after each. ``reuse``: report
    the runs already in ``run_root/<mode>`` instead of training."""
    import subprocess
    import sys

    procs: dict[str, Any] = {}
    for mode in ("multiagent", "flat"):
        if reuse:
            continue
        log = open(run_root / f"{mode}.log", "w")  # noqa: SIM115 - closed below
        argv = [sys.executable, "-m", "rlinf_algos.lm", str(ROOT / "examples" / "grpo_multiagent.yaml")]
        argv += ["--run-dir", str(run_root / mode), *overrides, f"task.mode={mode}"]
        procs[mode] = (
            subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT),
            log,
            time.perf_counter(),
        )
    usage: dict[str, tuple[float, float]] = {}
    for mode, (proc, log, t0) in procs.items():
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        usage[mode] = (time.perf_counter() - t0, ru.ru_utime + ru.ru_stime)
        log.close()
        if proc.returncode != 0:
            print(f"{mode} run failed (exit {proc.returncode}); see {run_root / f'{mode}.log'}")
    rows = []
    for mode in ("multiagent", "flat"):
        path = run_root / mode / "summary.json"
        if not path.exists():
            continue
        s = json.loads(path.read_text())
        wall, cpu = usage.get(mode, (s.get("wall_s"), None))
        rows.append(
            {
                "mode": mode,
                "accuracy_before": s["accuracy_before"],
                "accuracy_after": s["accuracy_after"],
                "gain_pp": s["accuracy_gain_pp"],
                "sft_steps": s["sft_steps"],
                "iterations": s["iterations"],
                "wall_s": wall,
                "cpu_s": cpu,
                "evals": s.get("evals"),
                "load_average": s["load_average"],
            }
        )
    return rows


PLACED = [
    "sft.steps=60",
    "algorithm.iterations=5",
    "algorithm.prompts_per_iter=16",
    "task.eval_size=16",
    "runner.eval_interval=0",
    "runner.time_limit_s=null",
    "runner.seed=0",
    "algorithm.skip_uniform_groups=false",  # time the update (and the KL term) on every sequence
]
"""``examples/grpo_arith.yaml`` shortened for ``--placed`` (16 prompts x 8 = 128 episodes an
iteration, 5 iterations after a 60-step warm start, the update on every sequence)."""


def _placed_child(tree: str, kl: float, run_dir: Path) -> None:
    """One placed run in this process (the parent sets ``PYTHONPATH`` to ``tree``'s sources)."""
    import rlinf_algos
    from rlinf_core.config import apply_overrides, load_yaml

    config = apply_overrides(
        load_yaml(ROOT / "examples" / "grpo_arith.yaml"), [*PLACED, f"algorithm.kl_coef={kl}"]
    )
    rlinf_algos.train(config, run_dir)
    (run_dir / "code.txt").write_text(str(Path(rlinf_algos.__file__).resolve().parents[4]))


def bench_placed(trees: list[Path], repeats: int) -> list[dict[str, Any]]:
    """Part 4: every tree at each ``kl_coef``, ``repeats`` times, interleaved."""
    import shutil
    import subprocess
    import sys

    rows = []
    for rep in range(repeats):
        for kl in (0.0, 0.01):
            for tree in trees:
                with tempfile.TemporaryDirectory() as d:
                    run_dir = Path(d) / "run"
                    env = dict(os.environ)
                    env.pop("RAY_ADDRESS", None)
                    srcs = [str(p) for p in sorted((tree / "packages").glob("*/src"))]
                    env["PYTHONPATH"] = os.pathsep.join([*srcs, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
                    argv = [sys.executable, __file__, "--placed-child", str(tree), str(kl), str(run_dir)]
                    for attempt in range(3):  # a busy machine may miss Ray's start-up deadlines
                        shutil.rmtree(run_dir, ignore_errors=True)
                        t0 = time.perf_counter()
                        proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
                        wall = time.perf_counter() - t0
                        if proc.returncode == 0 or "could not start an embedded Ray" not in proc.stderr:
                            break
                        print(f"  (Ray did not start in time; try {attempt + 2} of 3)", flush=True)
                    if proc.returncode != 0:
                        raise SystemExit(
                            f"placed run of {tree} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
                        )
                    ran = Path((run_dir / "code.txt").read_text())
                    if ran != tree.resolve():
                        raise SystemExit(f"the run of {tree} imported rlinf from {ran}")
                    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
                    summary = json.loads((run_dir / "summary.json").read_text())
                episodes = int(PLACED[2].split("=")[1]) * 8
                walls = [b["wall_s"] - a["wall_s"] for a, b in itertools.pairwise(metrics)]
                row = {
                    "tree": "this tree" if tree == ROOT else f"TREE{trees.index(tree) + 1}",
                    "kl_coef": kl,
                    "repeat": rep,
                    "episodes_per_iter": episodes,
                    "iteration_s": round(statistics.mean(walls), 3),
                    "samples_per_s": round(episodes / statistics.mean(walls), 1),
                    "run_wall_s": round(wall, 1),
                    "workers": ", ".join(
                        f"{k} x{v['processes']}"
                        for k, v in summary["placement"].items()
                        if v.get("processes")
                    ),
                    **{f"{p}_s": round(statistics.mean(m[f"{p}_s"] for m in metrics[1:]), 3) for p in PHASES},
                }
                print(
                    f"{row['tree']:>12} kl {kl:<5} rep {rep}  {row['samples_per_s']:7.1f} samples/s  "
                    f"iteration {row['iteration_s']:.2f} s  (generate {row['generate_s']:.2f}, reward "
                    f"{row['reward_s']:.3f}, reference {row['reference_s']:.3f}, update {row['update_s']:.2f})",
                    flush=True,
                )
                rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller batches, fewer repetitions")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument(
        "--compare-multiagent",
        type=Path,
        metavar="RUN_ROOT",
        help="instead: train examples/grpo_multiagent.yaml as lead + subagents and as one flat agent "
        "with the same budget (run directories under RUN_ROOT) and print both accuracies",
    )
    ap.add_argument("--reuse", action="store_true", help="--compare-multiagent: report the runs in RUN_ROOT")
    ap.add_argument("overrides", nargs="*", help="key.path=value overrides for --compare-multiagent")
    ap.add_argument("--placed", action="store_true", help="instead: placed grpo_lm samples/s (Part 4)")
    ap.add_argument("--src", type=Path, action="append", default=[], help="--placed: another source tree")
    ap.add_argument("--repeats", type=int, default=2, help="--placed: runs of each tree and kl_coef")
    ap.add_argument("--placed-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.placed_child:
        tree, kl, run_dir = args.placed_child
        _placed_child(tree, float(kl), Path(run_dir))
        return
    if args.placed:
        load0 = os.getloadavg()
        rows = bench_placed([*args.src, ROOT], args.repeats)
        if args.json:
            record = {
                "title": "Placed grpo_lm samples/s before and after the hops were cut (examples/grpo_arith.yaml shortened)",
                "date": time.strftime("%Y-%m-%d"),
                "machine": f"{os.cpu_count()} CPUs, shared; load average {load0[0]:.1f} at the start, "
                f"{os.getloadavg()[0]:.1f} at the end",
                "command": "uv run python benchmarks/grpo_lm.py --placed "
                + " ".join(f"--src TREE{i + 1}" for i in range(len(args.src)))
                + f" --repeats {args.repeats} --json {args.json}",
                "seeds": [0],
                "figures": rows,
                "notes": [
                    "TREE1 is the source tree before the hops were cut (main a79b83f, `git archive a79b83f "
                    "packages | tar -x -C TREE1`); 'this tree' is the branch. Runs interleaved on one machine.",
                    "samples/s: the 128 episodes of an iteration over its wall time, iterations 2-5 of one run; "
                    "the phase seconds are the means of the same rows.",
                ],
            }
            args.json.write_text(json.dumps(record, indent=2))
            print(f"wrote {args.json}")
        return
    torch.set_num_threads(args.threads)
    if args.compare_multiagent is not None:
        args.compare_multiagent.mkdir(parents=True, exist_ok=True)
        rows = compare_multiagent(args.compare_multiagent, args.overrides, reuse=args.reuse)
        print(
            f"{'mode':>11} {'before':>7} {'after':>7} {'gain pp':>8} {'SFT steps':>9} {'iters':>6} {'wall s':>7} {'cpu s':>6}"
        )
        for r in rows:
            print(
                f"{r['mode']:>11} {r['accuracy_before']:>7.3f} {r['accuracy_after']:>7.3f} {r['gain_pp']:>+8.1f} "
                f"{r['sft_steps']:>9} {r['iterations']:>6} {fmt(r['wall_s'], '.0f'):>7} {fmt(r['cpu_s'], '.0f'):>6}"
            )
        if args.json:
            args.json.write_text(json.dumps({"compare_multiagent": rows}, indent=2))
        return

    load0 = os.getloadavg()
    cpu0 = time.process_time()
    gen_rows = bench_generation(args.quick)
    print(
        f"rollout generation (Qwen2 hidden 128 x4 layers, {gen_rows[0]['new_tokens']} new tokens per sequence)"
    )
    print(f"{'batch':>6} {'sampler':>9} {'tokens':>7} {'wall s':>8} {'tokens/s':>10} {'tokens/cpu-s':>13}")
    for r in gen_rows:
        print(
            f"{r['batch']:>6} {r['sampler']:>9} {r['new_tokens']:>7} {r['wall_s']:>8.3f} "
            f"{r['tokens_per_s']:>10.0f} {r['tokens_per_cpu_s']:>13.0f}"
        )
    it_rows = bench_iteration(args.quick)
    print("\nGRPO iteration, mean seconds per phase (in-process loop)")
    head = f"{'mode':>11} {'episodes':>8} {'seqs':>6} {'gen tok':>8} {'tok/s':>7}"
    print(head + "".join(f" {p:>9}" for p in PHASES) + f" {'total':>8}")
    for r in it_rows:
        line = (
            f"{r['mode']:>11} {r['episodes']:>8} {r['sequences']:>6.0f} {r['gen_tokens']:>8.0f} "
            f"{r['tokens_per_s']:>7.0f}"
        )
        print(line + "".join(f" {r[f'{p}_s']:>9.3f}" for p in PHASES) + f" {r['iteration_s']:>8.3f}")
    load1 = os.getloadavg()
    print(
        f"\nload average (1/5/15 min) at the start {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, at the end "
        f"{load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f}; this process used {time.process_time() - cpu0:.0f} CPU-s"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": {
                        "python": platform.python_version(),
                        "torch": torch.__version__,
                        "threads": args.threads,
                        "cpus": os.cpu_count(),
                        "load_average_start": load0,
                        "load_average_end": load1,
                    },
                    "quick": args.quick,
                    "generation": gen_rows,
                    "iteration": it_rows,
                },
                indent=2,
            )
        )
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()

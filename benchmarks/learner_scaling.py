"""The learner update on 1 and 2 data-parallel ranks, DDP and FSDP, over Gloo on the CPU.

Where an update's seconds go with ``rlinf_algos.parallel.DataParallel``, and how rlinf's gradient
all-reduce compares with a bare ``torch.distributed.all_reduce`` of the same bytes.

Workloads (both built identically on every rank from fixed seeds; rank 0's weights win):

- ``ppo``, "quickstart PPO": the learner of ``examples/quickstart.yaml``,
  ``rlinf_algos.ppo.learner.PPOLearner`` on a ``GaussianActorCritic`` 64x64 tanh with obs_dim 4 and
  act_dim 1 (InvertedPendulum's), ``PPOConfig(rollout_steps=256, minibatch_size=64,
  update_epochs=10, lr=3e-4)``; one update is 10 epochs x 32 minibatches = 320 optimiser steps on a
  synthetic rollout (T=256, N=8) drawn from a fixed ``torch.Generator``.
- ``lm``, "grpo_lm model": a Hugging Face ``Qwen2ForCausalLM`` built from a config (hidden 128, 2
  layers, 4 heads, vocab 64, 48 tokens per sequence; no download) with a GRPO token loss: a batch of
  32 sequences in minibatches of 16 (2 optimiser steps per update); each rank takes its shard of a
  minibatch (``dp.span``), ``rlinf_algos.lm.hf.sequence_log_probs``, then
  ``rlinf_algos.grpo.functional.policy_loss`` (clip 0.2/0.28, token-mean), ``dp.backward`` with the
  shard's share of the minibatch's tokens, ``dp.sync_grads``, ``dp.clip_grad_norm`` (1.0), AdamW.
  ``dp.wrap`` shards each ``Qwen2DecoderLayer`` as its own FSDP unit.

Configurations: 1 rank; 1 rank with 2 torch threads (one process given both cores: the fair
baseline for 2 ranks on 2 cores); 2 ranks DDP; 2 ranks FSDP. Each runs its ranks as real processes
(this file with ``--rank``), ``torch.set_num_threads(1)`` and ``OMP_NUM_THREADS=1`` in each (2 in the
2-thread row), a rendezvous on a TCPStore and a Gloo group exactly as a learner group does. ``--warmup`` updates, then ``--updates``
timed ones; the ranks meet on a barrier before each timed phase (not counted). Per update, rank 0
records:

- ``update``: the wall time of the update (``PPOLearner.update`` / the LM loop);
- ``all-reduce``: the seconds of ``dp.sync_grads`` in it (``dp.take_comm_s()``; DDP only: with
  FSDP the gradients are reduce-scattered inside the backward, so FSDP's communication is part of
  ``compute`` and its all-reduce column is empty);
- ``compute``: ``update - all-reduce`` (forward, backward, optimiser, and the few metric
  all-reduces the update makes);
- ``publish``: ``dp.state_dict(model)``, the full state dict a weight publish takes (with FSDP a
  gather: a collective on every rank);
- ``total``: update + publish.

Bare all-reduce peer: in the 2-rank DDP run, after the updates, the same group times
``torch.distributed.all_reduce`` of one preallocated flat float32 tensor as large as the model's
gradient, and ``dp.sync_grads`` on the model's gradients (which flattens, all-reduces and copies
back): ``--allreduce-reps`` bursts of ``--allreduce-burst`` back-to-back calls each, the two
alternating, a barrier before every burst; seconds per call = the burst's seconds / its calls, the
median over bursts; bandwidth = gradient bytes / those seconds, and the ratio of the two.

``--repeats`` runs every configuration that many times (interleaved); medians and min/max are over
all timed updates of all repeats. Figures are printed, never asserted.

Usage::

    uv run python benchmarks/learner_scaling.py                 # 3-4 minutes on 2 cores
    uv run python benchmarks/learner_scaling.py --updates 3 --repeats 1 --no-json   # a smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _report import fmt, machine

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "learner_scaling.json"
DISTS = ("torch", "transformers", "rlinf-algos")
WORKLOADS = ("ppo", "lm")
# (ranks, strategy, torch threads per rank); one rank uses neither strategy. "1 rank, 2 threads" is the
# single process given both cores (intra-op threads), the fair baseline for 2 ranks on 2 cores.
CONFIGS = ((1, "ddp", 1), (1, "ddp", 2), (2, "ddp", 1), (2, "fsdp", 1))


def label(world: int, strategy: str, threads: int) -> str:
    if world == 1:
        return "1 rank" if threads == 1 else f"1 rank, {threads} threads"
    return f"{world} ranks {strategy.upper()}"


THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "PYTHONWARNINGS": "ignore",
}

PPO_SPEC = {
    "type": "mlp", "cls": "GaussianActorCritic", "obs_dim": 4, "act_dim": 1, "hidden": [64, 64],
    "activation": "tanh", "log_std_init": 0.0, "normalize_obs": True,
}  # fmt: skip
PPO_T, PPO_N = 256, 8
LM = {"vocab": 64, "hidden": 128, "layers": 2, "heads": 4, "seq_len": 48, "prompt_len": 16}
LM_BATCH, LM_MINIBATCH, LM_LR, LM_CLIP = 32, 16, 1e-4, (0.2, 0.28)


# -- one rank (a subprocess) ----------------------------------------------------------------------


def _ppo(dp: Any) -> tuple[Any, Any, Any]:
    """(model, params, update()) of the quickstart PPO learner on a synthetic rollout."""
    import torch

    from rlinf_algos.models import build_policy
    from rlinf_algos.ppo.config import PPOConfig
    from rlinf_algos.ppo.learner import PPOLearner, PPORollout

    cfg = PPOConfig(rollout_steps=PPO_T, minibatch_size=64, update_epochs=10, lr=3e-4)
    model = dp.wrap(build_policy(PPO_SPEC), methods=("evaluate", "value"))
    learner = PPOLearner(model, cfg, seed=1, dp=dp)
    g = torch.Generator().manual_seed(7)
    T, N = PPO_T, PPO_N
    rollout = PPORollout(
        obs=torch.randn(T, N, 4, generator=g),
        actions=torch.randn(T, N, 1, generator=g),
        log_probs=torch.randn(T, N, generator=g) * 0.1 - 1.0,
        values=torch.randn(T, N, generator=g),
        rewards=torch.rand(T, N, generator=g),
        terminated=torch.rand(T, N, generator=g) < 0.01,
        truncated=torch.zeros(T, N, dtype=torch.bool),
        final_values=torch.zeros(T, N),
        last_value=torch.randn(N, generator=g),
    )
    steps_per_epoch = T * N // cfg.minibatch_size

    def update() -> int:
        return int(learner.update(rollout)["epochs"]) * steps_per_epoch

    return model, learner.params, update


def _lm(dp: Any) -> tuple[Any, Any, Any]:
    """(model, params, update()) of a small Qwen2 with a GRPO token loss on a synthetic batch."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlinf_algos.grpo.functional import policy_loss
    from rlinf_algos.lm.hf import sequence_log_probs

    config = Qwen2Config(
        vocab_size=LM["vocab"],
        hidden_size=LM["hidden"],
        intermediate_size=4 * LM["hidden"],
        num_hidden_layers=LM["layers"],
        num_attention_heads=LM["heads"],
        num_key_value_heads=LM["heads"],
        max_position_embeddings=64,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = dp.wrap(Qwen2ForCausalLM(config))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LM_LR, betas=(0.9, 0.99))
    g = torch.Generator().manual_seed(7)
    B, L, P = LM_BATCH, LM["seq_len"], LM["prompt_len"]
    ids = torch.randint(3, LM["vocab"], (B, L), generator=g)
    lengths = torch.randint(8, L - P + 1, (B,), generator=g)  # response tokens per sequence
    pos = torch.arange(L).unsqueeze(0)
    mask = ((pos >= P) & (pos < P + lengths.unsqueeze(1))).float()
    ids = torch.where(pos < P + lengths.unsqueeze(1), ids, torch.zeros_like(ids))  # right padding
    adv = torch.randn(B, generator=g)
    with torch.no_grad():  # the sampling policy's log-probs: the initial weights'
        old = sequence_log_probs(model, ids).detach()
    perm_gen = torch.Generator().manual_seed(11)

    def update() -> int:
        mb = LM_MINIBATCH
        perm = torch.randperm(B, generator=perm_gen)
        lo, hi = dp.span(mb)
        for i in range(B // mb):
            rows = perm[i * mb : (i + 1) * mb]
            whole = float(mask[rows].sum())
            opt.zero_grad(set_to_none=True)
            pieces = dp.micro_spans(lo, hi)
            for j, (u, v) in enumerate(pieces):
                sub = rows[u:v]
                lp = sequence_log_probs(model, ids[sub])
                loss, _ = policy_loss(lp, old[sub], adv[sub], mask[sub], *LM_CLIP)
                share = float(mask[sub].sum()) / whole
                dp.backward(loss, share, last=j == len(pieces) - 1)
            dp.sync_grads(params)
            dp.clip_grad_norm(params, 1.0)
            opt.step()
        return B // mb

    return model, params, update


def rank_main(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import warnings

    warnings.filterwarnings("ignore")
    from rlinf_algos.parallel import DataParallel

    rank, world = args.rank, args.world
    dp = DataParallel.start(
        rank, world, strategy=args.strategy, device="cpu", timeout=120, addr="127.0.0.1", port=args.port
    )
    import torch.distributed as dist

    def barrier() -> None:
        if world > 1:
            dist.barrier()

    torch.manual_seed(3 if rank == 0 else 100 + rank)  # rank 0's weights win (dp.wrap broadcasts)
    model, params, update = (_ppo if args.workload == "ppo" else _lm)(dp)
    grad_numel = sum(p.numel() for p in params)
    updates: list[dict[str, float]] = []
    for k in range(args.warmup + args.updates):
        barrier()
        dp.take_comm_s()
        t0 = time.perf_counter()
        steps = update()
        t1 = time.perf_counter()
        comm = dp.take_comm_s()
        barrier()
        t2 = time.perf_counter()
        dp.state_dict(model)
        t3 = time.perf_counter()
        if k >= args.warmup:
            updates.append(
                {
                    "update_s": t1 - t0,
                    "compute_s": t1 - t0 - comm,
                    "allreduce_s": comm if (world > 1 and args.strategy == "ddp") else None,
                    "publish_s": t3 - t2,
                    "total_s": t1 - t0 + t3 - t2,
                    "optimizer_steps": steps,
                }
            )
    peer: dict[str, Any] | None = None
    if world > 1 and args.strategy == "ddp" and args.allreduce_reps > 0:
        with torch.no_grad():
            for p in params:  # zeros: repeated sums stay finite however many calls
                p.grad = torch.zeros_like(p)
            flat = torch.zeros(grad_numel)
            bare, ours = [], []
            burst = args.allreduce_burst
            for r in range(args.allreduce_reps + 2):  # 2 unrecorded warm-up bursts each
                for which in (0, 1) if r % 2 else (1, 0):  # alternate which of the two goes first
                    barrier()
                    t0 = time.perf_counter()
                    for _ in range(burst):
                        if which == 0:
                            dist.all_reduce(flat)
                        else:
                            dp.sync_grads(params)
                    dt = (time.perf_counter() - t0) / burst
                    if r >= 2:
                        (bare if which == 0 else ours).append(dt)
        dp.take_comm_s()
        peer = {"bare_s": bare, "sync_grads_s": ours}
    per_rank = [None] * world
    if world > 1:
        dist.all_gather_object(per_rank, [u["update_s"] for u in updates])
    else:
        per_rank = [[u["update_s"] for u in updates]]
    if rank == 0:
        out = {
            "workload": args.workload,
            "world": world,
            "strategy": args.strategy if world > 1 else "single",
            "grad_numel": grad_numel,
            "grad_bytes": grad_numel * 4,
            "updates": updates,
            "update_s_per_rank": per_rank,
            "peer": peer,
        }
        Path(args.out).write_text(json.dumps(out) + "\n")
    dp.close()


# -- the parent -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_config(
    workload: str, world: int, strategy: str, threads: int, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """Run ``world`` ranks of one configuration as subprocesses; rank 0's report."""
    out = tmp / f"{workload}-{world}-{strategy}-{threads}-{time.monotonic_ns()}.json"
    port = _free_port()
    env = {**os.environ, **THREAD_ENV, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, str(Path(__file__).resolve())]
    common = ["--world", str(world), "--port", str(port), "--workload", workload, "--strategy", strategy]
    common += ["--updates", str(args.updates), "--warmup", str(args.warmup), "--out", str(out)]
    common += ["--threads", str(threads)]
    common += ["--allreduce-reps", str(args.allreduce_reps), "--allreduce-burst", str(args.allreduce_burst)]
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [*cmd, "--rank", str(r), *common],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    logs = []
    for r, p in enumerate(procs):
        try:
            text, _ = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            text, _ = p.communicate()
        logs.append(f"rank {r} (exit {p.returncode}):\n{text}")
    if any(p.returncode != 0 for p in procs) or not out.exists():
        sys.exit(f"{workload}, {label(world, strategy, threads)} failed:\n" + "\n".join(logs))
    res = json.loads(out.read_text())
    res["process_s"] = time.perf_counter() - t0
    return res


def _stats(values: list[float | None]) -> dict[str, float | None]:
    xs = [v for v in values if v is not None]
    if not xs:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def summarise(runs: dict[tuple[str, int, str, int], list[dict[str, Any]]]) -> dict[str, Any]:
    rows, peers, details = [], [], []
    for (workload, world, strategy, threads), reps in runs.items():
        updates = [u for r in reps for u in r["updates"]]
        s = {
            k: _stats([u[k] for u in updates]) for k in ("update_s", "compute_s", "allreduce_s", "publish_s")
        }
        s["total_s"] = _stats([u["total_s"] for u in updates])
        steps = int(statistics.median(u["optimizer_steps"] for u in updates))
        ar = s["allreduce_s"]["median"]
        rank_medians = [
            statistics.median(x for r in reps for x in r["update_s_per_rank"][i]) for i in range(world)
        ]
        rows.append(
            {
                "workload": workload,
                "config": label(world, strategy, threads),
                "grad MB": round(reps[0]["grad_bytes"] / 1e6, 3),
                "timed updates": len(updates),
                "update s": round(s["update_s"]["median"], 4),
                "update s range": f"{s['update_s']['min']:.3f} to {s['update_s']['max']:.3f}",
                "compute s": round(s["compute_s"]["median"], 4),
                "all-reduce s": None if ar is None else round(ar, 4),
                "all-reduce s range": (
                    None if ar is None else f"{s['allreduce_s']['min']:.4f} to {s['allreduce_s']['max']:.4f}"
                ),
                "optimizer steps": steps,
                "all-reduce ms/step": None if ar is None else round(1e3 * ar / steps, 3),
                "publish ms": round(1e3 * s["publish_s"]["median"], 2),
                "publish ms range": f"{1e3 * s['publish_s']['min']:.2f} to {1e3 * s['publish_s']['max']:.2f}",
                "total s": round(s["total_s"]["median"], 4),
                "rank 1 update s": round(rank_medians[1], 4) if world > 1 else None,
            }
        )
        details.append(
            {
                "workload": workload,
                "world": world,
                "strategy": strategy if world > 1 else "single",
                "threads": threads,
                "grad_numel": reps[0]["grad_numel"],
                "stats": s,
                "updates": [r["updates"] for r in reps],
                "update_s_per_rank": [r["update_s_per_rank"] for r in reps],
                "process_s": [round(r["process_s"], 2) for r in reps],
            }
        )
        peer = [r["peer"] for r in reps if r.get("peer")]
        if peer:
            bare_all = [x for p in peer for x in p["bare_s"]]
            ours_all = [x for p in peer for x in p["sync_grads_s"]]
            nbytes = reps[0]["grad_bytes"]
            in_update = 1e3 * ar / steps if ar is not None else None
            for stat, f in (("median", statistics.median), ("best", min)):
                bare, ours = f(bare_all), f(ours_all)
                peers.append(
                    {
                        "workload": workload,
                        "burst": stat,
                        "grad bytes": nbytes,
                        "bare all_reduce ms": round(1e3 * bare, 4),
                        "bare MB/s": round(nbytes / bare / 1e6, 1),
                        "sync_grads ms": round(1e3 * ours, 4),
                        "sync_grads MB/s": round(nbytes / ours / 1e6, 1),
                        "sync_grads / bare bandwidth": round(bare / ours, 3),
                        "in-update ms/step": None if in_update is None else round(in_update, 4),
                        "bursts": len(bare_all),
                    }
                )
            details[-1]["peer"] = peer
    return {"rows": rows, "peers": peers, "details": details}


def print_tables(summary: dict[str, Any]) -> None:
    head = (
        f"{'workload':>8} {'config':>17} {'grad MB':>8} {'update s (min-max)':>24} {'compute s':>10} "
        f"{'all-red s':>10} {'ms/step':>8} {'publish ms':>11} {'total s':>8} {'rank1 s':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in summary["rows"]:
        print(
            f"{r['workload']:>8} {r['config']:>17} {r['grad MB']:>8.3f} "
            f"{fmt(r['update s'], '.3f'):>7} ({r['update s range']:>14}) {fmt(r['compute s'], '.3f'):>10} "
            f"{fmt(r['all-reduce s'], '.4f'):>10} {fmt(r['all-reduce ms/step'], '.3f'):>8} "
            f"{fmt(r['publish ms'], '.2f'):>11} {fmt(r['total s'], '.3f'):>8} {fmt(r['rank 1 update s'], '.3f'):>8}"
        )
    if summary["peers"]:
        print()
        head = (
            f"{'workload':>8} {'burst':>6} {'grad bytes':>11} {'bare ms':>9} {'bare MB/s':>10} {'sync_grads ms':>14} "
            f"{'sync MB/s':>10} {'ratio':>6} {'in-update ms/step':>18}"
        )
        print(head)
        print("-" * len(head))
        for p in summary["peers"]:
            print(
                f"{p['workload']:>8} {p['burst']:>6} {p['grad bytes']:>11,} {p['bare all_reduce ms']:>9.3f} {p['bare MB/s']:>10.1f} "
                f"{p['sync_grads ms']:>14.3f} {p['sync_grads MB/s']:>10.1f} {p['sync_grads / bare bandwidth']:>6.2f} "
                f"{fmt(p['in-update ms/step'], '.3f'):>18}"
            )


NOTES = [
    "What 2 shared cores can show: each rank is one process with one torch thread, so 2 ranks use both "
    "cores and nothing is left for the OS, the Gloo I/O threads or other jobs on this machine (the "
    "load average is recorded). The fair single-process baseline on the same 2 cores is '1 rank, 2 "
    "threads'. Whether the second rank pays off depends on how much of a step is arithmetic: these "
    "models are small enough that much of a step is per-call overhead (Python, kernel dispatch), which "
    "does not shrink when each rank takes half the minibatch, while every optimiser step adds a "
    "collective. What it cannot show: scaling beyond 2 ranks, a real network (Gloo runs over loopback "
    "here), NCCL, or ranks that do not share cores with each other's communication threads.",
    "update: wall time of one learner update on rank 0 (the ranks meet on a barrier first, and the update "
    "ends in collectives, so it is the group's time); compute = update - all-reduce. all-reduce: seconds "
    "in dp.sync_grads (DDP: one flat Gloo all-reduce per optimiser step), including the wait for the "
    "slower rank to reach it. FSDP reduce-scatters the gradients inside the backward and all-gathers the "
    "parameters in the forward (and the gradient-norm clip all-reduces), so its communication is part "
    "of compute and its all-reduce column is empty. publish: dp.state_dict(model), the full state dict a "
    "weight publish takes: on one rank or with DDP on the CPU this is model.state_dict() (references, no "
    "copy: microseconds); with FSDP it is a gather, a collective.",
    "PPO: 320 optimiser steps per update (10 epochs x 32 minibatches of 64) on a 64x64 actor-critic "
    "(36 KB of gradient): the all-reduce is latency-bound and paid 320 times; FSDP on this model is one "
    "unit (it has no blocks), so every step also all-gathers and reduce-scatters the whole model. LM: 2 "
    "optimiser steps per update (32 sequences, minibatches of 16) on a Qwen2 with 2.1 MB of gradient.",
    "Bare all-reduce peer (2 ranks, the DDP run's group, after its updates): dist.all_reduce of one "
    "preallocated float32 tensor of the gradient's size, against dp.sync_grads on the model's gradients "
    "(torch.cat of the gradients, the same all_reduce, a copy back), timed in alternating bursts of "
    "back-to-back calls after a barrier; seconds per call = burst seconds / calls. 'median' is the "
    "median burst, 'best' the fastest (closest to the cost without interference: on 2 busy cores single "
    "bursts range over 10x, from scheduling). Bandwidth = gradient bytes / seconds; ratio = bare seconds "
    "/ sync_grads seconds (1.0: no overhead over bare torch.distributed). 'in-update ms/step' is an "
    "update's all-reduce seconds over its optimiser steps (the straggler wait included).",
    "Medians and min-max over every timed update of every repeat; rank 1 update s: the median on rank 1.",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=5, help="timed updates per configuration run")
    ap.add_argument("--warmup", type=int, default=1, help="untimed updates first")
    ap.add_argument("--repeats", type=int, default=2, help="runs of every configuration (interleaved)")
    ap.add_argument("--allreduce-reps", type=int, default=20, help="timed bursts of each all-reduce peer")
    ap.add_argument("--allreduce-burst", type=int, default=5, help="back-to-back calls per timed burst")
    ap.add_argument("--workloads", type=str, default="ppo,lm", help="ppo,lm or one of them")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one configuration run may take")
    ap.add_argument(
        "--json", type=Path, default=None, help=f"write the figures here (default {DEFAULT_JSON})"
    )
    ap.add_argument("--no-json", action="store_true", help="write no JSON")
    # one rank of a configuration (the parent starts these)
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--workload", type=str, default="ppo", help=argparse.SUPPRESS)
    ap.add_argument("--strategy", type=str, default="ddp", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=str, default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None:
        rank_main(args)
        return

    t_start = time.perf_counter()
    info = machine(
        DISTS,
        threads="torch.set_num_threads(1), OMP_NUM_THREADS=1 in every rank process (2 in the '2 threads' row)",
    )
    workloads = [w for w in args.workloads.split(",") if w in WORKLOADS]
    runs: dict[tuple[str, int, str, int], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="learner_scaling_") as tmp:
        for rep in range(args.repeats):
            for workload in workloads:
                for world, strategy, threads in CONFIGS:
                    res = run_config(workload, world, strategy, threads, args, Path(tmp))
                    runs.setdefault((workload, world, strategy, threads), []).append(res)
                    us = [u["update_s"] for u in res["updates"]]
                    print(
                        f"[repeat {rep + 1}/{args.repeats}] {workload:>3} {label(world, strategy, threads):>17}: "
                        f"update median {statistics.median(us):.3f} s (process {res['process_s']:.0f} s)",
                        flush=True,
                    )
    summary = summarise(runs)
    print()
    print_tables(summary)
    info["load_at_end"] = os.getloadavg()
    wall = time.perf_counter() - t_start
    print(
        f"\nload average at start {info['load_at_start'][0]:.1f}, at end {info['load_at_end'][0]:.1f} "
        f"({os.cpu_count()} CPUs); took {wall:.0f} s"
    )
    if args.no_json:
        return
    import torch

    info["torch"] = torch.__version__
    path = args.json or DEFAULT_JSON
    cmd = "uv run python benchmarks/learner_scaling.py" + (
        " " + shlex.join(sys.argv[1:]) if sys.argv[1:] else ""
    )
    report = {
        "title": "Learner update on 1 and 2 data-parallel ranks (DDP, FSDP) over Gloo on 2 CPU cores",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            **info,
            "load_at_start": [round(x, 2) for x in info["load_at_start"]],
            "load_at_end": [round(x, 2) for x in info["load_at_end"]],
        },
        "conditions": (
            f"load average {info['load_at_start'][0]:.1f} at the start, {info['load_at_end'][0]:.1f} at the "
            f"end; {args.repeats} repeat(s) x ({args.warmup} warm-up + {args.updates} timed updates) per "
            f"configuration, {args.allreduce_reps} all-reduce bursts of {args.allreduce_burst} calls; one torch thread per rank; "
            "2-core machine shared with other jobs"
        ),
        "command": cmd,
        "seeds": [3, 7],
        "figures": {
            "updates": summary["rows"],
            "all-reduce against bare torch.distributed": summary["peers"],
        },
        "source": "benchmarks/learner_scaling.py",
        "notes": NOTES,
        "settings": {
            "ppo": {"spec": PPO_SPEC, "T": PPO_T, "N": PPO_N, "minibatch_size": 64, "update_epochs": 10},
            "lm": {**LM, "batch": LM_BATCH, "minibatch": LM_MINIBATCH, "lr": LM_LR, "clip": LM_CLIP},
            "updates": args.updates,
            "warmup": args.warmup,
            "repeats": args.repeats,
            "allreduce_reps": args.allreduce_reps,
            "allreduce_burst": args.allreduce_burst,
        },
        "details": summary["details"],
        "wall_s": round(wall, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

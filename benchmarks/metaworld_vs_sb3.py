"""PPO on MetaWorld (``reach-v3`` or ``push-v3``, state) through ``rlinf train`` and through
Stable-Baselines3's PPO on the same simulator, seeds side by side (issue 49).

Both sides drive MetaWorld in its own interpreter through rlinf's
:class:`~rlinf_algos.families.subproc.RemoteVectorEnv` (8 copies in one simulator process; SB3
gets it through ``_sb3.SameStepVecEnv``), with the same settings as
``examples/metaworld_reach.yaml``: 500 steps per env per update (4000 samples), minibatch 250, 10
epochs, lr 3e-4 decayed linearly, gamma 0.99, lambda 0.95, clip 0.2, no entropy bonus, value
coefficient 0.5, gradient clip 0.5, 128x128 tanh networks, observation and reward normalisation
(SB3: ``VecNormalize``), initial policy log-std ``model.log_std_init`` of the YAML (SB3:
``log_std_init``). rlinf trains for ``--steps`` env steps; SB3 for ``--steps`` or the rlinf run's
wall time (``--wall`` seconds without an rlinf side), whichever comes first; both final policies
are then evaluated the same way, deterministic, 50 episodes from the task's 50 fixed initial
states (``rlinf eval --suite``'s protocol): ``success_at_end`` and ``success_once``
with 95 % Wilson intervals.

Usage::

    uv run --group bench python benchmarks/metaworld_vs_sb3.py --task reach-v3 --seeds 0,1,2 \\
        --steps 400000 --run-root RUNS --json benchmarks/results/metaworld_reach_vs_sb3.json
    # --reuse: report the rlinf runs already in RUN_ROOT/rlinf-TASK-sSEED (finished) instead of
    # training them again; --sb3-only / --rlinf-only: one side

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import finish, fmt, machine, success_eval

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "metaworld_reach.yaml"
EVAL_EPISODES = 50


def _remote(task: str, n: int, seed: int) -> Any:
    from rlinf_algos.envs import make_vector_env

    envs, _ = make_vector_env(task, n, seed, family="metaworld")
    return envs.unwrapped


def evaluate(act: Any, task: str, seed: int = 10_000) -> dict[str, Any]:
    """``act(obs [N, 39]) -> actions``, 50 episodes from the fixed initial states, 10 at a time."""
    seeds = [seed + e for e in range(EVAL_EPISODES)]
    return success_eval(_remote(task, 10, seed), act, seeds, inits=list(range(EVAL_EPISODES)))


def sb3_child(task: str, seed: int, steps: int, wall: float, out: str) -> None:
    """SB3 PPO in this process (see the module docstring); writes its figures to ``out``."""
    import torch
    from _sb3 import SameStepVecEnv, learn_within
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)

    import yaml

    log_std_init = float(yaml.safe_load(CONFIG.read_text())["model"].get("log_std_init", 0.0))
    venv = VecNormalize(SameStepVecEnv(_remote(task, 8, seed), seed), gamma=0.99)
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=500,
        batch_size=250,
        n_epochs=10,
        learning_rate=lambda f: 3e-4 * f,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs={"net_arch": [128, 128], "activation_fn": torch.nn.Tanh, "log_std_init": log_std_init},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    trained = learn_within(model, venv, steps, wall)
    res = {"env_steps": trained["env_steps"], "train_s": trained["train_s"], **evaluate(trained["act"], task)}
    venv.close()
    Path(out).write_text(json.dumps(res))


def rlinf_run(task: str, seed: int, steps: int, wall: float, run_dir: Path, reuse: bool) -> dict[str, Any]:
    if not (reuse and (run_dir / "summary.json").exists()):
        cfg = CONFIG
        subprocess.run(
            [
                "rlinf", "train", str(cfg), f"env.id={task}", f"runner.seed={seed}", f"runner.total_steps={steps}",
                "runner.scheduler=local", "--run-dir", str(run_dir),
            ],
            check=True,
            timeout=wall + 1800,
        )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    import torch

    import rlinf_algos

    torch.set_num_threads(1)  # one 10-row forward per step: more threads only contend on a busy machine
    policy = rlinf_algos.load_policy(run_dir)
    return {
        "env_steps": int(summary.get("total_env_steps", 0)),
        "train_s": float(summary.get("wall_s") or summary.get("train_s") or 0.0),
        **evaluate(lambda obs: policy.act(np.asarray(obs, np.float32)), task),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="reach-v3")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=400_000)
    p.add_argument("--wall", type=float, default=3600.0, help="seconds each side may train")
    p.add_argument("--run-root", type=Path, required=True)
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--sb3-only", action="store_true")
    p.add_argument("--rlinf-only", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--_sb3", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._sb3:
        sb3_child(args.task, int(args._sb3[0]), int(args._sb3[1]), float(args._sb3[2]), args._sb3[3])
        return
    t0 = time.perf_counter()
    args.run_root.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "title": f"PPO on MetaWorld {args.task} (state): rlinf vs Stable-Baselines3",
        "machine": machine(("rlinf-algos", "stable-baselines3", "torch")),
        "seeds": [int(s) for s in args.seeds.split(",")],
        "task": args.task,
        "rows": [],
    }
    for seed in report["seeds"]:
        row: dict[str, Any] = {"seed": seed}
        if not args.sb3_only:
            row["rlinf"] = rlinf_run(
                args.task,
                seed,
                args.steps,
                args.wall,
                args.run_root / f"rlinf-{args.task}-s{seed}",
                args.reuse,
            )
        if not args.rlinf_only:
            wall = row["rlinf"]["train_s"] if "rlinf" in row else args.wall  # equal wall time
            out = args.run_root / f"sb3-{args.task}-s{seed}.json"
            if not (args.reuse and out.exists()):
                subprocess.run(
                    [sys.executable, __file__, "--task", args.task, "--run-root", str(args.run_root),
                     "--_sb3", str(seed), str(args.steps), str(wall), str(out)],
                    check=True,
                    env={**os.environ, "OMP_NUM_THREADS": "1"},
                )  # fmt: skip
            row["sb3"] = json.loads(out.read_text())
        report["rows"].append(row)
        for side in ("rlinf", "sb3"):
            if side in row:
                r = row[side]
                print(
                    f"seed {seed} {side:<5}: {r['env_steps']:>7} steps in {fmt(r['train_s'])} s; success_at_end "
                    f"{r['success_at_end']['rate']:.2f} {fmt(r['success_at_end']['ci95'][0], '.2f')}-"
                    f"{fmt(r['success_at_end']['ci95'][1], '.2f')}, success_once {r['success_once']['rate']:.2f}"
                )
    for side in ("rlinf", "sb3"):
        rates = [r[side]["success_at_end"]["rate"] for r in report["rows"] if side in r]
        if rates:
            report[f"{side}_success_at_end_mean"] = float(np.mean(rates))
            report[f"{side}_success_at_end_std"] = float(np.std(rates))
            print(
                f"{side}: success_at_end {np.mean(rates):.3f} +- {np.std(rates):.3f} over {len(rates)} seeds"
            )
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

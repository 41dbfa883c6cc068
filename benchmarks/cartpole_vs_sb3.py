"""CartPole-v1 with PPO: rlinf (``examples/cartpole.yaml``) beside Stable-Baselines3 at the same settings.

Issue 41's first learning check: mean evaluation return at least 475 within 100k env steps on
every seed. Both sides train 100,000 env steps with RL Baselines3 Zoo's tuned CartPole settings
as the example holds them: 8 envs, 32 steps per env per update (256), one minibatch of 256,
20 epochs, lr 1e-3 decayed linearly to 0, gamma 0.98, GAE lambda 0.8, clip 0.2 (constant on
both sides; the zoo anneals it, rlinf has no clip schedule), no entropy bonus, no value
clipping, gradient norm 0.5, a 64x64 tanh MLP for actor and critic (orthogonal init), no
observation or reward normalisation. rlinf: ``rlinf train examples/cartpole.yaml
runner.seed=S`` in one process (``runner.scheduler: local``), through the Python entry point
the CLI uses. SB3: ``PPO("MlpPolicy", make_vec_env("CartPole-v1", 8, seed=S), ...)``.

Each side of each seed runs in a fresh interpreter with one torch thread, the sides
interleaved seed by seed. ``train_s`` is the training alone (env construction included,
imports not); then, untimed, each policy plays 20 episodes as ``rlinf eval`` does (episode
``i`` from a reset with seed ``10000 + i``, deterministic actions: the most likely one).

Usage::

    uv run --group bench python benchmarks/cartpole_vs_sb3.py [--seeds 0,1,2] [--json PATH]

Figures are printed, never asserted (the pass/fail check is the ``learning`` test in
``packages/rlinf-algos/tests/test_algos_action_spaces.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peers import child, run_peer, silent_sb3
from _report import finish, fmt, machine

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "cartpole.yaml"
TOTAL_STEPS = 100_000
EVAL_EPISODES = 20
EVAL_SEED = 10_000
TARGET = 475.0
DISTS = ("rlinf-algos", "stable-baselines3", "gymnasium", "torch")


def _rlinf(seed: int) -> dict[str, Any]:
    from rlinf_algos.evaluate import evaluate_policy
    from rlinf_algos.runtime.training import run_training

    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        summary = run_training(str(CONFIG), run_dir=Path(d) / "run", overrides=[f"runner.seed={seed}"])
        train_s = time.perf_counter() - t0
        ev = evaluate_policy(Path(d) / "run", episodes=EVAL_EPISODES, seed=EVAL_SEED, num_envs=8)
    return {
        "train_s": train_s,
        "env_steps": int(summary["total_env_steps"]),
        "eval_return": ev["return"]["mean"],
        "eval_std": ev["return"]["std"],
    }


def _sb3(seed: int) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    t0 = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = silent_sb3(
        PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            n_epochs=20,
            learning_rate=lambda frac: 1e-3 * frac,
            gamma=0.98,
            gae_lambda=0.8,
            clip_range=0.2,
            ent_coef=0.0,
            vf_coef=0.5,
            max_grad_norm=0.5,
            seed=seed,
            device="cpu",
            verbose=0,
        )
    )
    model.learn(TOTAL_STEPS)
    train_s = time.perf_counter() - t0
    returns = []
    ev = gym.make("CartPole-v1")
    for i in range(EVAL_EPISODES):
        obs, _ = ev.reset(seed=EVAL_SEED + i)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = ev.step(int(action))
            total += float(r)
            done = term or trunc
        returns.append(total)
    return {
        "train_s": train_s,
        "env_steps": int(model.num_timesteps),
        "eval_return": float(np.mean(returns)),
        "eval_std": float(np.std(returns)),
    }


TASKS = {"rlinf": _rlinf, "sb3": _sb3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        child(json.loads(args._child), TASKS)
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "title": "CartPole-v1 PPO, 100k env steps: rlinf beside Stable-Baselines3 at the same settings",
        "machine": machine(DISTS, torch_threads=1),
        "source": "benchmarks/cartpole_vs_sb3.py",
        "config": str(CONFIG.relative_to(ROOT)),
        "total_steps": TOTAL_STEPS,
        "eval": {"episodes": EVAL_EPISODES, "seed": EVAL_SEED, "deterministic": True},
        "seeds": seeds,
        "runs": {"rlinf": {}, "sb3": {}},
    }
    for seed in seeds:
        for peer in ("rlinf", "sb3"):
            out = run_peer(__file__, peer, [seed], threads=1, timeout=1800)
            report["runs"][peer][str(seed)] = out
            if "error" in out:
                print(f"{peer} seed {seed}: {out['error']}", file=sys.stderr)
            else:
                print(
                    f"{peer:5s} seed {seed}: eval return {out['eval_return']:.1f} +- {out['eval_std']:.1f} "
                    f"after {out['env_steps']:,} steps, train {out['train_s']:.0f} s (load {out['load_before']:.1f})"
                )
    figures = []
    for peer in ("rlinf", "sb3"):
        ok = [r for r in report["runs"][peer].values() if "error" not in r]
        row = {
            "peer": peer,
            "eval_return_per_seed": [round(r["eval_return"], 1) for r in ok],
            "eval_return_mean": round(statistics.mean(r["eval_return"] for r in ok), 1) if ok else None,
            "seeds_at_475": sum(r["eval_return"] >= TARGET for r in ok),
            "train_s_per_seed": [round(r["train_s"], 1) for r in ok],
            "train_s_median": round(statistics.median(r["train_s"] for r in ok), 1) if ok else None,
        }
        figures.append(row)
    report["figures"] = figures
    print(f"\n{'peer':6s} {'eval return per seed':28s} {'>= 475':>7s} {'train s per seed':24s} median s")
    for row in figures:
        print(
            f"{row['peer']:6s} {row['eval_return_per_seed']!s:28s} {row['seeds_at_475']:>4d}/{len(seeds)} "
            f"{row['train_s_per_seed']!s:24s} {fmt(row['train_s_median'], '.0f')}"
        )
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

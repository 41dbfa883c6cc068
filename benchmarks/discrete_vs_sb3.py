"""PPO on a discrete-action gymnasium task: rlinf's example beside Stable-Baselines3 at the same settings.

Issue 41's learning checks, with SB3 side by side:

- ``--env cartpole`` (``examples/cartpole.yaml``): CartPole-v1, mean evaluation return at least
  475 within 100k env steps on every seed (RL Baselines3 Zoo's tuned settings: 8 envs x 32
  steps, one minibatch of 256, 20 epochs, lr 1e-3 decayed linearly to 0, gamma 0.98, GAE 0.8).
- ``--env lunarlander`` (``examples/lunarlander.yaml``, needs the box2d extra): LunarLander-v3,
  mean evaluation return at least 200 within 1M env steps on every seed, in fewer wall-clock
  seconds than SB3 (the zoo's settings: 16 envs x 1024 steps, minibatches of 64, 4 epochs,
  lr 3e-4 constant, gamma 0.999, GAE 0.98, entropy 0.01; 61 updates, 999,424 env steps).

SB3's settings are read from the example's resolved config (with ``--set`` overrides), so the
two sides cannot drift apart: ``n_steps`` = ``algorithm.rollout_steps``, ``batch_size`` =
``minibatch_size``, ``n_epochs``, ``learning_rate`` (linear decay to 0 where ``anneal_lr``),
``gamma``, ``gae_lambda``, ``clip_range``, ``clip_range_vf`` = ``value_clip``, ``ent_coef``,
``vf_coef``, ``max_grad_norm``, ``target_kl``, ``normalize_advantage``, Adam's eps, and the
policy: separate actor and critic MLPs of ``model.hidden_sizes`` with ``model.activation``,
orthogonal init. Both train ``runner.total_steps`` env steps (to the last whole update) on
``env.num_envs`` copies stepped in the process (SB3's ``DummyVecEnv``; rlinf's
``env.vectorization``, and with ``--vectorization sync,async`` rlinf once per mode). rlinf:
``rlinf train CONFIG runner.seed=S`` in one process (``runner.scheduler: local``), through the
Python entry point the CLI uses. SB3: ``PPO("MlpPolicy", make_vec_env(ID, N, seed=S,
env_kwargs={"render_mode": None}), ...)``: without a render mode, as rlinf builds its envs
(``make_vec_env`` defaults to ``rgb_array``, with which LunarLander also simulates its engines'
particles as Box2D bodies, decoration that made SB3's training 5 times longer at 1M steps).

``train_cpu_s`` beside ``train_s``: the CPU seconds of the process (and its children) over the
same span; on a shared machine it moves less with the other jobs' load than the wall time.

Each side of each seed runs in a fresh interpreter with one torch thread, the sides
interleaved seed by seed. ``train_s`` is the training alone (env construction included,
imports not: ``torch._dynamo``, which torch imports on the first optimiser of a process, is
imported before the clock starts on both sides); then, untimed, each policy plays 20 episodes
as ``rlinf eval`` does (episode ``i`` from a reset with seed ``10000 + i``, deterministic
actions: the most likely one).

Usage::

    uv run --group bench python benchmarks/discrete_vs_sb3.py --env lunarlander [--seeds 0,1,2] [--json PATH]
    uv run --group bench python benchmarks/discrete_vs_sb3.py --env cartpole --quick

``--quick``: seed 0, three updates, 5 evaluation episodes (a smoke run; no learning figures).
Figures are printed, never asserted (the pass/fail checks are the ``learning`` tests in
``packages/rlinf-algos/tests/test_algos_action_spaces.py`` and ``test_algos_lunarlander.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peers import child, run_peer, silent_sb3
from _report import finish, fmt, machine, tree_cpu_s

ROOT = Path(__file__).resolve().parent.parent
EVAL_SEED = 10_000
DISTS = ("rlinf-algos", "stable-baselines3", "gymnasium", "torch", "box2d")
TASKS_BY_ENV = {
    "cartpole": {"config": "examples/cartpole.yaml", "target": 475.0, "budget": "100k"},
    "lunarlander": {"config": "examples/lunarlander.yaml", "target": 200.0, "budget": "1M"},
}


def _preimport() -> None:
    """What both sides would otherwise import inside the clock: torch's optimisers import
    ``torch._dynamo`` when the first one is built (seconds; more without a bytecode cache)."""
    import torch._dynamo  # noqa: F401


def resolved_config(config: str, overrides: list[str]) -> dict[str, Any]:
    """The example's config as ``rlinf train`` resolves it (defaults filled in)."""
    from rlinf_algos.training import dry_run

    return dry_run(str(ROOT / config), overrides=overrides)["config"]


def sb3_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    """Stable-Baselines3 ``PPO`` keyword arguments equal to the resolved rlinf ``cfg``; a
    ``ValueError`` names a setting SB3's PPO has no equivalent for here."""
    a, m = cfg["algorithm"], cfg["model"]
    unmatched = {
        "algorithm.normalize_obs": a["normalize_obs"],  # SB3 would need VecNormalize
        "algorithm.normalize_reward": a["normalize_reward"],
        "algorithm.dual_clip": a["dual_clip"] is not None,
        "algorithm.clip_high != clip_low": a["clip_high"] != a["clip_low"],
        "model.type": m["type"] != "mlp",
        "env.kwargs / env.wrappers / env.max_episode_steps": bool(
            cfg["env"]["kwargs"] or cfg["env"]["wrappers"] or cfg["env"]["max_episode_steps"]
        ),
    }
    bad = [k for k, v in unmatched.items() if v]
    if bad:
        raise ValueError(f"no SB3 equivalent here for {', '.join(bad)}: set them off for this benchmark")
    lr = float(a["lr"])
    return {
        "n_steps": a["rollout_steps"],
        "batch_size": a["minibatch_size"],
        "n_epochs": a["update_epochs"],
        "learning_rate": ("linear", lr) if a["anneal_lr"] else lr,
        "gamma": a["gamma"],
        "gae_lambda": a["gae_lambda"],
        "clip_range": a["clip_low"],
        "clip_range_vf": a["value_clip"],
        "ent_coef": a["ent_coef"],
        "vf_coef": a["vf_coef"],
        "max_grad_norm": a["max_grad_norm"] if a["max_grad_norm"] is not None else float("inf"),
        "target_kl": a["target_kl"],
        "normalize_advantage": a["normalize_advantages"],
        "policy_kwargs": {
            "net_arch": {"pi": list(m["hidden_sizes"]), "vf": list(m["hidden_sizes"])},
            "activation_fn": m["activation"],
            "ortho_init": m["ortho_init"],
            "optimizer_kwargs": {"eps": a["adam_eps"]},
        },
    }


def _rlinf(config: str, seed: int, overrides: list[str], episodes: int) -> dict[str, Any]:
    _preimport()
    from rlinf_algos.evaluate import evaluate_policy
    from rlinf_algos.training import run_training

    with tempfile.TemporaryDirectory() as d:
        t0, c0 = time.perf_counter(), tree_cpu_s(os.getpid())
        summary = run_training(
            str(ROOT / config), run_dir=Path(d) / "run", overrides=[*overrides, f"runner.seed={seed}"]
        )
        train_s, train_cpu_s = time.perf_counter() - t0, tree_cpu_s(os.getpid()) - c0
        ev = evaluate_policy(Path(d) / "run", episodes=episodes, seed=EVAL_SEED, num_envs=8)
    return {
        "train_s": train_s,
        "train_cpu_s": train_cpu_s,
        "env_steps": int(summary["total_env_steps"]),
        "eval_return": ev["return"]["mean"],
        "eval_std": ev["return"]["std"],
        "eval_returns": [round(float(r), 2) for r in ev["returns"]],
    }


def _sb3(
    env_id: str, num_envs: int, total: int, kwargs: dict[str, Any], seed: int, episodes: int
) -> dict[str, Any]:
    _preimport()
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from torch import nn

    kwargs = json.loads(json.dumps(kwargs))
    if isinstance(kwargs["learning_rate"], list):  # ("linear", lr): decayed to 0 over the run
        lr0 = kwargs["learning_rate"][1]
        kwargs["learning_rate"] = lambda frac: lr0 * frac
    kwargs["policy_kwargs"]["activation_fn"] = {"tanh": nn.Tanh, "relu": nn.ReLU}[
        kwargs["policy_kwargs"]["activation_fn"]
    ]
    t0, c0 = time.perf_counter(), tree_cpu_s(os.getpid())
    # render_mode None, as rlinf's envs: make_vec_env's default, rgb_array, makes LunarLander
    # simulate its engine particles as Box2D bodies (5x the training time at 1M steps)
    env = make_vec_env(env_id, n_envs=num_envs, seed=seed, env_kwargs={"render_mode": None})
    model = silent_sb3(PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs))
    model.learn(total)
    train_s, train_cpu_s = time.perf_counter() - t0, tree_cpu_s(os.getpid()) - c0
    returns = []
    ev = gym.make(env_id)
    for i in range(episodes):
        obs, _ = ev.reset(seed=EVAL_SEED + i)
        total_r, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = ev.step(int(action))
            total_r += float(r)
            done = term or trunc
        returns.append(total_r)
    return {
        "train_s": train_s,
        "train_cpu_s": train_cpu_s,
        "env_steps": int(model.num_timesteps),
        "eval_return": float(np.mean(returns)),
        "eval_std": float(np.std(returns)),
        "eval_returns": [round(r, 2) for r in returns],
    }


TASKS = {"rlinf": _rlinf, "sb3": _sb3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(TASKS_BY_ENV), default="cartpole")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--vectorization",
        default=None,
        help="rlinf's env.vectorization, comma-separated to run rlinf once per mode (default: the example's)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override of the example (both sides)",
    )
    parser.add_argument("--quick", action="store_true", help="seed 0, three updates, 5 evaluation episodes")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._child:
        child(json.loads(args._child), TASKS)
        return
    task = TASKS_BY_ENV[args.env]
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    overrides = list(args.set)
    cfg = resolved_config(task["config"], overrides)
    budget = task["budget"] if not overrides else f"{cfg['runner']['total_steps']:,}"
    if args.quick:
        overrides.append(
            f"runner.total_steps={3 * cfg['algorithm']['rollout_steps'] * cfg['env']['num_envs']}"
        )
        cfg = resolved_config(task["config"], overrides)
        budget = f"{cfg['runner']['total_steps']:,}"
    episodes = 5 if args.quick else 20
    env_cfg = cfg["env"]
    own = env_cfg["vectorization"]
    modes = args.vectorization.split(",") if args.vectorization else [own]
    rlinf_peers = {("rlinf" if mode == own else f"rlinf_{mode}"): mode for mode in modes}
    try:
        kwargs = sb3_kwargs(cfg)
    except ValueError as err:
        sys.exit(f"error: {err}")
    total = int(cfg["runner"]["total_steps"])
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "title": (
            f"{env_cfg['id']} PPO, {budget} env steps: rlinf beside Stable-Baselines3 at the same settings"
        ),
        "machine": machine(DISTS, torch_threads=1),
        "source": f"benchmarks/discrete_vs_sb3.py --env {args.env}",
        "config": task["config"],
        "overrides": overrides,
        "total_steps": total,
        "sb3_kwargs": kwargs,
        "eval": {"episodes": episodes, "seed": EVAL_SEED, "deterministic": True},
        "seeds": seeds,
        "runs": {peer: {} for peer in [*rlinf_peers, "sb3"]},
    }
    for seed in seeds:
        for peer in [*rlinf_peers, "sb3"]:
            if peer == "sb3":
                call = [env_cfg["id"], env_cfg["num_envs"], total, kwargs, seed, episodes]
            else:
                call = [
                    task["config"],
                    seed,
                    [*overrides, f"env.vectorization={rlinf_peers[peer]}"],
                    episodes,
                ]
            out = run_peer(__file__, "sb3" if peer == "sb3" else "rlinf", call, threads=1, timeout=3600)
            report["runs"][peer][str(seed)] = out
            if "error" in out:
                print(f"{peer} seed {seed}: {out['error']}", file=sys.stderr)
            else:
                print(
                    f"{peer:11s} seed {seed}: eval return {out['eval_return']:7.1f} +- {out['eval_std']:5.1f} "
                    f"after {out['env_steps']:,} steps, train {out['train_s']:.0f} s, {out['train_cpu_s']:.0f} CPU s "
                    f"(load {out['load_before']:.1f})",
                    flush=True,
                )
    report["figures"] = figures(report, seeds, task["target"])
    columns = list(dict.fromkeys(c for row in report["figures"] for c in row))

    def cell(x: Any) -> str:
        return fmt(x, ".1f") if isinstance(x, float) or x is None else str(x)

    table = [columns, *([cell(row.get(c)) for c in columns] for row in report["figures"])]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    print()
    for line in table:
        print("  ".join(v.rjust(w) for v, w in zip(line, widths, strict=True)))
    finish(report, t0, args.json)


def figures(report: dict[str, Any], seeds: list[int], target: float) -> list[dict[str, Any]]:
    """One row per seed: each peer's evaluation return, training wall seconds and CPU seconds,
    and SB3's seconds over each rlinf peer's (above 1: rlinf took fewer); then ``all``: the mean
    return, the seeds at ``target``, the median seconds and the ratio of the medians."""
    runs = report["runs"]
    peers = list(runs)
    rlinf_peers = [p for p in peers if p != "sb3"]

    def r1(x: float | None) -> float | None:
        return None if x is None else round(x, 1)

    rows: list[dict[str, Any]] = []
    for seed in [*seeds, "all"]:
        row: dict[str, Any] = {"seed": seed}
        got: dict[str, dict[str, float]] = {}
        for peer in peers:
            if seed == "all":
                ok = [r for r in runs[peer].values() if "error" not in r]
                got[peer] = (
                    {
                        "return": statistics.mean(r["eval_return"] for r in ok),
                        "train_s": statistics.median(r["train_s"] for r in ok),
                        "cpu_s": statistics.median(r["train_cpu_s"] for r in ok),
                    }
                    if ok
                    else {}
                )
                row[f"{peer}_seeds_at_target"] = f"{sum(r['eval_return'] >= target for r in ok)}/{len(seeds)}"
            else:
                r = runs[peer].get(str(seed), {})
                got[peer] = (
                    {"return": r["eval_return"], "train_s": r["train_s"], "cpu_s": r["train_cpu_s"]}
                    if "error" not in r and r
                    else {}
                )
        for key in ("return", "train_s", "cpu_s"):
            for peer in peers:
                row[f"{peer}_{key}"] = r1(got[peer].get(key))
        for peer in rlinf_peers:
            for key in ("train_s", "cpu_s"):
                a, b = got["sb3"].get(key), got[peer].get(key)
                row[f"sb3_over_{peer}_{key}"] = round(a / b, 2) if a and b else None
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()

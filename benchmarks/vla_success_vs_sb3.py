"""Success at equal wall time on rlinf/FrankaInstructReach-v0: Stable-Baselines3 beside rlinf.

Issue 21's last comparison. rlinf's side is ``examples/vla_franka_reach.yaml`` as committed,
trained with ``rlinf train`` and evaluated with ``rlinf eval RUN --episodes 50 --seed 100000``;
its figures (success and the run's whole wall time, warm start included) come from
``benchmarks/results/vla_franka_reach_success.json`` (``--rlinf-record``), which records those
commands per seed.

SB3's side, run here: ``PPO("MultiInputPolicy")`` on a ``DummyVecEnv`` of 16 copies of the same
env with the example's cameras (``table`` and ``wrist``, 64x64 each: SB3's ``CombinedExtractor``
puts a NatureCNN on each image key) and the example's PPO settings (100 steps per env per
iteration, minibatches of 400, 4 epochs, lr 3e-4, no entropy bonus; ``benchmarks/vla_pixels.py``
for the rest), with ``VecNormalize`` on ``state`` and on rewards. It trains until its wall-clock
budget (``--budget-s``, default: the median whole-run time of rlinf's seeds in the record) is
spent, counted from the start of its process's work (env construction included, imports not).
Then, untimed, it is evaluated as ``rlinf eval`` evaluates: 50 episodes, episode ``i`` from a
reset with seed ``100000 + i``, deterministic actions (the Gaussian's mean), ``success_at_end``
(``info["success"]`` at the episode's last step) and ``success_once``.

What SB3 does not get, and why:

- the env's ``privileged`` entry (the target's position): rlinf reads it only in its perception
  loss and warm start, never as a policy input. SB3 has no such auxiliary loss; putting the
  position into its observation would hand it the answer, so its env is built without it.
- the instruction as text: SB3 cannot take a ``Text`` space, so it gets a one-hot of the colour
  the instruction names (``vla_pixels._instruction_one_hot``), the parsed answer rlinf's policy
  must learn from words.

SB3 is one process and, with one torch thread, keeps about one core busy (``cores`` in
``vla_pixels.py``'s table); rlinf's distributed runner uses both. ``--jobs 2`` (the default)
trains two SB3 seeds at once, one per core, so each has the core it would use alone; each
seed's env-steps/s is reported so that this can be checked against ``vla_pixels.py``'s
single-run figure.

Usage::

    MUJOCO_GL=egl uv run --group bench python benchmarks/vla_success_vs_sb3.py [--seeds 0,1,2]
        [--budget-s S] [--jobs 2] [--json PATH]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _peers import run_peer
from _report import finish, fmt, machine
from vla_pixels import BATCH, DISTS, ENV_ID, _instruction_one_hot, _prepare_gl, _sb3_ppo

CAMERAS = ["table", "wrist"]  # examples/vla_franka_reach.yaml's env.kwargs.cameras
EVAL_EPISODES = 50
EVAL_SEED = 100_000
RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_RECORD = RESULTS / "vla_franka_reach_success.json"
DEFAULT_JSON = RESULTS / "vla_success_vs_sb3.json"


def evaluate_sb3(model: Any, episodes: int, seed: int) -> dict[str, Any]:
    """``rlinf eval``'s protocol for an SB3 model: episode ``i`` from ``reset(seed=seed + i)``,
    the mean action, the observation normalised with the training run's frozen statistics; the
    rates computed by ``rlinf eval``'s own :func:`~rlinf_algos.evaluate.summarize_episodes`."""
    import gymnasium as gym
    import numpy as np

    from rlinf_algos.evaluate import summarize_episodes

    venv = model.get_env()  # the VecNormalize around the training envs
    venv.training = False
    env = gym.make(ENV_ID, cameras=CAMERAS)  # raw observations: the instruction as text
    one_hot = _instruction_one_hot(env)  # what SB3 trained on: .observation(raw)
    per_episode: list[dict[str, Any]] = []
    try:
        for i in range(episodes):
            raw, _ = env.reset(seed=seed + i)
            ep = {
                "episode": i,
                "seed": seed + i,
                "instruction": str(raw["instruction"]),
                "return": 0.0,
                "length": 0,
                "success_once": False,
                "success_at_end": False,
            }
            done = False
            while not done:
                obs = one_hot.observation(raw)
                batched = {k: np.asarray(v)[None] for k, v in obs.items()}
                action, _ = model.predict(venv.normalize_obs(batched), deterministic=True)
                raw, reward, term, trunc, info = env.step(action[0])
                ep["return"] += float(reward)
                ep["length"] += 1
                ep["success_at_end"] = bool(info.get("success", False))
                ep["success_once"] = ep["success_once"] or ep["success_at_end"]
                done = bool(term or trunc)
            per_episode.append(ep)
    finally:
        env.close()
    summary = summarize_episodes(per_episode, seed)
    return {
        "episodes": episodes,
        "eval_seed": seed,
        "success_at_end": summary["success_at_end"],
        "success_once": summary["success_once"],
        "return_mean": summary["return"]["mean"],
        "per_episode": per_episode,
    }


def peer_sb3_budget(budget_s: float, seed: int, episodes: int, eval_seed: int) -> dict[str, Any]:
    """Train SB3's PPO on the example's env until ``budget_s`` wall seconds have passed (checked
    after every env step), then evaluate it (untimed)."""
    from stable_baselines3.common.callbacks import BaseCallback

    _prepare_gl()
    t_begin = time.perf_counter()

    class Budget(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[float, int]] = []

        def _on_rollout_end(self) -> None:
            self.curve.append((round(time.perf_counter() - t_begin, 1), int(self.num_timesteps)))

        def _on_step(self) -> bool:
            return time.perf_counter() - t_begin < budget_s

    model = _sb3_ppo(seed, {"cameras": CAMERAS})
    budget = Budget()
    model.learn(10**9, callback=budget)
    train_s = time.perf_counter() - t_begin
    steps = int(model.num_timesteps)
    result = evaluate_sb3(model, episodes, eval_seed)
    return {
        "seed": seed,
        "budget_s": budget_s,
        "train_s": train_s,
        "env_steps": steps,
        "iterations": steps // BATCH,
        "sps": steps / train_s,
        "rollouts_at": budget.curve,
        "parameters": sum(p.numel() for p in model.policy.parameters()),
        **result,
    }


TASKS = {"sb3_budget": peer_sb3_budget}


def rlinf_rows(record: Path) -> list[dict[str, Any]]:
    """The per-seed rows of rlinf's success record (the example as committed, where recorded)."""
    data = json.loads(record.read_text())
    rows = []
    for fig in data["figures"]:
        rows.append(
            {
                "seed": fig["seed"],
                "run": fig.get("run"),
                "wall_s": fig["wall_s"],
                "env_steps": fig.get("env_steps"),
                "success_at_end": fig["success_at_end"],
                "success_once": fig["success_once"],
                "return_mean": fig.get("return_mean"),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2", help="SB3 training seeds (default 0,1,2)")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="SB3's wall-clock budget per seed (default: median rlinf run time in --rlinf-record)",
    )
    ap.add_argument("--jobs", type=int, default=2, help="SB3 seeds trained at once (default 2, one per core)")
    ap.add_argument("--episodes", type=int, default=EVAL_EPISODES)
    ap.add_argument("--eval-seed", type=int, default=EVAL_SEED)
    ap.add_argument("--rlinf-record", type=Path, default=DEFAULT_RECORD)
    ap.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"write the figures here (default {DEFAULT_JSON})"
    )
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        from _peers import child

        child(json.loads(args._child), TASKS)
        return {}
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    rlinf = rlinf_rows(args.rlinf_record)
    budget = args.budget_s or statistics.median(r["wall_s"] for r in rlinf)
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "title": "Issue 21: success at equal wall time on FrankaInstructReach, rlinf's example beside SB3 PPO",
        "machine": machine(DISTS, threads=1, jobs=args.jobs),
        "seeds": seeds,
        "budget_s": budget,
        "evaluation": f"{args.episodes} episodes, reset seeds {args.eval_seed}..{args.eval_seed + args.episodes - 1}, "
        "deterministic actions (rlinf eval RUN --episodes 50 --seed 100000)",
    }
    print(
        f"SB3 PPO on {ENV_ID} (cameras {CAMERAS}), {budget:.0f} s per seed, seeds {seeds}, {args.jobs} at once"
    )

    def one(seed: int) -> dict[str, Any]:
        r = run_peer(
            __file__,
            "sb3_budget",
            [budget, seed, args.episodes, args.eval_seed],
            1,
            budget + 1800,
            {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"},
        )
        status = (
            r["error"].splitlines()[0]
            if "error" in r
            else (f"{r['env_steps']} steps ({r['sps']:.0f}/s), success_at_end {r['success_at_end']:.2f}")
        )
        print(f"  SB3 seed {seed}: {status}", flush=True)
        return {"seed": seed, **r}

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        sb3 = list(pool.map(one, seeds))

    print(
        f"\n{'side':<6} {'seed':>4} {'wall s':>7} {'env steps':>9} {'success_at_end':>14} {'success_once':>12}"
    )
    for side, rows in (("rlinf", rlinf), ("SB3", sb3)):
        for r in rows:
            print(
                f"{side:<6} {r['seed']:>4} {fmt(r.get('train_s', r.get('wall_s'))):>7} "
                f"{fmt(r.get('env_steps')):>9} {fmt(r.get('success_at_end'), '.2f'):>14} "
                f"{fmt(r.get('success_once'), '.2f'):>12}"
            )
    ok = [r for r in sb3 if "error" not in r]
    report["figures"] = [{"side": "rlinf", **r} for r in rlinf] + [
        {"side": "sb3", **{k: v for k, v in r.items() if k not in ("per_episode", "rollouts_at")}}
        for r in sb3
    ]
    report["sb3_rollouts_at (wall s, env steps)"] = {r["seed"]: r.get("rollouts_at") for r in ok}
    report["sb3_per_episode"] = {r["seed"]: r.get("per_episode") for r in ok}
    for side, rows in (("rlinf", rlinf), ("sb3", ok)):
        vals = [r["success_at_end"] for r in rows]
        if vals:
            report[f"{side}_success_at_end"] = {
                "mean": statistics.mean(vals),
                "min": min(vals),
                "max": max(vals),
            }
    report["source"] = f"rlinf: {args.rlinf_record.name}; SB3: this run"
    return finish(report, t0, None if args.no_json else args.json)


if __name__ == "__main__":
    main()

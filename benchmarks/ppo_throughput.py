"""PPO throughput on HalfCheetah-v5: rlinf beside Stable-Baselines3 and RLlib, one run, one machine.

Part 1, training (end-to-end env-steps/s, rollout and update included): PPO with the same
hyperparameters for every peer:

==========================  ==================================================================
rollout                     8 envs x 256 steps = 2048 env steps per iteration (sync vector env)
update                      10 epochs of minibatches of 64 (320 gradient steps per iteration)
networks                    separate 64x64 tanh MLPs for the policy mean and the value;
                            state-independent log-std
optimiser                   Adam, lr 3e-4 (constant here), gamma 0.99, GAE lambda 0.95,
                            clip 0.2, value coef 0.5, entropy coef 0, gradient-norm clip 0.5
observations / rewards      running mean/std observation normalisation for all three; reward
                            scaling by the return's std for rlinf and SB3 (``VecNormalize``);
                            RLlib has no reward scaler on its new API stack
value clipping              0.2 around the old value for rlinf and SB3 (``clip_range_vf``);
                            RLlib clips the value loss instead (its default ``vf_clip_param``)
==========================  ==================================================================

Peers (``--peers``):

- ``rlinf``: ``rlinf_algos.training.run_training`` (env, rollout and actor workers over channels,
  what ``rlinf train`` runs; configured as ``examples/quickstart.yaml``: one node, env stepping
  in 2 pipeline stages, ``max_staleness: 1`` so the next rollout overlaps the update) when that
  module is installed; the in-process run (``runner.scheduler: local``: the same flow on the
  in-process scheduler, :mod:`rlinf_algos.runtime.inprocess`) is measured too, as
  ``rlinf_inprocess_sps``. Without the
  distributed runner, ``rlinf_sps`` is the in-process figure and the JSON says so
  (``rlinf_runner``).
- ``sb3``: ``stable_baselines3.PPO`` on a ``DummyVecEnv`` wrapped in ``VecNormalize``.
- ``rllib``: ``ray.rllib`` PPO on the new API stack (``RLModule``/``Learner``/``EnvRunner``),
  sampling and learning in the driver (``num_env_runners=0``, ``num_learners=0``: on a 2-core
  machine remote runners only add inter-process hops to a synchronous algorithm), with the
  ``MeanStdFilter`` connector.

Part 2, rollout only (env-steps/s of collecting PPO rollouts, no update):

- ``rlinf``: env and rollout workers exchanging observations and actions over their direct
  links (``run_training`` in rollout-only mode) when available; otherwise the same collection
  loop in process (``collect_ppo`` over a ``LocalPort``), labelled as such;
- ``bare``: one process, a gymnasium sync vector env stepped with the actions of a plain torch
  64x64 tanh actor (and the value head a PPO rollout needs): the floor of any rollout system.

Fairness: every peer runs in its own subprocess (so imports, thread pools and Ray do not
interfere), one at a time, with ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` and
``torch.set_num_threads`` pinned to ``--threads`` (default 1: fastest for MLPs this small on
a 2-core machine, and what rlinf's ``runner.torch_threads`` defaults to). Each peer runs
``--warmup`` iterations before the clock starts (first-call allocations, Ray start, worker
spawn and the first weight sync are not counted) and then ``--iterations`` timed ones;
``--repeats`` runs of every peer are interleaved and the median is reported.

Two figures per peer: ``env-steps/s`` (wall clock, the figure the targets are about) and
``steps/cpu-s``: the same steps over the CPU time of the peer's whole process tree (Ray's
processes included, read from ``/proc``). On a machine shared with other jobs the wall-clock
figure moves with their load, and a peer running several processes (rlinf's workers) gets a
larger share of a contended CPU than a single-process one; ``cores`` (CPU time / wall time) and
the 1-minute load average printed beside each figure show how far that went.

Part 3, ``--learning {ppo,sac,all}``: the learning comparisons live in ``benchmarks/learning.py``
(PPO with the tuned zoo settings over seeds, SAC rlinf vs SB3 at the same steps); this option
runs it, passing ``--seeds``, ``--learning-steps``/``--sac-steps`` and ``--json`` on.

Usage::

    uv run --group bench python benchmarks/ppo_throughput.py [--quick] [--json PATH]
    uv run --group bench python benchmarks/ppo_throughput.py --learning {ppo,sac,all}  # = learning.py

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from _peers import (
    Clock,
    child,
    median_runs,
    one_node_config,
    rlinf_distributed_parts,
    rlinf_inprocess,
    run_peer,
    silent_sb3,
    timed_collect,
)
from _report import finish, fmt, machine

DISTS = ("torch", "gymnasium", "mujoco", "stable-baselines3", "ray", "rlinf-algos")

ENV_ID = "HalfCheetah-v5"
NUM_ENVS = 8
ROLLOUT_STEPS = 256  # per env: 8 x 256 = 2048 env steps per iteration
BATCH = NUM_ENVS * ROLLOUT_STEPS
MINIBATCH = 64
EPOCHS = 10
HIDDEN = [64, 64]
LR = 3e-4
GAMMA, GAE_LAMBDA, CLIP, VF_COEF, ENT_COEF, MAX_GRAD_NORM = 0.99, 0.95, 0.2, 0.5, 0.0, 0.5

PEERS = ("rlinf", "sb3", "rllib")


# -- helpers used in the peer subprocesses -----------------------------------------------------


def _distributed_runner() -> Any | None:
    """``rlinf_algos.training.run_training`` when rlinf-algos is installed, else ``None``."""
    try:
        from rlinf_algos import training
    except ImportError:
        return None
    return getattr(training, "run_training", None)


def _rlinf_ppo_sections(total_steps: int, seed: int, anneal: bool) -> dict[str, Any]:
    return {
        "algorithm": {
            "name": "ppo",
            "lr": LR,
            "anneal_lr": anneal,
            "rollout_steps": ROLLOUT_STEPS,
            "minibatch_size": MINIBATCH,
            "update_epochs": EPOCHS,
            "gamma": GAMMA,
            "gae_lambda": GAE_LAMBDA,
            "clip_low": CLIP,
            "clip_high": CLIP,
            "value_clip": CLIP,
            "vf_coef": VF_COEF,
            "ent_coef": ENT_COEF,
            "max_grad_norm": MAX_GRAD_NORM,
        },
        "env": {"id": ENV_ID, "num_envs": NUM_ENVS},
        "model": {"hidden_sizes": HIDDEN, "activation": "tanh"},
        "runner": {"total_steps": total_steps, "seed": seed, "log_interval": BATCH, "torch_threads": 1},
    }


def _rlinf_distributed_config(sections: dict[str, Any]) -> dict[str, Any]:
    """As ``examples/quickstart.yaml``: 2 pipeline stages (1 for a single env), rollout ahead by 1."""
    return one_node_config(sections, 2 if sections["env"]["num_envs"] % 2 == 0 else 1)


# -- part 1: training throughput ---------------------------------------------------------------


def peer_rlinf_inprocess(warmup: int, iters: int, seed: int) -> dict[str, Any]:
    t_begin = time.perf_counter()
    return rlinf_inprocess(_rlinf_ppo_sections((warmup + iters) * BATCH, seed, anneal=False), warmup, t_begin)


def peer_rlinf_distributed(warmup: int, iters: int, rollout_iters: int, seed: int) -> dict[str, Any]:
    """``rlinf train``'s runner (:func:`_peers.rlinf_distributed_parts`): rollout only, then PPO."""
    if _distributed_runner() is None:
        raise RuntimeError("rlinf_algos.training.run_training is not installed")
    return rlinf_distributed_parts(
        lambda total: _rlinf_distributed_config(_rlinf_ppo_sections(total, seed, anneal=False)),
        BATCH,
        warmup,
        rollout_iters,
        iters,
    )


def _sb3_ppo(env_seed: int, lr: Any, vec_norm: bool = True) -> Any:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    venv = make_vec_env(ENV_ID, n_envs=NUM_ENVS, seed=env_seed, vec_env_cls=DummyVecEnv)
    if vec_norm:
        venv = VecNormalize(venv, gamma=GAMMA)
    return silent_sb3(
        PPO(
            "MlpPolicy",
            venv,
            learning_rate=lr,
            n_steps=ROLLOUT_STEPS,
            batch_size=MINIBATCH,
            n_epochs=EPOCHS,
            gamma=GAMMA,
            gae_lambda=GAE_LAMBDA,
            clip_range=CLIP,
            clip_range_vf=CLIP,
            ent_coef=ENT_COEF,
            vf_coef=VF_COEF,
            max_grad_norm=MAX_GRAD_NORM,
            policy_kwargs={"net_arch": {"pi": HIDDEN, "vf": HIDDEN}, "activation_fn": torch.nn.Tanh},
            device="cpu",
            seed=env_seed,
            verbose=0,
        )
    )


def peer_sb3(warmup: int, iters: int, seed: int) -> dict[str, Any]:
    from stable_baselines3.common.callbacks import BaseCallback

    class Timer(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.rollout = self.update = 0.0
            self.t_start = self.t_end = None

        def _on_rollout_start(self) -> None:
            now = time.perf_counter()
            if self.t_end is not None:
                self.update += now - self.t_end
            self.t_start = now

        def _on_rollout_end(self) -> None:
            self.t_end = time.perf_counter()
            self.rollout += self.t_end - self.t_start

        def _on_step(self) -> bool:
            return True

    t_begin = time.perf_counter()
    model = _sb3_ppo(seed, LR)
    model.learn(warmup * BATCH)
    clock = Clock()
    clock.mark(0)
    timer = Timer()
    model.learn(iters * BATCH, reset_num_timesteps=False, callback=timer)
    clock.mark(iters * BATCH)
    timer.update += clock.marks[-1][0] - (timer.t_end or clock.marks[0][0])
    return {
        **clock.result(0, t_begin),
        "rollout_fraction": timer.rollout / (timer.rollout + timer.update),
    }


def _rllib_ppo(seed: int, lr: Any) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    config = (
        PPOConfig()
        .environment(ENV_ID)
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=NUM_ENVS,
            rollout_fragment_length=ROLLOUT_STEPS,
            env_to_module_connector=lambda env, spaces, device: MeanStdFilter(),
        )
        .learners(num_learners=0)
        .training(
            train_batch_size_per_learner=BATCH,
            minibatch_size=MINIBATCH,
            num_epochs=EPOCHS,
            lr=lr,
            gamma=GAMMA,
            lambda_=GAE_LAMBDA,
            clip_param=CLIP,
            vf_loss_coeff=VF_COEF,
            entropy_coeff=ENT_COEF,
            grad_clip=MAX_GRAD_NORM,
            grad_clip_by="global_norm",
            use_kl_loss=False,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=HIDDEN, fcnet_activation="tanh", vf_share_layers=False
            )
        )
        .debugging(seed=seed, log_level="ERROR")
    )
    return config.build_algo()


def _ray_init() -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")


def peer_rllib(warmup: int, iters: int, seed: int) -> dict[str, Any]:
    import ray
    import torch

    t_begin = time.perf_counter()
    _ray_init()
    clock = Clock()
    try:
        algo = _rllib_ppo(seed, LR)
        for _ in range(warmup):
            algo.train()
        clock.mark(0)
        steps = 0
        for _ in range(iters):
            result = algo.train()
            steps += int(result["env_runners"]["num_env_steps_sampled"])
        clock.mark(steps)
        algo.stop()
    finally:
        ray.shutdown()
    return {**clock.result(0, t_begin), "torch_threads_after_build": torch.get_num_threads()}


# -- part 2: rollout only ----------------------------------------------------------------------


def peer_bare_rollout(warmup: int, iters: int, seed: int) -> dict[str, Any]:
    """A gymnasium sync vector env and a plain torch 64x64 tanh Gaussian actor plus value head,
    in one loop: step, forward, sample, step. Nothing stored, nothing normalised."""
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn

    envs = gym.make_vec(ENV_ID, num_envs=NUM_ENVS, vectorization_mode="sync")
    obs, _ = envs.reset(seed=seed)
    d, a = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    low, high = envs.single_action_space.low, envs.single_action_space.high
    actor = nn.Sequential(nn.Linear(d, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, a))
    critic = nn.Sequential(nn.Linear(d, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    log_std = torch.zeros(a)
    torch.manual_seed(seed)

    def run(n: int) -> None:
        nonlocal obs
        with torch.no_grad():
            for _ in range(n):
                o = torch.from_numpy(obs.astype(np.float32, copy=False))
                mean = actor(o)
                critic(o)
                act = mean + torch.randn_like(mean) * log_std.exp()
                obs, *_ = envs.step(np.clip(act.numpy(), low, high))

    t_begin = time.perf_counter()
    run(warmup * ROLLOUT_STEPS)
    clock = Clock()
    clock.mark(0)
    run(iters * ROLLOUT_STEPS)
    clock.mark(iters * BATCH)
    envs.close()
    return clock.result(0, t_begin)


def peer_rlinf_rollout_inprocess(warmup: int, iters: int, seed: int) -> dict[str, Any]:
    from rlinf_algos.envs import VectorEnvStepper
    from rlinf_algos.models.mlp import GaussianActorCritic

    t_begin = time.perf_counter()
    stepper = VectorEnvStepper(ENV_ID, NUM_ENVS, seed)
    model = GaussianActorCritic(stepper.obs_dim, stepper.act_dim, HIDDEN, "tanh")
    return timed_collect(stepper, model, warmup, iters, ROLLOUT_STEPS, BATCH, seed, t_begin)


TASKS = {
    "dist:rlinf": peer_rlinf_distributed,
    "train:rlinf_inprocess": peer_rlinf_inprocess,
    "train:sb3": peer_sb3,
    "train:rllib": peer_rllib,
    "rollout:rlinf_inprocess": peer_rlinf_rollout_inprocess,
    "rollout:bare": peer_bare_rollout,
}


ROWS = (
    "train:rlinf",
    "train:rlinf_inprocess",
    "train:sb3",
    "train:rllib",
    "rollout:rlinf",
    "rollout:rlinf_inprocess",
    "rollout:bare",
)


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    distributed = _distributed_runner() is not None
    train_iters = 0 if args.only_rollout else args.iterations
    roll_iters = args.rollout_iterations if args.rollout else 0
    # (task, arguments, the rows its result fills)
    plan: list[tuple[str, list[Any], tuple[str, ...]]] = []
    if "rlinf" in args.peers:
        if distributed:
            rows = (("train:rlinf",) if train_iters else ()) + (("rollout:rlinf",) if roll_iters else ())
            plan.append(("dist:rlinf", [args.warmup, train_iters, roll_iters], rows))
        # the in-process rows are extras beside the distributed runner; --quick skips them then
        if train_iters and not (distributed and args.quick):
            plan.append(("train:rlinf_inprocess", [args.warmup, train_iters], ("train:rlinf_inprocess",)))
        if roll_iters and not (distributed and args.quick):
            plan.append(("rollout:rlinf_inprocess", [args.warmup, roll_iters], ("rollout:rlinf_inprocess",)))
    for peer in ("sb3", "rllib"):
        if peer in args.peers and train_iters:
            plan.append((f"train:{peer}", [args.warmup, train_iters], (f"train:{peer}",)))
    if roll_iters:
        plan.append(("rollout:bare", [args.warmup, roll_iters], ("rollout:bare",)))
    results: dict[str, list[dict[str, Any]]] = {}
    # Peers interleave repetition by repetition, so a change of machine load hits all of them.
    for rep in range(args.repeats):
        for task, task_args, rows in plan:
            r = run_peer(__file__, task, [*task_args, args.seed + rep], args.threads, args.timeout)
            if task.startswith("dist:") and "error" in r:
                # keep an rlinf figure: add the in-process rows (run later in this repetition)
                for row in rows:
                    extra = f"{row}_inprocess"
                    if all(t != extra for t, _, _ in plan):
                        n = train_iters if row.startswith("train") else roll_iters
                        plan.append((extra, [args.warmup, n], (extra,)))
            for row in rows:
                rr = r
                if task.startswith("dist:") and "error" not in r:  # one result per part
                    rr = {**r[row.split(":")[0]], "load_before": r["load_before"]}
                results.setdefault(row, []).append(rr)
                status = rr["error"].splitlines()[0] if "error" in rr else f"{rr['sps']:.0f} steps/s"
                print(
                    f"  [{rep + 1}/{args.repeats}] {row:<24} {status}  (load {r['load_before']:.1f})",
                    flush=True,
                )
    return {t: median_runs(results[t]) for t in ROWS if t in results}


def print_throughput(res: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    labels = {
        "train:rlinf": "rlinf (distributed runner)",
        "train:rlinf_inprocess": "rlinf (in-process runner)",
        "train:sb3": "Stable-Baselines3 PPO",
        "train:rllib": "RLlib PPO (new API stack)",
        "rollout:rlinf": "rlinf env+rollout workers, links",
        "rollout:rlinf_inprocess": "rlinf in-process collector",
        "rollout:bare": "bare loop (vec env + forward)",
    }
    sb3 = res.get("train:sb3", {}).get("sps")
    rllib = res.get("train:rllib", {}).get("sps")
    bare = res.get("rollout:bare", {}).get("sps")
    print(
        f"\nPPO {ENV_ID}: {NUM_ENVS} envs x {ROLLOUT_STEPS} steps, minibatch {MINIBATCH}, {EPOCHS} epochs, "
        f"64x64 tanh, lr {LR}; torch threads {args.threads}; {args.warmup} warm-up + "
        f"{args.iterations} timed iterations, median of {args.repeats}"
    )
    print(
        f"{'peer':<37} {'env-steps/s':>11} {'x SB3':>6} {'x RLlib':>7} {'x bare':>6} {'steps/cpu-s':>11} "
        f"{'cores':>5} {'rollout%':>8} {'untimed s':>9} {'load':>5}"
    )
    for task, r in res.items():
        if task.startswith("rollout") and task == next(t for t in res if t.startswith("rollout")):
            print(f"-- rollout only: {args.rollout_iterations} timed rollouts of {BATCH} steps, no update")
        if "error" in r:
            print(f"{labels[task]:<37} failed: {r['error'].splitlines()[0][:90]}")
            continue
        sps = r["sps"]
        is_train = task.startswith("train")
        print(
            f"{labels[task]:<37} {sps:>11.0f} "
            f"{fmt(sps / sb3 if sb3 and is_train else None, '.2f'):>6} "
            f"{fmt(sps / rllib if rllib and is_train else None, '.2f'):>7} "
            f"{fmt(sps / bare if bare and not is_train else None, '.2f'):>6} "
            f"{r['steps_per_cpu_s']:>11.0f} {r['cpu_s'] / r['seconds']:>5.2f} "
            f"{fmt(100 * r['rollout_fraction'] if r.get('rollout_fraction') else None, '.0f'):>8} "
            f"{r['untimed_s']:>9.1f} {r['load_before']:>5.1f}"
        )
    print(
        "env-steps/s: wall clock over the timed iterations; steps/cpu-s: the same steps over the CPU "
        "time of the peer's whole process tree (less sensitive to other load on the machine); cores: "
        "CPU time / wall time; untimed s: setup + warm-up before the clock starts; load: 1-min load "
        "average when the peer started"
    )

    def sps(task: str) -> float | None:
        r = res.get(task)
        return None if r is None or "error" in r else r["sps"]

    def pick(row: str) -> tuple[float | None, str]:
        """The distributed figure of ``row``, else the in-process one, with which it is."""
        if sps(row) is not None:
            return sps(row), "distributed"
        if row in res:
            why = f"the distributed run failed: {res[row]['error'].splitlines()[0][:200]}"
        else:
            why = "rlinf-algos (rlinf_algos.training.run_training) is not installed"
        return sps(f"{row}_inprocess"), f"in-process ({why})"

    rlinf_sps, rlinf_runner = pick("train:rlinf")
    rollout_sps, rollout_runner = pick("rollout:rlinf")
    summary = {
        "rlinf_sps": rlinf_sps,
        "rlinf_runner": rlinf_runner,
        "rlinf_inprocess_sps": sps("train:rlinf_inprocess"),
        "sb3_sps": sps("train:sb3"),
        "rllib_sps": sps("train:rllib"),
        "rlinf_rollout_sps": rollout_sps,
        "rlinf_rollout_runner": rollout_runner,
        "rlinf_inprocess_rollout_sps": sps("rollout:rlinf_inprocess"),
        "bare_rollout_sps": sps("rollout:bare"),
        "steps_per_cpu_s": {t: (None if "error" in r else r["steps_per_cpu_s"]) for t, r in res.items()},
    }
    r, s, ll, b = summary["rlinf_sps"], summary["sb3_sps"], summary["rllib_sps"], summary["bare_rollout_sps"]
    print(f"\nrlinf_sps = {fmt(r)} ({summary['rlinf_runner']})", end="")
    if r and s:
        print(f"; {r / s:.2f}x SB3 (target >= 1.3x)", end="")
    if r and ll:
        print(f"; {r / ll:.2f}x RLlib (target >= 2.5x)", end="")
    print()
    rr = summary["rlinf_rollout_sps"]
    if rr and b:
        print(
            f"rlinf_rollout_sps = {rr:.0f} ({summary['rlinf_rollout_runner']}); "
            f"{100 * rr / b:.0f}% of the bare loop (target >= 60%)"
        )
    return summary


def learning(args: argparse.Namespace) -> dict[str, Any]:
    """Part 3: ``benchmarks/learning.py`` with this script's learning options."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import learning as learning_bench

    argv = [args.learning]
    if args.seeds:
        argv += ["--seeds", args.seeds]
    if args.learning_steps and args.learning == "ppo":
        argv += ["--steps", str(args.learning_steps)]
    if args.sac_steps and args.learning == "sac":
        argv += ["--steps", str(args.sac_steps)]
    if args.quick:
        argv.append("--quick")
    if args.json:
        argv += ["--json", str(args.json)]
    return learning_bench.main(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations, one repetition (under 3 minutes)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {','.join(PEERS)}")
    ap.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads for every peer (default 1)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed iterations first (default 1)")
    ap.add_argument("--iterations", type=int, default=None, help="timed PPO iterations (default 10; quick 2)")
    ap.add_argument(
        "--rollout-iterations", type=int, default=None, help="timed rollouts (default 20; quick 3)"
    )
    ap.add_argument(
        "--repeats", type=int, default=None, help="runs per peer, interleaved (default 2; quick 1)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per peer subprocess")
    ap.add_argument("--no-rollout", dest="rollout", action="store_false", help="skip the rollout-only part")
    ap.add_argument("--only-rollout", action="store_true", help="run the rollout-only part alone")
    ap.add_argument(
        "--learning",
        choices=("ppo", "sac", "all"),
        help="run benchmarks/learning.py (the long learning comparisons) instead of the throughput one",
    )
    ap.add_argument("--learning-steps", type=int, default=None, help="learning: PPO env steps per seed")
    ap.add_argument("--sac-steps", type=int, default=None, help="learning: SAC env steps per seed")
    ap.add_argument("--seeds", default=None, help="learning: comma-separated seeds")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        child(json.loads(args._child), TASKS)
        return {}
    if args.learning:
        return learning(args)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    bad = [p for p in args.peers if p not in PEERS]
    if bad:
        ap.error(f"--peers: unknown peer(s) {', '.join(bad)}; valid: {', '.join(PEERS)}")
    if args.warmup is None:
        args.warmup = 1
    if args.iterations is None:
        args.iterations = 2 if args.quick else 10
    if args.rollout_iterations is None:
        args.rollout_iterations = 3 if args.quick else 20
    if args.repeats is None:
        args.repeats = 1 if args.quick else 2

    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "machine": machine(DISTS, threads=args.threads),
        "quick": args.quick,
        "hyperparameters": {
            "env": ENV_ID,
            "num_envs": NUM_ENVS,
            "rollout_steps": ROLLOUT_STEPS,
            "minibatch": MINIBATCH,
            "epochs": EPOCHS,
            "hidden": HIDDEN,
            "activation": "tanh",
            "lr": LR,
        },
    }
    res = throughput(args)
    report.update(print_throughput(res, args))
    report["details"] = res
    return finish(report, t0, args.json)


if __name__ == "__main__":
    main()

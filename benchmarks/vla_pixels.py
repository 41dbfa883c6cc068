"""PPO on pixels and language (rlinf/FrankaInstructReach-v0): rlinf beside Stable-Baselines3.

Issue 21's speed goals, measured in one run on one machine. The env: three coloured cubes on the
table of the Franka MuJoCo twin, an instruction naming one ("reach the red cube"); the observation
is a flat dict of ``image`` (64x64x3 uint8, the ``table`` camera, rendered offscreen through EGL:
``MUJOCO_GL=egl`` is set for every subprocess), ``state`` (21 float32) and ``instruction`` (a
gymnasium ``Text`` string); 50-step episodes; 3-D end-effector deltas as actions.

Part 1, training (end-to-end env-steps/s of PPO, rollout and update included), the same budget
and hyperparameters for both peers, as far as SB3 allows (``examples/vla_franka_reach.yaml``):

==========================  ==================================================================
rollout                     16 envs x 100 steps = 1600 env steps per iteration (sync vector env)
update                      4 epochs of minibatches of 400 (16 gradient steps per iteration)
optimiser                   Adam (eps 1e-5), lr 3e-4 constant, gamma 0.99, GAE lambda 0.95,
                            clip 0.2, value clip 0.2, value coef 0.5, entropy coef 0,
                            gradient-norm clip 0.5, advantages normalised per minibatch
normalisation               running mean/std of ``state`` (rlinf: the policy's ``RunningNorm``;
                            SB3: ``VecNormalize(norm_obs_keys=["state"])``), rewards scaled by
                            the return's std (both); images as uint8 until the network divides
                            them by 255 (both)
policy                      Gaussian, state-independent log-std initialised at -0.5,
                            orthogonal initialisation, one shared encoder; heads 128x128 ReLU
                            for the policy mean and for the value
encoder, rlinf              ``model.type: vla`` as the example: a CNN (16 5x5/2, 16 3x3/2,
                            32 3x3/1: the example's ``model.vision.channels``, or
                            ``--channels``) whose last maps the instruction modulates (FiLM), a
                            spatial softmax, a 32-d hashed-word embedding of the instruction,
                            and the state
encoder, SB3                ``MultiInputPolicy``'s ``CombinedExtractor``: the default NatureCNN
                            (32 8x8/4, 64 4x4/2, 64 3x3/1, then a 256-d linear layer) on the
                            image, the other keys flattened beside it
==========================  ==================================================================

SB3 cannot take a ``Text`` observation: its env is wrapped (:class:`InstructionOneHot`, here) so
that ``instruction`` becomes ``Box(0, 1, (8,), float32)``, a one-hot of which of the task's 8
colour names (``rlinf_hw_franka.instruct.COLORS``) occurs among the instruction's words. That
hands SB3 the parsed colour; rlinf's policy gets the words and learns what they mean.

Peers (``--peers``):

- ``rlinf``: ``rlinf_algos.training.run_training`` (env, rollout and actor workers on an
  embedded Ray, what ``rlinf train`` runs; one node, env stepping in 2 pipeline stages,
  ``max_staleness: 1`` as the example config), and the in-process runner
  (``runner.scheduler: local``) as a second figure, ``rlinf_inprocess_sps``.
- ``sb3``: ``stable_baselines3.PPO("MultiInputPolicy")`` on a ``DummyVecEnv`` of the same env
  wrapped in ``VecNormalize``.

Part 2, rollout only (env-steps/s of collecting PPO rollouts, no update; the issue's target:
rlinf's rollout at least 60% of the bare loop):

- ``rlinf``: env and rollout workers over their links (``run_training(rollout_only=True)``), and
  the same collection loop in process (``collect_ppo`` over a ``LocalPort``);
- ``bare``: one process, a gymnasium sync vector env of the same env (same-step autoreset, as
  rlinf's) stepped with the actions of the same ``VLAActorCritic``'s forward (prepare, encoder,
  policy mean and value): render + forward, nothing stored, no framework.

Part 3 of the issue, success at equal wall time, is ``benchmarks/vla_success_vs_sb3.py``.

Fairness, as ``benchmarks/ppo_throughput.py``: every peer in its own subprocess, one at a time,
with ``OMP_NUM_THREADS``/``torch.set_num_threads`` pinned to ``--threads`` (default 1, rlinf's
``runner.torch_threads`` default); ``--warmup`` iterations before the clock starts (imports, Ray
start, worker spawn, first renders not counted); ``--repeats`` runs of every peer interleaved and
the median reported. Beside each figure: ``steps/cpu-s`` (the steps over the CPU time of the
peer's whole process tree), ``cores`` and the 1-minute load average when the peer started. On a
shared 2-core machine the wall-clock figures move with the other jobs' load: read them as noisy.

Usage::

    uv run --group bench python benchmarks/vla_pixels.py [--quick] [--json PATH]

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
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

DISTS = ("torch", "gymnasium", "mujoco", "stable-baselines3", "ray", "rlinf-algos", "rlinf-hw-franka")

ENV_ID = "rlinf/FrankaInstructReach-v0"
IMAGE_SIZE = (64, 64)
NUM_ENVS = 16
ROLLOUT_STEPS = 100  # per env: 16 x 100 = 1600 env steps per iteration
BATCH = NUM_ENVS * ROLLOUT_STEPS
MINIBATCH = 400
EPOCHS = 4
HIDDEN = [128, 128]
LOG_STD_INIT = -0.5
LR = 3e-4
GAMMA, GAE_LAMBDA, CLIP, VF_COEF, ENT_COEF, MAX_GRAD_NORM = 0.99, 0.95, 0.2, 0.5, 0.0, 0.5
# rlinf's CNN channels: the example's model.vision.channels unless --channels says otherwise,
# passed to the peer subprocesses through this variable
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "vla_franka_reach.yaml"
CHANNELS_VAR = "RLINF_BENCH_VLA_CHANNELS"


def example_channels() -> str:
    """``model.vision.channels`` of ``examples/vla_franka_reach.yaml``, as ``"C1,C2,C3"``."""
    import yaml

    model = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))["model"]
    return ",".join(str(c) for c in model["vision"]["channels"])


VISION = {"channels": [int(c) for c in (os.environ.get(CHANNELS_VAR) or example_channels()).split(",")]}
LANGUAGE = {"dim": 32}

PEERS = ("rlinf", "sb3")
DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "vla_pixels.json"


# -- helpers used in the peer subprocesses -----------------------------------------------------


def _prepare_gl() -> None:
    """MUJOCO_GL=egl (the parent sets it too), triton before any GL context: rlinf's own setup."""
    from rlinf_algos.envs import ensure_registered
    from rlinf_algos.pixels import prepare_gl

    prepare_gl()
    ensure_registered(ENV_ID)


def _model_section() -> dict[str, Any]:
    return {
        "type": "vla",
        "hidden_sizes": HIDDEN,
        "log_std_init": LOG_STD_INIT,
        "vision": dict(VISION),
        "language": dict(LANGUAGE),
    }


def _rlinf_sections(total_steps: int, seed: int, threads: int) -> dict[str, Any]:
    return {
        "algorithm": {
            "name": "ppo",
            "lr": LR,
            "anneal_lr": False,
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
        "model": _model_section(),
        "runner": {"total_steps": total_steps, "seed": seed, "log_interval": BATCH, "torch_threads": threads},
    }


def _rlinf_distributed_config(sections: dict[str, Any]) -> dict[str, Any]:
    """``examples/vla_franka_reach.yaml``'s cluster and rollout sections around ``sections``."""
    return one_node_config(sections, 2)


def _policy(obs_space: dict[str, Any], act_dim: int) -> Any:
    """The PPO ``VLAActorCritic`` rlinf's recipe builds for this model section."""
    from rlinf_algos.models import build_policy, validate_model_section
    from rlinf_algos.policy_specs import gaussian_policy_spec

    spaces = {"obs_dim": 0, "obs_space": obs_space, "act_dim": act_dim}
    return build_policy(gaussian_policy_spec(validate_model_section(_model_section()), spaces, True))


# -- part 1: training throughput ---------------------------------------------------------------


def peer_rlinf_inprocess(warmup: int, iters: int, threads: int, seed: int) -> dict[str, Any]:
    _prepare_gl()
    t_begin = time.perf_counter()
    return rlinf_inprocess(_rlinf_sections((warmup + iters) * BATCH, seed, threads), warmup, t_begin)


def peer_rlinf_distributed(
    warmup: int, iters: int, rollout_iters: int, threads: int, seed: int
) -> dict[str, Any]:
    """``rlinf train``'s runner (:func:`_peers.rlinf_distributed_parts`): rollout only, then PPO."""
    _prepare_gl()
    return rlinf_distributed_parts(
        lambda total: _rlinf_distributed_config(_rlinf_sections(total, seed, threads)),
        BATCH,
        warmup,
        rollout_iters,
        iters,
    )


def _instruction_one_hot(env: Any) -> Any:
    """``env`` with its ``instruction`` string replaced by a one-hot of the colour words it names."""
    import re

    import gymnasium as gym
    import numpy as np

    from rlinf_hw_franka.instruct import COLORS

    names = list(COLORS)

    class InstructionOneHot(gym.ObservationWrapper):
        """``instruction`` -> ``Box(0, 1, (len(COLORS),))``: 1 where that colour is a word of it."""

        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            spaces = dict(inner.observation_space.spaces)
            spaces["instruction"] = gym.spaces.Box(0.0, 1.0, (len(names),), np.float32)
            self.observation_space = gym.spaces.Dict(spaces)

        def observation(self, obs: dict[str, Any]) -> dict[str, Any]:
            words = set(re.findall(r"[a-z]+", str(obs["instruction"]).lower()))
            hot = np.array([c in words for c in names], np.float32)
            return {**obs, "instruction": hot}

    return InstructionOneHot(env)


def _sb3_ppo(seed: int, env_kwargs: dict[str, Any] | None = None) -> Any:
    """SB3's PPO with this benchmark's settings on ``NUM_ENVS`` copies of the env (``env_kwargs``
    passed to ``gym.make``), the instruction as a colour one-hot, ``state`` and rewards normalised."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    def make() -> Any:
        return _instruction_one_hot(gym.make(ENV_ID, **(env_kwargs or {})))

    venv = VecNormalize(
        DummyVecEnv([make] * NUM_ENVS), norm_obs=True, norm_obs_keys=["state"], norm_reward=True, gamma=GAMMA
    )
    return silent_sb3(
        PPO(
            "MultiInputPolicy",
            venv,
            learning_rate=LR,
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
            policy_kwargs={
                "net_arch": {"pi": HIDDEN, "vf": HIDDEN},
                "activation_fn": torch.nn.ReLU,
                "log_std_init": LOG_STD_INIT,
            },
            device="cpu",
            seed=seed,
            verbose=0,
        )
    )


def peer_sb3(warmup: int, iters: int, threads: int, seed: int) -> dict[str, Any]:
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    _prepare_gl()

    class Timer(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.rollout = self.update = 0.0
            self.t_start: float | None = None
            self.t_end: float | None = None

        def _on_rollout_start(self) -> None:
            now = time.perf_counter()
            if self.t_end is not None:
                self.update += now - self.t_end
            self.t_start = now

        def _on_rollout_end(self) -> None:
            self.t_end = time.perf_counter()
            self.rollout += self.t_end - (self.t_start or self.t_end)

        def _on_step(self) -> bool:
            return True

    t_begin = time.perf_counter()
    model = _sb3_ppo(seed)
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
        "torch_threads_after": torch.get_num_threads(),
        "features_extractor": type(model.policy.features_extractor).__name__,
        "parameters": sum(p.numel() for p in model.policy.parameters()),
    }


# -- part 2: rollout only ----------------------------------------------------------------------


def peer_bare_rollout(warmup: int, iters: int, threads: int, seed: int) -> dict[str, Any]:
    """A gymnasium sync vector env and the same ``VLAActorCritic``, in one loop: prepare the
    observations, forward (action and value), sample, clip, step. Nothing stored."""
    import gymnasium as gym
    import numpy as np
    import torch
    from gymnasium.vector import AutoresetMode

    from rlinf_algos.obs import describe_space

    _prepare_gl()
    t_begin = time.perf_counter()
    envs = gym.make_vec(
        ENV_ID,
        num_envs=NUM_ENVS,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    obs, _ = envs.reset(seed=seed)
    aspace = envs.single_action_space
    policy = _policy(describe_space(envs.single_observation_space), int(aspace.shape[0]))
    torch.manual_seed(seed)

    def run(n: int) -> None:
        nonlocal obs
        with torch.no_grad():
            for _ in range(n):
                action, _, _ = policy.act(policy.normalize(obs))
                obs, *_ = envs.step(np.clip(action.numpy(), aspace.low, aspace.high))

    run(warmup * ROLLOUT_STEPS)
    clock = Clock()
    clock.mark(0)
    run(iters * ROLLOUT_STEPS)
    clock.mark(iters * BATCH)
    envs.close()
    return {**clock.result(0, t_begin), "parameters": sum(p.numel() for p in policy.parameters())}


def peer_rlinf_rollout_inprocess(warmup: int, iters: int, threads: int, seed: int) -> dict[str, Any]:
    from rlinf_algos.envs import VectorEnvStepper

    _prepare_gl()
    t_begin = time.perf_counter()
    stepper = VectorEnvStepper(ENV_ID, NUM_ENVS, seed)
    policy = _policy(stepper.obs_space, stepper.act_dim)
    return timed_collect(stepper, policy, warmup, iters, ROLLOUT_STEPS, BATCH, seed, t_begin)


TASKS = {
    "dist:rlinf": peer_rlinf_distributed,
    "train:rlinf_inprocess": peer_rlinf_inprocess,
    "train:sb3": peer_sb3,
    "rollout:rlinf_inprocess": peer_rlinf_rollout_inprocess,
    "rollout:bare": peer_bare_rollout,
}


ROWS = (
    "train:rlinf",
    "train:rlinf_inprocess",
    "train:sb3",
    "rollout:rlinf",
    "rollout:rlinf_inprocess",
    "rollout:bare",
)
LABELS = {
    "train:rlinf": "rlinf (distributed runner, Ray)",
    "train:rlinf_inprocess": "rlinf (in-process runner)",
    "train:sb3": "SB3 PPO MultiInputPolicy",
    "rollout:rlinf": "rlinf env+rollout workers, links",
    "rollout:rlinf_inprocess": "rlinf in-process collector",
    "rollout:bare": "bare loop (vec env + VLA forward)",
}


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    train_iters = 0 if args.only_rollout else args.iterations
    roll_iters = args.rollout_iterations if args.rollout else 0
    w, th = args.warmup, args.threads
    plan: list[tuple[str, list[Any], tuple[str, ...]]] = []  # (task, arguments, the rows it fills)
    if "rlinf" in args.peers:
        rows = (("train:rlinf",) if train_iters else ()) + (("rollout:rlinf",) if roll_iters else ())
        if rows:
            plan.append(("dist:rlinf", [w, train_iters, roll_iters, th], rows))
        if train_iters and not args.no_inprocess:
            plan.append(("train:rlinf_inprocess", [w, train_iters, th], ("train:rlinf_inprocess",)))
        if roll_iters and not args.no_inprocess:
            plan.append(("rollout:rlinf_inprocess", [w, roll_iters, th], ("rollout:rlinf_inprocess",)))
    if "sb3" in args.peers and train_iters:
        plan.append(("train:sb3", [w, train_iters, th], ("train:sb3",)))
    if roll_iters:
        plan.append(("rollout:bare", [w, roll_iters, th], ("rollout:bare",)))
    results: dict[str, list[dict[str, Any]]] = {}
    # Peers interleave repetition by repetition, so a change of machine load hits all of them.
    for rep in range(args.repeats):
        for task, task_args, rows in plan:
            r = run_peer(
                __file__,
                task,
                [*task_args, args.seed + rep],
                th,
                args.timeout,
                {"MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl", CHANNELS_VAR: args.channels},
            )
            for row in rows:
                rr = r
                if task.startswith("dist:") and "error" not in r:  # one result per part
                    rr = {
                        **r[row.split(":")[0]],
                        "load_before": r["load_before"],
                        "load_after": r["load_after"],
                    }
                results.setdefault(row, []).append(rr)
                status = rr["error"].splitlines()[0] if "error" in rr else f"{rr['sps']:.0f} steps/s"
                print(
                    f"  [{rep + 1}/{args.repeats}] {row:<24} {status}  (load {r['load_before']:.1f})",
                    flush=True,
                )
    return {t: median_runs(results[t]) for t in ROWS if t in results}


def print_throughput(res: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    def sps(task: str) -> float | None:
        r = res.get(task)
        return None if r is None or "error" in r else r["sps"]

    sb3, bare = sps("train:sb3"), sps("rollout:bare")
    print(
        f"\nPPO {ENV_ID} ({IMAGE_SIZE[0]}x{IMAGE_SIZE[1]} image, state, instruction): {NUM_ENVS} envs x "
        f"{ROLLOUT_STEPS} steps, minibatch {MINIBATCH}, {EPOCHS} epochs, heads {HIDDEN[0]}x{HIDDEN[1]} relu, "
        f"lr {LR}; torch threads {args.threads}; {args.warmup} warm-up + {args.iterations} timed iterations "
        f"({args.rollout_iterations} timed rollouts), median of {args.repeats}"
    )
    print(
        f"{'peer':<35} {'env-steps/s':>11} {'x SB3':>6} {'x bare':>6} {'steps/cpu-s':>11} "
        f"{'cores':>5} {'rollout%':>8} {'untimed s':>9} {'load':>5}"
    )
    for task, r in res.items():
        if task.startswith("rollout") and task == next(t for t in res if t.startswith("rollout")):
            print(f"-- rollout only: {args.rollout_iterations} timed rollouts of {BATCH} steps, no update")
        if "error" in r:
            print(f"{LABELS[task]:<35} failed: {r['error'].splitlines()[0][:90]}")
            continue
        is_train = task.startswith("train")
        print(
            f"{LABELS[task]:<35} {r['sps']:>11.0f} "
            f"{fmt(r['sps'] / sb3 if sb3 and is_train else None, '.2f'):>6} "
            f"{fmt(r['sps'] / bare if bare and not is_train else None, '.2f'):>6} "
            f"{r['steps_per_cpu_s']:>11.0f} {r['cpu_s'] / r['seconds']:>5.2f} "
            f"{fmt(100 * r['rollout_fraction'] if r.get('rollout_fraction') else None, '.0f'):>8} "
            f"{r['untimed_s']:>9.1f} {r['load_before']:>5.1f}"
        )
    print(
        "env-steps/s: wall clock over the timed iterations; steps/cpu-s: the same steps over the CPU time of "
        "the peer's whole process tree; cores: CPU time / wall time; untimed s: setup + warm-up before the "
        "clock starts; load: 1-min load average when the peer started (2 shared cores: the figures are noisy)"
    )
    summary: dict[str, Any] = {
        "rlinf_sps": sps("train:rlinf"),
        "rlinf_inprocess_sps": sps("train:rlinf_inprocess"),
        "sb3_sps": sb3,
        "rlinf_vs_sb3": None,
        "rlinf_inprocess_vs_sb3": None,
        "rlinf_rollout_sps": sps("rollout:rlinf"),
        "rlinf_inprocess_rollout_sps": sps("rollout:rlinf_inprocess"),
        "bare_rollout_sps": bare,
        "rlinf_rollout_vs_bare": None,
        "rlinf_inprocess_rollout_vs_bare": None,
        "steps_per_cpu_s": {t: (None if "error" in r else r["steps_per_cpu_s"]) for t, r in res.items()},
        "load_before": {t: r.get("load_before") for t, r in res.items()},
    }
    for key, num, den in (
        ("rlinf_vs_sb3", "rlinf_sps", "sb3_sps"),
        ("rlinf_inprocess_vs_sb3", "rlinf_inprocess_sps", "sb3_sps"),
        ("rlinf_rollout_vs_bare", "rlinf_rollout_sps", "bare_rollout_sps"),
        ("rlinf_inprocess_rollout_vs_bare", "rlinf_inprocess_rollout_sps", "bare_rollout_sps"),
    ):
        if summary[num] and summary[den]:
            summary[key] = summary[num] / summary[den]
    print()
    for label, key, target in (
        ("rlinf (distributed) / SB3", "rlinf_vs_sb3", "target >= 1.5x"),
        ("rlinf (in-process) / SB3", "rlinf_inprocess_vs_sb3", ""),
        ("rlinf rollout (workers) / bare loop", "rlinf_rollout_vs_bare", "target >= 0.60"),
        ("rlinf rollout (in-process) / bare loop", "rlinf_inprocess_rollout_vs_bare", ""),
    ):
        if summary[key] is not None:
            print(f"{label:<40} {summary[key]:.2f}{'  (' + target + ')' if target else ''}")
    return summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="1 timed iteration, one repetition, no in-process rows"
    )
    ap.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"write the figures here (default {DEFAULT_JSON})"
    )
    ap.add_argument("--no-json", action="store_true", help="write no JSON")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {','.join(PEERS)}")
    ap.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads for every peer (default 1)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    ap.add_argument("--iterations", type=int, default=None, help="timed PPO iterations (default 3; quick 1)")
    ap.add_argument(
        "--rollout-iterations", type=int, default=None, help="timed rollouts (default 3; quick 1)"
    )
    ap.add_argument(
        "--repeats", type=int, default=None, help="runs per peer, interleaved (default 2; quick 1)"
    )
    ap.add_argument(
        "--channels",
        default=None,
        help="rlinf's CNN channels, model.vision.channels (default: the example's)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per peer subprocess")
    ap.add_argument("--no-rollout", dest="rollout", action="store_false", help="skip the rollout-only part")
    ap.add_argument("--only-rollout", action="store_true", help="run the rollout-only part alone")
    ap.add_argument("--no-inprocess", action="store_true", help="skip rlinf's in-process rows")
    ap.add_argument("--_child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child:
        child(json.loads(args._child), TASKS)
        return {}
    args.channels = args.channels or example_channels()
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    bad = [p for p in args.peers if p not in PEERS]
    if bad:
        ap.error(f"--peers: unknown peer(s) {', '.join(bad)}; valid: {', '.join(PEERS)}")
    if args.warmup < 1:
        ap.error("--warmup must be at least 1 (the first iteration's rows start the clock)")
    if args.iterations is None:
        args.iterations = 1 if args.quick else 3
    if args.rollout_iterations is None:
        args.rollout_iterations = 1 if args.quick else 3
    if args.repeats is None:
        args.repeats = 1 if args.quick else 2
    args.no_inprocess = args.no_inprocess or args.quick

    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "title": "PPO on pixels and language (FrankaInstructReach): rlinf vs Stable-Baselines3 throughput",
        "machine": machine(DISTS, threads=args.threads),
        "quick": args.quick,
        "hyperparameters": {
            "env": ENV_ID,
            "image_size": list(IMAGE_SIZE),
            "num_envs": NUM_ENVS,
            "rollout_steps": ROLLOUT_STEPS,
            "minibatch": MINIBATCH,
            "epochs": EPOCHS,
            "heads": HIDDEN,
            "activation": "relu",
            "log_std_init": LOG_STD_INIT,
            "lr": LR,
            "rlinf_encoder": f"vla: CNN {args.channels.replace(',', '-')} + FiLM + spatial softmax, "
            "32-d hashed-word embedding",
            "sb3_encoder": "CombinedExtractor: NatureCNN (256) on image, instruction as 8-d colour one-hot",
            "warmup": args.warmup,
            "iterations": args.iterations,
            "rollout_iterations": args.rollout_iterations,
            "repeats": args.repeats,
        },
        "notes": [
            "2 shared cores: wall-clock figures move with other jobs' load; see load_before per row",
            "success at equal wall time (the issue's part 3): benchmarks/vla_success_vs_sb3.py",
        ],
    }
    res = throughput(args)
    report.update(print_throughput(res, args))
    report["details"] = res
    return finish(report, t0, None if args.no_json else args.json)


if __name__ == "__main__":
    main()

"""PPO on ManiSkill3's PushCube-v1 (state, CPU simulator) through ``rlinf train`` and through
Stable-Baselines3's PPO on the same simulator, at equal wall time, seeds side by side (issue 49).

- **rlinf**: ``rlinf train examples/maniskill_pushcube.yaml runner.scheduler=local
  runner.seed=S`` (one process: the batched ManiSkill env, inference and the learner), stopped
  with SIGTERM once its training clock (``wall_s`` of ``metrics.csv``, which starts after the
  env is built) reaches ``--wall`` seconds: rlinf finishes the iteration in flight and writes
  its policy and summary (:class:`rlinf_algos.runtime.stop.DeferredStop`). A run that reaches
  ``runner.total_steps`` first ends there.
- **SB3**: PPO on the env rlinf builds (``rlinf_algos.envs.make_vector_env(...,
  family="maniskill")``: :class:`~rlinf_algos.maniskill_env.ManiSkillVectorEnv`, 8 sub-envs,
  the YAML's ``env.options``) through ``_sb3.SameStepVecEnv``, with the YAML's settings read
  from it (rlinf's defaults where it says nothing): ``n_steps`` = ``rollout_steps``,
  ``batch_size`` = ``minibatch_size``, ``n_epochs``, lr (decayed linearly over
  ``runner.total_steps`` when ``anneal_lr``), gamma, lambda, clip, value clip, entropy and value
  coefficients, gradient clip, the hidden layers and activation, ``log_std_init``, orthogonal
  initialisation, observation and reward normalisation (``VecNormalize`` with the same gamma).
  It stops at ``runner.total_steps`` or at the rlinf run's training wall time, whichever comes
  first (its clock starts after its env and model are built, as rlinf's does).
- **Evaluation**, the same for both final policies: deterministic actions, 50 episodes with
  reset seeds 10000..10049, 10 envs at a time, the YAML's env options (``rlinf eval RUN --suite
  maniskill:PushCube-v1 --episodes-per-task 50`` for rlinf, which is exactly this; the same
  env and episode loop, :func:`rlinf_algos.evaluate.play_episodes`, for SB3):
  ``success_at_end`` and ``success_once`` with 95 % Wilson intervals.
- **Training curves**: the success rate and mean return over the last 100 finished training
  episodes, against env steps and seconds (rlinf's ``metrics.csv``; SB3's
  ``ep_success_buffer`` after each rollout).

``--parallel`` runs the two sides of a seed at the same time, rlinf pinned to CPU 0 and SB3 to
CPU 1 (and SB3 is then capped at ``--wall``, the budget rlinf is stopped at, since the rlinf
run's own time is not known yet); without it, rlinf runs first and SB3 after it, each pinned
to CPU 0. The report records which.

Usage::

    uv run --group bench python benchmarks/maniskill_vs_sb3.py --seeds 0,1,2 --wall 600 \\
        --parallel --run-root RUNS --json benchmarks/results/maniskill_pushcube_vs_sb3.json
    # --reuse: report what RUN_ROOT already holds for a seed (a finished rlinf run, its
    # evaluation, SB3's result) instead of running it again; --sb3-only / --rlinf-only: one side

Needs the Vulkan driver (``uv run rlinf env setup maniskill`` on a CPU machine). Figures are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import finish, fmt, machine, success_eval

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "maniskill_pushcube.yaml"
TASK = "PushCube-v1"
SUITE = f"maniskill:{TASK}"
EVAL_EPISODES = 50
EVAL_SEED = 10_000
EVAL_ENVS = 10
DISTS = ("rlinf-algos", "stable-baselines3", "torch", "mani-skill", "sapien", "gymnasium")


def settings() -> dict[str, Any]:
    """The example's settings, with rlinf's defaults where it says nothing: ``ppo`` (the
    algorithm section), ``model``, ``env`` and ``runner`` (raw YAML)."""
    import yaml

    from rlinf_algos.models.config import ModelConfig
    from rlinf_algos.ppo.config import PPOConfig

    raw = yaml.safe_load(CONFIG.read_text())
    return {
        "ppo": PPOConfig(**raw["algorithm"]).model_dump(),
        "model": ModelConfig(**raw.get("model", {})).model_dump(),
        "env": raw["env"],
        "runner": raw["runner"],
    }


def make_envs(num_envs: int, seed: int) -> Any:
    """The vector env rlinf builds for the example (its family, task and options)."""
    from rlinf_algos.envs import open_vector_env

    env = settings()["env"]
    envs, _ = open_vector_env(
        env["id"],
        num_envs,
        seed,
        family=env["family"],
        options=env.get("options") or {},
        max_episode_steps=env.get("max_episode_steps"),
    )
    return envs


def evaluate(act: Any) -> dict[str, Any]:
    """``act(obs [N, D]) -> actions`` for 50 episodes, as ``rlinf eval --suite`` plays them."""
    seeds = [EVAL_SEED + e for e in range(EVAL_EPISODES)]
    return success_eval(make_envs(EVAL_ENVS, EVAL_SEED), act, seeds)


# -- SB3 (in a child process) ---------------------------------------------------------------------


def sb3_child(seed: int, steps: int, wall: float, out: str) -> None:
    """SB3 PPO in this process (see the module docstring); writes its figures to ``out``."""
    import torch
    from _peers import quiet, silent_sb3
    from _sb3 import SameStepVecEnv, learn_within
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecNormalize

    quiet()
    torch.set_num_threads(1)
    s = settings()
    ppo, model_cfg = s["ppo"], s["model"]
    lr, anneal = float(ppo["lr"]), bool(ppo["anneal_lr"])
    activation = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU, "silu": torch.nn.SiLU}
    venv = VecNormalize(
        SameStepVecEnv(make_envs(int(s["env"].get("num_envs", 8)), seed).unwrapped, seed),
        norm_obs=bool(ppo["normalize_obs"]),
        norm_reward=bool(ppo["normalize_reward"]),
        gamma=float(ppo["gamma"]),
    )
    model = silent_sb3(
        PPO(
            "MlpPolicy",
            venv,
            n_steps=int(ppo["rollout_steps"]),
            batch_size=int(ppo["minibatch_size"]),
            n_epochs=int(ppo["update_epochs"]),
            learning_rate=(lambda f: lr * f) if anneal else lr,
            gamma=float(ppo["gamma"]),
            gae_lambda=float(ppo["gae_lambda"]),
            clip_range=float(ppo["clip_low"]),
            clip_range_vf=ppo["value_clip"],
            normalize_advantage=bool(ppo["normalize_advantages"]),
            ent_coef=float(ppo["ent_coef"]),
            vf_coef=float(ppo["vf_coef"]),
            max_grad_norm=float(ppo["max_grad_norm"] or 1e9),
            policy_kwargs={
                "net_arch": list(model_cfg["hidden_sizes"] or [64, 64]),
                "activation_fn": activation[model_cfg["activation"] or "tanh"],
                "log_std_init": float(model_cfg["log_std_init"]),
                "ortho_init": bool(model_cfg["ortho_init"]),
            },
            seed=seed,
            device="cpu",
            verbose=0,
        )
    )
    res = learn_within(model, venv, steps, wall)
    res.update(evaluate(res.pop("act")))
    venv.close()
    Path(out).write_text(json.dumps(res))


# -- processes ------------------------------------------------------------------------------------


def _pinned(cpu: int | None) -> Any:
    if cpu is None or cpu >= (os.cpu_count() or 1):
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def start_rlinf(seed: int, steps: int, run_dir: Path, cpu: int | None, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        "rlinf", "train", str(CONFIG), "runner.scheduler=local", f"runner.seed={seed}",
        f"runner.total_steps={steps}", "runner.log_interval=1600", "runner.loggers=[csv]",
        "--run-dir", str(run_dir),
    ]  # fmt: skip
    with log.open("ab") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), preexec_fn=_pinned(cpu))


def start_sb3(
    seed: int, steps: int, wall: float, out: Path, cpu: int | None, log: Path
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, __file__, "--_sb3", str(seed), str(steps), str(wall), str(out)]
    with log.open("ab") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), preexec_fn=_pinned(cpu))


def metrics_rows(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def cap_rlinf(proc: subprocess.Popen[bytes], run_dir: Path, wall: float, timeout: float) -> bool:
    """Wait for the rlinf run; SIGTERM it once its training clock reaches ``wall`` seconds (from
    the first metrics row on: that row's ``wall_s`` places the clock's start). Returns whether it
    was stopped so."""
    t_launch, clock0, stopped = time.perf_counter(), None, False
    while proc.poll() is None:
        if time.perf_counter() - t_launch > timeout:
            proc.kill()
            raise RuntimeError(f"rlinf train ({run_dir}) took more than {timeout:.0f} s; killed")
        if clock0 is None:
            rows = metrics_rows(run_dir)
            if rows:
                clock0 = time.perf_counter() - float(rows[-1]["wall_s"])
        if not stopped and clock0 is not None and time.perf_counter() - clock0 >= wall:
            proc.send_signal(signal.SIGTERM)
            stopped = True
        time.sleep(0.5)
    return stopped


def wait_for(proc: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError(f"{what} took more than {timeout:.0f} s; killed") from None
    if rc != 0:
        raise RuntimeError(f"{what} exited with {rc} (see its log)")


def rlinf_eval(run_dir: Path, cpu: int | None, log: Path) -> Path:
    out = run_dir / "eval" / f"maniskill_{TASK}-seed{EVAL_SEED}.json"
    if not out.exists():
        cmd = ["rlinf", "eval", str(run_dir), "--suite", SUITE, "--episodes-per-task", str(EVAL_EPISODES)]
        with log.open("ab") as f:
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), preexec_fn=_pinned(cpu), timeout=1800
            ).returncode
        if rc != 0:
            raise RuntimeError(f"rlinf eval {run_dir} exited with {rc} (see {log})")
    return out


def _num(row: dict[str, str], key: str) -> float | None:
    v = row.get(key)
    return None if v in (None, "", "nan") else float(v)


def rlinf_result(run_dir: Path, eval_file: Path, stopped: bool) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    task = json.loads(eval_file.read_text())["tasks"][0]
    curve = [
        {
            "step": int(float(row["step"])),
            "wall_s": _num(row, "wall_s"),
            "success_rate": _num(row, "success_rate"),
            "episode_return_mean": _num(row, "episode_return_mean"),
        }
        for row in metrics_rows(run_dir)
    ]
    return {
        "env_steps": int(summary.get("total_env_steps", 0)),
        "train_s": float(summary.get("wall_s") or 0.0),
        "stopped_at_wall": stopped,
        "curve": curve,
        "episodes": task["episodes"],
        "success_at_end": {k: task["success_at_end"][k] for k in ("rate", "ci95")},
        "success_once": {k: task["success_once"][k] for k in ("rate", "ci95")},
    }


# -- report ---------------------------------------------------------------------------------------


def curve_summary(curve: list[dict[str, Any]]) -> dict[str, Any]:
    """Training success at the first logged point, the best, and the last (None when no episode
    had finished)."""
    pts = [p for p in curve if p.get("success_rate") is not None]
    if not pts:
        return {"first": None, "best": None, "last": None}
    return {
        "first": pts[0]["success_rate"],
        "best": max(p["success_rate"] for p in pts),
        "last": pts[-1]["success_rate"],
        "last_step": pts[-1]["step"],
    }


def figure_rows(row: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for side in ("rlinf", "sb3"):
        if side not in row:
            continue
        r = row[side]
        c = curve_summary(r["curve"])
        out.append(
            {
                "seed": row["seed"],
                "peer": side,
                "env_steps": r["env_steps"],
                "train_s": round(r["train_s"], 1),
                "success_at_end": r["success_at_end"]["rate"],
                "success_at_end_ci95": [round(x, 3) for x in r["success_at_end"]["ci95"]],
                "success_once": r["success_once"]["rate"],
                "success_once_ci95": [round(x, 3) for x in r["success_once"]["ci95"]],
                "train_success_first": c["first"],
                "train_success_last": c["last"],
                "eval_episodes": EVAL_EPISODES,
            }
        )
    return out


def print_row(row: dict[str, Any]) -> None:
    for fig in figure_rows(row):
        print(
            f"seed {fig['seed']} {fig['peer']:<5}: {fig['env_steps']:>7} steps in {fmt(fig['train_s'])} s; "
            f"success_at_end {fig['success_at_end']:.2f} ({fig['success_at_end_ci95'][0]:.2f}-"
            f"{fig['success_at_end_ci95'][1]:.2f}), success_once {fig['success_once']:.2f}; training "
            f"success {fmt(fig['train_success_first'], '.2f')} -> {fmt(fig['train_success_last'], '.2f')}"
        )


def run_seed(args: argparse.Namespace, seed: int, steps: int) -> dict[str, Any]:
    run_dir = args.run_root / f"rlinf-{TASK}-s{seed}"
    sb3_out = args.run_root / f"sb3-{TASK}-s{seed}.json"
    rlinf_log = args.run_root / f"rlinf-{TASK}-s{seed}.log"
    sb3_log = args.run_root / f"sb3-{TASK}-s{seed}.log"
    do_rlinf = not args.sb3_only and not (args.reuse and (run_dir / "summary.json").exists())
    do_sb3 = not args.rlinf_only and not (args.reuse and sb3_out.exists())
    stopped_file = run_dir / "stopped_at_wall"
    row: dict[str, Any] = {"seed": seed}
    sb3 = None
    rlinf_cpu, sb3_cpu = (0, 1) if args.parallel else (0, 0)
    hours = 3600.0
    if do_rlinf:
        proc = start_rlinf(seed, steps, run_dir, rlinf_cpu, rlinf_log)
        if do_sb3 and args.parallel:
            sb3 = start_sb3(seed, steps, args.wall, sb3_out, sb3_cpu, sb3_log)
        if cap_rlinf(proc, run_dir, args.wall, timeout=args.wall + hours):
            stopped_file.write_text("SIGTERM at the wall budget\n")
        if not (run_dir / "summary.json").exists():
            raise RuntimeError(
                f"rlinf train wrote no summary in {run_dir} (exit {proc.returncode}; see {rlinf_log})"
            )
    if not args.sb3_only:
        row["rlinf"] = rlinf_result(run_dir, rlinf_eval(run_dir, rlinf_cpu, rlinf_log), stopped_file.exists())
    if do_sb3 and sb3 is None:
        wall = row["rlinf"]["train_s"] if "rlinf" in row else args.wall  # equal wall time
        sb3 = start_sb3(seed, steps, wall, sb3_out, sb3_cpu, sb3_log)
    if sb3 is not None:
        wait_for(sb3, f"SB3 seed {seed} (log {sb3_log})", timeout=args.wall + hours)
    if not args.rlinf_only:
        row["sb3"] = json.loads(sb3_out.read_text())
    return row


def _portable(argv: list[str]) -> list[str]:
    """``argv`` with the run root as ``RUNS`` and an absolute ``--json`` path as ``OUT.json``
    (the report names no path of the machine it ran on)."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--run-root":
            out[i + 1] = "RUNS"
        elif arg == "--json" and Path(out[i + 1]).is_absolute():
            out[i + 1] = "OUT.json"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--wall", type=float, default=600.0, help="seconds of training each side gets")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="env steps each side may train (default: the YAML's total_steps)",
    )
    p.add_argument("--parallel", action="store_true", help="both sides of a seed at once, one CPU each")
    p.add_argument("--run-root", type=Path, default=None)
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--sb3-only", action="store_true")
    p.add_argument("--rlinf-only", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--note", action="append", default=[], help="a line for the report's notes (repeatable)")
    p.add_argument("--_sb3", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._sb3:
        sb3_child(int(args._sb3[0]), int(args._sb3[1]), float(args._sb3[2]), args._sb3[3])
        return
    if args.run_root is None:
        p.error("--run-root is required")
    t0 = time.perf_counter()
    args.run_root.mkdir(parents=True, exist_ok=True)
    s = settings()
    steps = args.steps or int(s["runner"]["total_steps"])
    seeds = [int(x) for x in args.seeds.split(",")]
    how = (
        "rlinf (CPU 0) and SB3 (CPU 1) of a seed at the same time; SB3 capped at the wall budget"
        if args.parallel
        else "rlinf, then SB3 capped at the rlinf run's training time, each on CPU 0"
    )
    report: dict[str, Any] = {
        "title": f"PPO on ManiSkill3 {TASK} (state, CPU sim): rlinf vs Stable-Baselines3 at equal wall time",
        "machine": machine(DISTS, schedule=how),
        "seeds": seeds,
        "task": TASK,
        "wall_budget_s": args.wall,
        "max_env_steps": steps,
        "config": str(CONFIG.relative_to(ROOT)),
        "settings": {"algorithm": s["ppo"], "model": s["model"], "env": s["env"]},
        "command": [
            "uv run rlinf train examples/maniskill_pushcube.yaml runner.scheduler=local runner.seed=S "
            f"runner.total_steps={steps} runner.log_interval=1600 runner.loggers=[csv] --run-dir RUNS/rlinf-{TASK}-sS"
            f"  (SIGTERM once its training clock reaches {args.wall:.0f} s)",
            f"uv run rlinf eval RUNS/rlinf-{TASK}-sS --suite {SUITE} --episodes-per-task {EVAL_EPISODES}",
            "uv run --group bench python benchmarks/maniskill_vs_sb3.py " + " ".join(_portable(sys.argv[1:])),
        ],
        "rows": [],
        "figures": [],
        "source": "benchmarks/maniskill_vs_sb3.py",
        "notes": list(args.note),
    }
    loads = []
    for seed in seeds:
        load = os.getloadavg()[0]
        row = run_seed(args, seed, steps)
        row["load_before"], row["load_after"] = load, os.getloadavg()[0]
        loads.append((load, row["load_after"]))
        report["rows"].append(row)
        report["figures"].extend(figure_rows(row))
        print_row(row)
    for side in ("rlinf", "sb3"):
        rates = [r[side]["success_at_end"]["rate"] for r in report["rows"] if side in r]
        if rates:
            report[f"{side}_success_at_end_mean"] = float(np.mean(rates))
            report["notes"].append(
                f"{side}: success_at_end {np.mean(rates):.3f} +- {np.std(rates):.3f} over {len(rates)} seeds"
            )
            print(
                f"{side}: success_at_end {np.mean(rates):.3f} +- {np.std(rates):.3f} over {len(rates)} seeds"
            )
    report["conditions"] = (
        f"{how}; wall budget {args.wall:.0f} s of training per side; load average (1 min) before/after each "
        f"seed: {', '.join(f'{a:.1f}/{b:.1f}' for a, b in loads)} ({os.cpu_count()} CPUs, shared)"
    )
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

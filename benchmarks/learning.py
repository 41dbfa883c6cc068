"""Learning benchmarks on MuJoCo HalfCheetah-v5: does rlinf learn as well as the references?

``ppo``: ``examples/ppo_halfcheetah_zoo.yaml`` (rl-baselines3-zoo's tuned PPO set, 8 envs x 64
steps per 512-sample iteration) for ``--steps`` (default 1M) env steps over ``--seeds`` seeds,
each an ``rlinf train`` subprocess (by default all seeds at once). Reports per seed the final
training return (mean of the last 100 episodes), the deterministic evaluation return of the
final policy (10 episodes), env-steps/s and env-steps per CPU-second; the issue's target is a
mean final return of 3000 or more (published at 1M steps: CleanRL 1443, RLlib's target 2000,
the tuned SB3 zoo 5819).

``sac``: rlinf SAC (``examples/sac_halfcheetah.yaml``; ``--scheduler local`` for the in-process
loop instead of the distributed runner) against
Stable-Baselines3 SAC with the same settings and seeds: 256x256 ReLU actor and twin critics,
batch 256, lr 3e-4 for actor, critic and temperature (SB3's single learning rate), tau 0.005,
gamma 0.99, 5000 uniform random steps first, then one gradient step per env step, one env.
The peers run one after the other, each with the machine to itself (``--together`` runs them at
the same time, sharing the cores: fine for returns, unfair to whichever peer uses more than one
core). SB3 gets every core's torch threads when alone and one when together (``--sb3-threads
N`` to choose). Each runs for ``--steps`` (default 100k) or until ``--max-wall`` seconds; they
are compared at the last step count both reached: the mean return of the episodes of the last
10k steps, and over the learning phase (from ``learning_starts`` to that step) env-steps/s and
env-steps per CPU-second (CPU time of the whole process tree, Ray workers included); the
deterministic evaluation return of each final policy is reported beside, with the step count it was taken at.

Usage::

    uv run --group bench python benchmarks/learning.py ppo [--seeds 1,2,3] [--steps 1000000]
    uv run --group bench python benchmarks/learning.py sac [--seeds 1] [--steps 100000] [--max-wall S] [--together]
    # --quick: PPO 20k steps, SAC 8k steps, one seed; --json PATH writes the figures;
    # --run-root DIR keeps the run directories (default: a temp dir); --reuse reports the runs
    # found there (RUN_ROOT/ppo-sSEED or sac-rlinf-sSEED with a summary.json, finished or
    # interrupted, e.g. `rlinf train examples/ppo_halfcheetah_zoo.yaml runner.seed=SEED --run-dir
    # RUN_ROOT/ppo-sSEED`; RUN_ROOT/sac-sb3-sSEED.json from a finished SB3 peer) instead of
    # training again.

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peers import silent_sb3
from _report import finish, fmt, machine, tree_cpu_s

DISTS = ("torch", "gymnasium", "mujoco", "stable-baselines3", "rlinf-algos")

ROOT = Path(__file__).resolve().parent.parent
ENV_ID = "HalfCheetah-v5"
PPO_CONFIG = ROOT / "examples" / "ppo_halfcheetah_zoo.yaml"
SAC_CONFIG = ROOT / "examples" / "sac_halfcheetah.yaml"
PUBLISHED_PPO = {"CleanRL": 1443, "RLlib target": 2000, "SB3 zoo (tuned)": 5819}
PPO_TARGET = 3000

SAC_HIDDEN = [256, 256]
SAC_BATCH, SAC_LR, SAC_TAU, SAC_GAMMA, SAC_STARTS, SAC_BUFFER = 256, 3e-4, 0.005, 0.99, 5000, 1_000_000
SAC_LOG = 5000  # env steps between progress samples of both peers
SAC_WINDOW = 10_000  # the return compared: episodes that ended in the last 10k steps
SAC_OVERRIDES = [
    f"algorithm.actor_lr={SAC_LR}",
    f"algorithm.critic_lr={SAC_LR}",
    f"algorithm.alpha_lr={SAC_LR}",
    f"algorithm.batch_size={SAC_BATCH}",
    f"algorithm.tau={SAC_TAU}",
    f"algorithm.gamma={SAC_GAMMA}",
    f"algorithm.learning_starts={SAC_STARTS}",
    f"algorithm.buffer_size={SAC_BUFFER}",
    "algorithm.updates_per_step=1.0",
    f"model.hidden_sizes=[{SAC_HIDDEN[0]},{SAC_HIDDEN[1]}]",
    "model.activation=relu",
    "env.num_envs=1",
    "runner.checkpoint_interval=0",
]


# -- process-tree CPU time ----------------------------------------------------------------------


class Child:
    """A peer subprocess whose process-tree CPU time is sampled while it runs."""

    def __init__(self, name: str, argv: list[str], log: Path, cwd: Path, threads: int = 1) -> None:
        self.name, self.log = name, log
        self.out = open(log, "w")  # noqa: SIM115 - closed in wait()
        n = str(threads)
        env = dict(os.environ, OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, PYTHONWARNINGS="ignore")
        # a job started in the background of a non-interactive shell inherits SIGINT ignored, and
        # so would its children: restore the default, so Ctrl-C / interrupt() reach rlinf's handler
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.t0 = time.perf_counter()
        self.cpu_s = 0.0
        self.samples: list[tuple[float, float]] = []  # (wall since start, tree CPU s)

    def sample(self) -> None:
        if self.proc.poll() is None:
            c = tree_cpu_s(self.proc.pid)
            self.cpu_s = max(self.cpu_s, c)
            self.samples.append((time.perf_counter() - self.t0, self.cpu_s))

    def interrupt(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def wait(self, timeout: float) -> int:
        try:
            _, status, usage = os.wait4(self.proc.pid, 0) if timeout <= 0 else _wait4(self.proc.pid, timeout)
            self.proc.returncode = os.waitstatus_to_exitcode(status)
            self.cpu_s = max(self.cpu_s, usage.ru_utime + usage.ru_stime)
        except ChildProcessError:
            pass
        except TimeoutError:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        return self.proc.returncode if self.proc.returncode is not None else -1

    def tail(self, n: int = 8) -> str:
        lines = [x for x in self.log.read_text(errors="replace").splitlines() if x.strip()]
        return "\n".join(lines[-n:]) or "(no output)"


def _wait4(pid: int, timeout: float) -> tuple[int, int, Any]:
    deadline = time.monotonic() + timeout
    while True:
        wpid, status, usage = os.wait4(pid, os.WNOHANG)
        if wpid:
            return wpid, status, usage
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.5)


def supervise(children: list[Child], max_wall: float | None, grace: float = 180.0) -> None:
    """Sample the children's CPU time every 2 s until all exit; past ``max_wall`` seconds send
    them SIGINT (rlinf writes its policy and summary; the SB3 child stops at its next step)."""
    t0 = time.perf_counter()
    interrupted = False
    try:
        while any(c.proc.poll() is None for c in children):
            for c in children:
                c.sample()
            if max_wall is not None and not interrupted and time.perf_counter() - t0 > max_wall:
                print(f"  --max-wall {max_wall:.0f} s reached: interrupting the peers", flush=True)
                for c in children:
                    c.interrupt()
                interrupted = True
            time.sleep(2.0)
    except KeyboardInterrupt:  # Ctrl-C: stop the peers too (never leave them running), report what they did
        print("  interrupted: stopping the peers; the figures cover what they did so far", flush=True)
        for c in children:
            c.interrupt()
    for c in children:
        c.wait(grace)


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                rows.append({k: float(row[k]) for k in ("step", "wall_s", "episode_return_mean", "episodes")})
            except (TypeError, ValueError):
                continue
    return rows


def evaluate(policy: Path, seed: int) -> float | None:
    if not policy.exists():
        return None
    from rlinf_algos.evaluate import evaluate_policy

    return float(evaluate_policy(policy, episodes=10, seed=10_000 + seed)["mean"])


# -- PPO ----------------------------------------------------------------------------------------


def ppo(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    children: list[tuple[int, Path, Child | None]] = []
    for seed in args.seeds:
        run_dir = root / f"ppo-s{seed}"
        summary = run_dir / "summary.json"
        if args.reuse and summary.exists():
            done = json.loads(summary.read_text())
            print(f"  ppo seed {seed}: reusing {run_dir} ({done.get('total_env_steps')} steps)", flush=True)
            children.append((seed, run_dir, None))
            continue
        argv = [
            sys.executable, "-m", "rlinf_core", "train", str(PPO_CONFIG),
            f"runner.seed={seed}", f"runner.total_steps={args.steps}",
            "--run-dir", str(run_dir), "--quiet",
        ]  # fmt: skip
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        children.append((seed, run_dir, Child(f"ppo-s{seed}", argv, root / f"ppo-s{seed}.log", ROOT)))
        if not args.parallel:
            supervise([children[-1][2]], args.max_wall)  # type: ignore[list-item]
    supervise([c for _, _, c in children if c is not None], args.max_wall)
    rows = []
    for seed, run_dir, child in children:
        summary_path = run_dir / "summary.json"
        if not summary_path.exists():
            tail = child.tail() if child else "(no summary.json)"
            rows.append({"seed": seed, "error": tail})
            print(f"  ppo seed {seed}: failed\n{tail}", flush=True)
            continue
        s = json.loads(summary_path.read_text())
        cpu = child.cpu_s if child else s.get("cpu_s")
        row = {
            "seed": seed,
            "steps": s["total_env_steps"],
            "final_return": s["final_return_mean"],
            "best_return": s["best_return_mean"],
            "eval_return": evaluate(run_dir / "policy.safetensors", seed),
            "sps": s["env_steps_per_s"],
            "wall_s": s["wall_s"],
            "cpu_s": cpu,
            "steps_per_cpu_s": s["total_env_steps"] / cpu if cpu else None,
            "interrupted": s.get("interrupted", False),
            "run_dir": str(run_dir),
        }
        rows.append(row)
    ok = [r for r in rows if "error" not in r]
    print(
        f"\nPPO {ENV_ID}, {PPO_CONFIG.name}\n"
        f"{'seed':>4} {'steps':>8} {'final return':>12} {'eval return':>11} {'env-steps/s':>11} "
        f"{'steps/CPU-s':>11} {'wall s':>7}"
    )
    for r in ok:
        print(
            f"{r['seed']:>4} {r['steps']:>8} {r['final_return']:>12.0f} {fmt(r['eval_return']):>11} "
            f"{r['sps']:>11.0f} {fmt(r['steps_per_cpu_s']):>11} {r['wall_s']:>7.0f}"
        )
    result: dict[str, Any] = {"config": str(PPO_CONFIG.relative_to(ROOT)), "seeds": rows}
    if ok:
        mean = statistics.mean(r["final_return"] for r in ok)
        evs = [r["eval_return"] for r in ok if r["eval_return"] is not None]
        result.update(
            final_return_mean=mean,
            final_return_std=statistics.pstdev(r["final_return"] for r in ok),
            eval_return_mean=statistics.mean(evs) if evs else None,
            target=PPO_TARGET,
            meets_target=mean >= PPO_TARGET and all(r["steps"] >= 1_000_000 for r in ok),
            published=PUBLISHED_PPO,
        )
        print(
            f"mean {mean:.0f} +- {result['final_return_std']:.0f} over {len(ok)} seeds (eval "
            f"{fmt(result['eval_return_mean'])}); target {PPO_TARGET} at 1M steps; published: "
            + ", ".join(f"{k} {v}" for k, v in PUBLISHED_PPO.items())
        )
    return result


# -- SAC ----------------------------------------------------------------------------------------


def sb3_sac_child(steps: int, seed: int, out: str, max_wall: float | None, threads: int = 1) -> None:
    """The SB3 SAC peer (runs in a subprocess, with ``threads`` torch threads): writes ``out``
    with a sample every SAC_LOG steps (step, wall s, process CPU s, cumulative episodes and
    return sum), the final policy's evaluation, and ``wall_s``; the final model goes beside it
    (``out`` with ``.zip``)."""
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(threads)
    interrupted = False

    def on_sigint(*_: Any) -> None:
        nonlocal interrupted
        interrupted = True

    signal.signal(signal.SIGINT, on_sigint)
    samples: list[dict[str, float]] = []
    t0 = c0 = 0.0
    eps, ret_sum = 0, 0.0

    class Progress(BaseCallback):
        def _on_training_start(self) -> None:
            nonlocal t0, c0
            t0, c0 = time.perf_counter(), time.process_time()

        def _on_step(self) -> bool:
            nonlocal eps, ret_sum
            for info in self.locals.get("infos", []):
                if "episode" in info:
                    eps += 1
                    ret_sum += float(info["episode"]["r"])
            n = self.num_timesteps
            if n % SAC_LOG == 0:
                samples.append(
                    {
                        "step": n,
                        "wall_s": time.perf_counter() - t0,
                        "cpu_s": time.process_time() - c0,
                        "episodes": eps,
                        "return_sum": ret_sum,
                    }
                )
                Path(out).write_text(json.dumps({"samples": samples}))
            late = max_wall is not None and time.perf_counter() - t0 > max_wall
            return not (interrupted or late)

    env = make_vec_env(ENV_ID, n_envs=1, seed=seed)
    model = SAC(
        "MlpPolicy",
        env,
        learning_rate=SAC_LR,
        buffer_size=SAC_BUFFER,
        learning_starts=SAC_STARTS,
        batch_size=SAC_BATCH,
        tau=SAC_TAU,
        gamma=SAC_GAMMA,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto_1.0",
        policy_kwargs={"net_arch": SAC_HIDDEN, "activation_fn": torch.nn.ReLU},
        device="cpu",
        seed=seed,
        verbose=0,
    )
    silent_sb3(model).learn(steps, callback=Progress())
    wall = time.perf_counter() - t0
    if not samples or samples[-1]["step"] != model.num_timesteps:
        samples.append(
            {
                "step": int(model.num_timesteps),
                "wall_s": wall,
                "cpu_s": time.process_time() - c0,
                "episodes": eps,
                "return_sum": ret_sum,
            }
        )
    model.save(str(Path(out).with_suffix(".zip")))  # beside rlinf's policy.safetensors
    eval_env = make_vec_env(ENV_ID, n_envs=1, seed=10_000 + seed)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)
    Path(out).write_text(
        json.dumps(
            {
                "samples": samples,
                "steps": int(model.num_timesteps),
                "wall_s": wall,
                "eval_return": float(mean),
                "interrupted": interrupted,
            }
        )
    )


def _window_return(samples: list[dict[str, float]], step: int) -> float | None:
    """Mean return of the episodes that ended in ``(step - SAC_WINDOW, step]``, from cumulative
    ``episodes`` / ``return_sum`` samples."""
    at = {int(s["step"]): s for s in samples}
    hi, lo = at.get(step), at.get(step - SAC_WINDOW)
    if hi is None:
        return None
    lo_eps, lo_sum = (lo["episodes"], lo["return_sum"]) if lo else (0, 0.0)
    n = hi["episodes"] - lo_eps
    return (hi["return_sum"] - lo_sum) / n if n > 0 else None


def _rlinf_samples(run_dir: Path, child: Child | None) -> list[dict[str, Any]]:
    """rlinf's metrics rows as cumulative samples: with fewer than 100 episodes so far the
    logged ``episode_return_mean`` is the mean of all of them, so ``mean * episodes`` is the
    cumulative return sum (valid up to 100 episodes: 100k steps of HalfCheetah); CPU time is
    the sampled process-tree CPU interpolated at the row's wall time (``None`` for a reused run,
    whose process this script did not watch)."""
    out = []
    startup = child_startup(child, run_dir) if child else 0.0  # the runner's clock starts once Ray is up
    cpu0 = (_cpu_at(child, startup) or 0.0) if child else 0.0
    for r in read_metrics(run_dir):
        eps = r["episodes"]
        ret = r["episode_return_mean"]
        out.append(
            {
                "step": r["step"],
                "wall_s": r["wall_s"],
                "cpu_s": (_cpu_at(child, r["wall_s"] + startup) or 0.0) - cpu0 if child else None,
                "episodes": eps if eps <= 100 else float("nan"),
                "return_sum": ret * eps if eps and not math.isnan(ret) else 0.0,
            }
        )
    return out


def child_startup(child: Child, run_dir: Path) -> float:
    """Seconds from launching the rlinf child to its runner's clock starting (imports, Ray and
    worker start-up): the child's wall time minus the run's ``wall_s``."""
    summary = run_dir / "summary.json"
    if not summary.exists() or not child.samples:
        return 0.0
    total = child.samples[-1][0]
    return max(0.0, total - float(json.loads(summary.read_text())["wall_s"]))


def _cpu_at(child: Child, wall: float) -> float | None:
    prev = None
    for w, c in child.samples:
        if w >= wall:
            if prev is None:
                return c
            (w0, c0) = prev
            return c0 + (c - c0) * (wall - w0) / max(w - w0, 1e-9)
        prev = (w, c)
    return child.samples[-1][1] if child.samples else None


def sb3_threads(args: argparse.Namespace) -> int:
    """SB3's torch threads: ``--sb3-threads``, else every core when it runs alone (rlinf's
    workers use them all too) and 1 when the peers share the machine."""
    if args.sb3_threads:
        return int(args.sb3_threads)
    return (os.cpu_count() or 1) if args.alone else 1


def _sac_children(args: argparse.Namespace, root: Path, seed: int) -> tuple[Child | None, Child | None]:
    """Start (or, with ``--reuse``, skip) the two peers of one seed: one after the other when
    ``args.alone`` (each has the machine to itself), else at the same time."""
    run_dir = root / f"sac-rlinf-s{seed}"
    sb3_out = root / f"sac-sb3-s{seed}.json"
    rl_argv = [
        sys.executable, "-m", "rlinf_core", "train", str(SAC_CONFIG),
        f"runner.seed={seed}", f"runner.total_steps={args.steps}", f"runner.log_interval={SAC_LOG}",
        f"runner.scheduler={args.scheduler}",
        *SAC_OVERRIDES, *args.rlinf_set, "--run-dir", str(run_dir), "--quiet",
    ]  # fmt: skip
    sb_argv = [
        sys.executable, os.path.abspath(__file__), "--_sb3_sac",
        json.dumps([args.steps, seed, str(sb3_out), args.max_wall, sb3_threads(args)]),
    ]  # fmt: skip
    reuse_rl = args.reuse and (run_dir / "summary.json").exists()
    reuse_sb = args.reuse and sb3_out.exists() and "eval_return" in json.loads(sb3_out.read_text())
    if reuse_rl or reuse_sb:
        print(
            f"  sac seed {seed}: reusing {' and '.join(n for n, r in (('rlinf', reuse_rl), ('SB3', reuse_sb)) if r)}"
        )
    if reuse_rl:
        print("    (rlinf's steps per CPU-second are unknown for a reused run)")
    starts = [
        (name, argv, log, cwd, threads)
        for name, argv, log, cwd, threads, reuse in (
            (f"sac-rlinf-s{seed}", rl_argv, root / f"sac-rlinf-s{seed}.log", ROOT, 1, reuse_rl),
            (f"sac-sb3-s{seed}", sb_argv, root / f"sac-sb3-s{seed}.log", root, sb3_threads(args), reuse_sb),
        )
        if not reuse
    ]
    wall = args.max_wall + 120 if args.max_wall else None
    started: dict[str, Child] = {}
    if args.alone:
        for name, argv, log, cwd, threads in starts:
            print(f"  sac seed {seed}: {name} running alone", flush=True)
            started[name] = Child(name, argv, log, cwd, threads)
            supervise([started[name]], wall)
    elif starts:
        print(f"  sac seed {seed}: {' and '.join(n for n, *_ in starts)} running side by side", flush=True)
        started = {name: Child(name, argv, log, cwd, threads) for name, argv, log, cwd, threads in starts}
        supervise(list(started.values()), wall)
    return started.get(f"sac-rlinf-s{seed}"), started.get(f"sac-sb3-s{seed}")


def sac(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    results = []
    for seed in args.seeds:
        run_dir = root / f"sac-rlinf-s{seed}"
        sb3_out = root / f"sac-sb3-s{seed}.json"
        rl, sb = _sac_children(args, root, seed)
        peers: dict[str, dict[str, Any]] = {}
        rl_summary = run_dir / "summary.json"
        rl_rows = _rlinf_samples(run_dir, rl)
        if rl_summary.exists() or rl_rows:
            s = json.loads(rl_summary.read_text()) if rl_summary.exists() else {}
            peers["rlinf"] = {
                "samples": rl_rows,
                "steps": s.get("total_env_steps", int(rl_rows[-1]["step"]) if rl_rows else 0),
                "wall_s": s.get("wall_s"),
                "eval_return": evaluate(run_dir / "policy.safetensors", seed),
                "interrupted": s.get("interrupted", not rl_summary.exists()),
            }
        if not rl_summary.exists():
            print(f"  rlinf SAC seed {seed}: no summary.json:\n{rl.tail() if rl else ''}", flush=True)
        if sb3_out.exists():
            peers["sb3"] = json.loads(sb3_out.read_text())
            peers["sb3"].setdefault(
                "steps", peers["sb3"]["samples"][-1]["step"] if peers["sb3"]["samples"] else 0
            )
        else:
            print(f"  SB3 SAC seed {seed} failed:\n{sb.tail() if sb else ''}", flush=True)
        steps_at = [{int(x["step"]) for x in p["samples"]} for p in peers.values()]
        common = (
            max(set.intersection(*steps_at)) if len(steps_at) == 2 and set.intersection(*steps_at) else None
        )
        row: dict[str, Any] = {"seed": seed, "compared_at_step": common}
        for name, p in peers.items():
            at = next((x for x in p["samples"] if int(x["step"]) == common), None) if common else None
            st = next((x for x in p["samples"] if int(x["step"]) == SAC_STARTS), None)
            learn = (
                {k: at[k] - st[k] if at[k] is not None else None for k in ("step", "wall_s", "cpu_s")}
                if at and st and at["step"] > st["step"]
                else None
            )
            row[name] = {
                "return_last_10k": _window_return(p["samples"], common) if common else None,
                "sps_overall": at["step"] / at["wall_s"] if at and at["wall_s"] else None,
                # the learning phase: from learning_starts (random actions, no updates) to the step compared
                "sps": learn["step"] / learn["wall_s"] if learn and learn["wall_s"] > 0 else None,
                "cpu_s": learn["cpu_s"] if learn else None,
                "steps_per_cpu_s": learn["step"] / learn["cpu_s"] if learn and learn["cpu_s"] else None,
                "final_steps": p.get("steps"),
                "final_eval_return": p.get("eval_return"),
                "curve": [
                    {"step": int(x["step"]), "return_last_10k": _window_return(p["samples"], int(x["step"]))}
                    for x in p["samples"]
                    if int(x["step"]) % SAC_WINDOW == 0
                ],
            }
        if "rlinf" in row and "sb3" in row and row["sb3"]["sps"] and row["rlinf"]["sps"]:
            row["sps_ratio"] = row["rlinf"]["sps"] / row["sb3"]["sps"]
        results.append(row)
    print(f"\nSAC {ENV_ID}: rlinf vs SB3, same settings and seeds, compared at the same env step")
    print(
        f"{'seed':>4} {'peer':<6} {'at step':>8} {'return (last 10k)':>17} {'learning sps':>12} "
        f"{'steps/CPU-s':>11} {'eval (final)':>12} {'final step':>10}"
    )
    for row in results:
        for name in ("rlinf", "sb3"):
            if name not in row:
                continue
            p = row[name]
            print(
                f"{row['seed']:>4} {name:<6} {fmt(row['compared_at_step'], 'd'):>8} "
                f"{fmt(p['return_last_10k']):>17} {fmt(p['sps'], '.1f'):>12} {fmt(p['steps_per_cpu_s'], '.1f'):>11} "
                f"{fmt(p['final_eval_return']):>12} {fmt(p['final_steps'], 'd'):>10}"
            )
        if "sps_ratio" in row:
            print(f"     rlinf/SB3 env-steps/s while learning: {row['sps_ratio']:.2f}x")
    summary = _sac_summary(results)
    if len(results) > 1:
        print("mean over seeds:")
        for name in ("rlinf", "sb3"):
            m = summary.get(name, {})
            print(
                f"     {name:<6} return (last 10k) {fmt(m.get('return_last_10k'))} +- "
                f"{fmt(m.get('return_last_10k_std'))}, eval {fmt(m.get('final_eval_return'))}"
            )
    return {
        "seeds": results,
        "summary": summary,
        "settings": {
            "overrides": SAC_OVERRIDES + args.rlinf_set,
            "config": str(SAC_CONFIG.relative_to(ROOT)),
            "layout": "alone" if args.alone else "together",
            "sb3_threads": sb3_threads(args),
        },
    }


def _sac_summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Means (and the spread of the return) over the seeds where the figure exists."""
    out: dict[str, Any] = {}
    for name in ("rlinf", "sb3"):
        peer: dict[str, Any] = {}
        for key in ("return_last_10k", "final_eval_return", "sps"):
            vals = [r[name][key] for r in results if name in r and r[name].get(key) is not None]
            peer[key] = statistics.fmean(vals) if vals else None
            if key == "return_last_10k":
                peer["return_last_10k_std"] = statistics.pstdev(vals) if len(vals) > 1 else None
        out[name] = peer
    ratios = [r["sps_ratio"] for r in results if "sps_ratio" in r]
    out["sps_ratio_mean"] = statistics.fmean(ratios) if ratios else None
    return out


# -- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", nargs="?", choices=("ppo", "sac", "all"), help="which comparison to run")
    ap.add_argument("--quick", action="store_true", help="PPO 20k steps, SAC 8k steps, one seed")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default: ppo 1,2,3; sac 1)")
    ap.add_argument("--steps", type=int, default=None, help="env steps (default: ppo 1M, sac 100k)")
    ap.add_argument(
        "--max-wall", type=float, default=None, help="interrupt the peers after this many seconds"
    )
    ap.add_argument("--run-root", type=Path, default=None, help="keep the run directories here")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="report the finished runs already in --run-root, run only the others",
    )
    ap.add_argument(
        "--together",
        dest="alone",
        action="store_false",
        help="SAC: run rlinf and SB3 at the same time (default: one after the other, each with the "
        "machine to itself)",
    )
    ap.add_argument("--sequential", dest="parallel", action="store_false", help="PPO: one seed at a time")
    ap.add_argument(
        "--scheduler",
        default="ray",
        help="SAC: rlinf's runner.scheduler (ray: the distributed asynchronous actor-learner; "
        "local: the in-process loop)",
    )
    ap.add_argument(
        "--sb3-threads",
        type=int,
        default=None,
        help="SAC: SB3's torch threads (default: every core when the peers run one after the other, else 1)",
    )
    ap.add_argument(
        "--rlinf-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="SAC: one more override for rlinf's run, after the comparison's own (repeatable), e.g. "
        "model.log_std_bound=clip",
    )
    ap.add_argument("--_sb3_sac", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._sb3_sac:
        sb3_sac_child(*json.loads(args._sb3_sac))
        return {}
    if args.which is None:
        ap.error("say which comparison to run: ppo, sac or all")
    try:
        seeds_arg = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    except ValueError:
        ap.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "machine": machine(DISTS),
        "quick": args.quick,
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = (args.run_root or Path(tmp)).resolve()
        root.mkdir(parents=True, exist_ok=True)
        for which in ("ppo", "sac"):
            if args.which not in (which, "all"):
                continue
            sub = argparse.Namespace(**vars(args))
            sub.seeds = seeds_arg or ([1] if which == "sac" or args.quick else [1, 2, 3])
            sub.steps = args.steps or ((20_000 if which == "ppo" else 8_000) if args.quick else None)
            sub.steps = sub.steps or (1_000_000 if which == "ppo" else 100_000)
            report[which] = (ppo if which == "ppo" else sac)(sub, root)
    return finish(report, t0, args.json)


if __name__ == "__main__":
    main()

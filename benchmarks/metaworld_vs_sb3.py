"""PPO on MetaWorld (``reach-v3`` or ``push-v3``, state) through ``rlinf train`` and through
Stable-Baselines3's PPO on the same simulator, at equal wall time, seeds side by side (issue 49).

- **rlinf**: ``rlinf train CONFIG runner.scheduler=local runner.seed=S`` (``--config``, default
  ``examples/metaworld_reach.yaml``; ``examples/metaworld_push.yaml`` for push), stopped with
  SIGTERM once its training clock reaches ``--wall`` seconds (it finishes the iteration in
  flight and writes its policy); a run that reaches ``--steps`` (default the YAML's
  ``runner.total_steps``) first ends there.
- **SB3**: PPO on the env rlinf builds (8 copies of the task in one MetaWorld process, in
  MetaWorld's own interpreter: :class:`~rlinf_algos.families.subproc.RemoteVectorEnv` through
  ``_sb3.SameStepVecEnv``), with the YAML's settings (``_sb3.ppo_like``: rollout length,
  minibatch, epochs, lr and its decay, gamma, lambda, clips, coefficients, network,
  ``log_std_init``, observation and reward normalisation by ``VecNormalize``). It stops at
  ``--steps`` or at the wall budget, whichever comes first. rlinf's ``algorithm.obs_norm_steps``
  (statistics kept after that many steps) has no SB3 counterpart: ``VecNormalize`` updates its
  statistics throughout, SB3's default.
- **Evaluation**, the same for both final policies: deterministic, 50 episodes from the task's
  50 fixed initial states, reset seeds 10000..10049, 10 at a time (``rlinf eval RUN --suite
  metaworld:TASK --episodes-per-task 50`` for rlinf; the same episode loop,
  :func:`rlinf_algos.evaluate.play_episodes`, for SB3): ``success_at_end`` and
  ``success_once`` with 95 % Wilson intervals.

``--parallel`` runs the two sides of a seed at the same time, rlinf pinned to CPU 0 and SB3 to
CPU 1, SB3 capped at ``--wall``; without it, rlinf first, then SB3 capped at the rlinf run's
training time, each on CPU 0 (``_equal_wall``, shared with ``maniskill_vs_sb3.py``).

Usage::

    uv run --group bench python benchmarks/metaworld_vs_sb3.py --seeds 0,1,2 --wall 600 \\
        --parallel --run-root RUNS --json benchmarks/results/metaworld_reach_vs_sb3_parallel.json
    uv run --group bench python benchmarks/metaworld_vs_sb3.py --config examples/metaworld_push.yaml \\
        --seeds 0 --wall 1350 --parallel --run-root RUNS --json OUT.json
    # --reuse: report what RUN_ROOT already holds for a seed instead of running it again;
    # --sb3-only / --rlinf-only: one side

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _equal_wall import Pair, new_report, open_envs, run_seeds, settings, side_arguments
from _report import finish, success_eval

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "metaworld_reach.yaml"
EVAL_EPISODES = 50
EVAL_SEED = 10_000


def make_envs(config: Path, task: str, num_envs: int, seed: int) -> Any:
    """The vector env rlinf builds for ``config`` with ``env.id`` = ``task``."""
    return open_envs(config, num_envs, seed, task)


def evaluate(act: Any, task: str, config: Path = CONFIG) -> dict[str, Any]:
    """``act(obs [N, 39]) -> actions``, 50 episodes from the fixed initial states, 10 at a time."""
    seeds = [EVAL_SEED + e for e in range(EVAL_EPISODES)]
    envs = make_envs(config, task, 10, EVAL_SEED).unwrapped
    return success_eval(envs, act, seeds, inits=list(range(EVAL_EPISODES)))


def sb3_child(config: Path, task: str, seed: int, steps: int, wall: float, out: str) -> None:
    """SB3 PPO in this process (see the module docstring); writes its figures to ``out``."""
    from _sb3 import sb3_side

    s = settings(config)
    envs = make_envs(config, task, int(s["env"].get("num_envs", 8)), seed).unwrapped
    sb3_side(envs, s, seed, steps, wall, lambda act: evaluate(act, task, config), out)


def pair(config: Path, task: str, seed: int, steps: int, run_root: Path) -> Pair:
    rlinf = [
        "rlinf", "train", str(config), f"env.id={task}", "runner.scheduler=local", f"runner.seed={seed}",
        f"runner.total_steps={steps}", "runner.log_interval=4000", "runner.loggers=[csv]",
        "--run-dir", str(run_root / f"rlinf-{task}-s{seed}"),
    ]  # fmt: skip
    out = run_root / f"sb3-{task}-s{seed}.json"

    def sb3(wall: float) -> list[str]:
        return [
            sys.executable, __file__, "--config", str(config), "--task", task,
            "--_sb3", str(seed), str(steps), str(wall), str(out),
        ]  # fmt: skip

    return Pair(seed, run_root, task, rlinf, sb3, f"metaworld:{task}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=CONFIG, help="the rlinf example (default: %(default)s)")
    p.add_argument("--task", default=None, help="MetaWorld task (default: the YAML's env.id)")
    side_arguments(p, wall=3600.0)
    p.add_argument(
        "--steps", type=int, default=None, help="env steps each side may train (default: the YAML's)"
    )
    p.add_argument("--_sb3", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    config = args.config.resolve()
    if not config.is_file():
        p.error(f"--config {args.config}: no such file")
    s = settings(config)
    task = args.task or s["env"]["id"]
    if args._sb3:
        sb3_child(config, task, int(args._sb3[0]), int(args._sb3[1]), float(args._sb3[2]), args._sb3[3])
        return
    if args.run_root is None:
        p.error("--run-root is required")
    t0 = time.perf_counter()
    args.run_root.mkdir(parents=True, exist_ok=True)
    steps = args.steps or int(s["runner"]["total_steps"])
    shown = config.relative_to(ROOT) if config.is_relative_to(ROOT) else Path("CONFIG.yaml")
    title = f"PPO on MetaWorld {task} (state): rlinf vs Stable-Baselines3 at equal wall time"
    train = f"env.id={task} runner.log_interval=4000"
    report = new_report(
        args, s, title=title, steps=steps, config=str(shown), train=train, suite=f"metaworld:{task}"
    )
    run_seeds(report, args, lambda seed: pair(config, task, seed, steps, args.run_root))
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

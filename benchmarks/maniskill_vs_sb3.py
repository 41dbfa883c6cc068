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
to CPU 0. The report records which. The harness is ``_equal_wall`` (shared with
``metaworld_vs_sb3.py``), SB3's PPO ``_sb3.ppo_like``.

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
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _equal_wall import Pair, new_report, open_envs, run_seeds, side_arguments
from _equal_wall import settings as _settings
from _report import finish, success_eval

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "maniskill_pushcube.yaml"
TASK = "PushCube-v1"
SUITE = f"maniskill:{TASK}"
EVAL_EPISODES = 50
EVAL_SEED = 10_000
EVAL_ENVS = 10


def settings() -> dict[str, Any]:
    """The example's settings (``_equal_wall.settings`` of ``CONFIG``)."""
    return _settings(CONFIG)


def make_envs(num_envs: int, seed: int) -> Any:
    """The vector env rlinf builds for the example (its family, task and options)."""
    return open_envs(CONFIG, num_envs, seed)


def evaluate(act: Any) -> dict[str, Any]:
    """``act(obs [N, D]) -> actions`` for 50 episodes, as ``rlinf eval --suite`` plays them."""
    seeds = [EVAL_SEED + e for e in range(EVAL_EPISODES)]
    return success_eval(make_envs(EVAL_ENVS, EVAL_SEED), act, seeds)


def sb3_child(seed: int, steps: int, wall: float, out: str) -> None:
    """SB3 PPO in this process (see the module docstring); writes its figures to ``out``."""
    from _sb3 import sb3_side

    s = settings()
    sb3_side(make_envs(int(s["env"].get("num_envs", 8)), seed).unwrapped, s, seed, steps, wall, evaluate, out)


def pair(seed: int, steps: int, run_root: Path) -> Pair:
    rlinf = [
        "rlinf", "train", str(CONFIG), "runner.scheduler=local", f"runner.seed={seed}",
        f"runner.total_steps={steps}", "runner.log_interval=1600", "runner.loggers=[csv]",
        "--run-dir", str(run_root / f"rlinf-{TASK}-s{seed}"),
    ]  # fmt: skip
    out = run_root / f"sb3-{TASK}-s{seed}.json"
    return Pair(
        seed,
        run_root,
        TASK,
        rlinf,
        lambda wall: [sys.executable, __file__, "--_sb3", str(seed), str(steps), str(wall), str(out)],
        SUITE,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    side_arguments(p, wall=600.0)
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="env steps each side may train (default: the YAML's total_steps)",
    )
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
    title = f"PPO on ManiSkill3 {TASK} (state, CPU sim): rlinf vs Stable-Baselines3 at equal wall time"
    config = str(CONFIG.relative_to(ROOT))
    report = new_report(
        args,
        s,
        title=title,
        steps=steps,
        config=config,
        train="runner.log_interval=1600",
        suite=SUITE,
        simulators=("mani-skill", "sapien"),
    )
    run_seeds(report, args, lambda seed: pair(seed, steps, args.run_root))
    finish(report, t0, args.json)


if __name__ == "__main__":
    main()

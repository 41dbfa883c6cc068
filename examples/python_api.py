"""rlinf from Python, notebook style: train CartPole, load the policy, drive it in a plain loop.

    uv run python examples/python_api.py                  # the example's 100k env steps
    uv run python examples/python_api.py --steps 20000    # a shorter run

Each step is one notebook cell: ``rlinf_algos.train`` runs the same pipeline as ``rlinf train``
(compose, validate, run; here in this process), returns the run's summary and leaves a run
directory; ``rlinf_algos.load_policy`` reads that directory back (safetensors and JSON, no
pickle) and gives a policy whose ``act`` takes one observation or a batch, as SB3's ``predict``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np

import rlinf_algos

EXAMPLE = Path(__file__).resolve().parent / "cartpole.yaml"


def main() -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps to train for")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--episodes", type=int, default=5, help="episodes of the plain loop")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="rlinf-api-")) / "cartpole"

    # 1. train: a path, a dict or the pydantic sections, plus command-line style overrides
    summary = rlinf_algos.train(
        EXAMPLE,
        run_dir=run_dir,
        overrides=[f"runner.total_steps={args.steps}", f"runner.seed={args.seed}"],
    )
    print(f"trained {summary['total_env_steps']} env steps in {summary['wall_s']:.0f} s -> {run_dir}")

    # 2. load the policy the run saved
    policy = rlinf_algos.load_policy(run_dir)

    # 3. run it in a plain gymnasium loop, one observation at a time
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=10_000 + episode)
        done, total = False, 0.0
        while not done:
            action = policy.act(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()

    # ... or a batch of observations at once
    batch = np.stack([env.observation_space.sample() for _ in range(4)])
    actions = policy.act(batch)
    print(f"returns {returns} (mean {np.mean(returns):.1f}); a batch of 4 observations -> actions {actions}")
    return {"mean_return": float(np.mean(returns)), "total_env_steps": float(summary["total_env_steps"])}


if __name__ == "__main__":
    main()

"""One rank of a PPO learner group (run as a process by test_algos_parallel.py):

    python ppo_rank.py RANK WORLD PORT STRATEGY MICRO OUT [RESUME_FROM]

Builds the same policy and rollout on every rank (rank 0's weights win: the others start from
other seeds on purpose), optionally loads a checkpoint, runs one PPO update and writes the
learner's state (single-process format) to OUT from rank 0.
"""

from __future__ import annotations

import sys

import torch

from rlinf_algos.models import build_policy
from rlinf_algos.parallel import DataParallel
from rlinf_algos.ppo.config import PPOConfig
from rlinf_algos.ppo.learner import PPOLearner, PPORollout

SPEC = {
    "type": "mlp", "cls": "GaussianActorCritic", "obs_dim": 5, "act_dim": 2, "hidden": [16, 16],
    "activation": "tanh", "log_std_init": 0.0, "normalize_obs": True,
}  # fmt: skip
CFG = PPOConfig(minibatch_size=32, update_epochs=2, lr=1e-3, target_kl=0.5)


def rollout(T: int = 16, N: int = 8) -> PPORollout:
    g = torch.Generator().manual_seed(7)
    return PPORollout(
        obs=torch.randn(T, N, 5, generator=g),
        actions=torch.randn(T, N, 2, generator=g),
        log_probs=torch.randn(T, N, generator=g) * 0.1 - 2.0,
        values=torch.randn(T, N, generator=g),
        rewards=torch.randn(T, N, generator=g),
        terminated=torch.rand(T, N, generator=g) < 0.05,
        truncated=torch.zeros(T, N, dtype=torch.bool),
        final_values=torch.zeros(T, N),
        last_value=torch.randn(N, generator=g),
    )


def main(argv: list[str]) -> None:
    rank, world, port = int(argv[0]), int(argv[1]), int(argv[2])
    strategy, micro, out = argv[3], (int(argv[4]) or None), argv[5]
    resume = argv[6] if len(argv) > 6 else None
    torch.set_num_threads(1)
    dp = DataParallel.start(
        rank, world, strategy=strategy, micro_batch_size=micro, timeout=60, addr="127.0.0.1", port=port
    )
    torch.manual_seed(3 if rank == 0 else 100 + rank)
    model = dp.wrap(build_policy(SPEC), methods=("evaluate", "value"))
    learner = PPOLearner(model, CFG, seed=11, dp=dp)
    if resume:
        learner.load_state_dict(torch.load(resume, weights_only=False))
    learner.update(rollout())
    state = learner.state_dict()  # a collective with FSDP: every rank calls
    if rank == 0:
        torch.save(state, out)
    dp.close()


if __name__ == "__main__":
    main(sys.argv[1:])

"""One rank of an embodied GRPO learner group (run as a process by test_algos_parallel.py):

    python grpo_rank.py RANK WORLD PORT STRATEGY MICRO AGGREGATION OUT

The policy of ppo_rank.py, 16 episodes of different lengths (4 groups of 4), one GRPO update
with a k3 KL term; rank 0 writes the learner's state to OUT.
"""

from __future__ import annotations

import sys

import torch
from ppo_rank import SPEC  # the script's folder is on sys.path

from rlinf_algos.grpo.config import GRPOConfig
from rlinf_algos.grpo.learner import GRPOLearner, GRPORollout
from rlinf_algos.models import build_policy
from rlinf_algos.parallel import DataParallel

S, L = 16, 12


def rollout() -> tuple[GRPORollout, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    lengths = torch.randint(3, L + 1, (S,), generator=g)
    mask = (torch.arange(L)[None, :] < lengths[:, None]).float()
    r = GRPORollout(
        obs=torch.randn(S, L, 5, generator=g),
        actions=torch.randn(S, L, 2, generator=g),
        log_probs=torch.randn(S, L, generator=g) * 0.1 - 2.0,
        mask=mask,
        returns=torch.randn(S, generator=g),
        lengths=lengths,
    )
    return r, torch.randn(S, L, generator=g) * 0.1 - 2.0


def main(argv: list[str]) -> None:
    rank, world, port = int(argv[0]), int(argv[1]), int(argv[2])
    strategy, micro, aggregation, out = argv[3], (int(argv[4]) or None), argv[5], argv[6]
    torch.set_num_threads(1)
    dp = DataParallel.start(
        rank, world, strategy=strategy, micro_batch_size=micro, timeout=60, addr="127.0.0.1", port=port
    )
    torch.manual_seed(3 if rank == 0 else 100 + rank)
    model = dp.wrap(build_policy(SPEC), methods=("evaluate", "value"))
    cfg = GRPOConfig(group_size=4, num_groups=4, minibatch_size=40, update_epochs=2, lr=1e-3, kl_coef=0.05,
                     aggregation=aggregation)  # fmt: skip
    learner = GRPOLearner(model, cfg, seed=8, reference=False, dp=dp)
    r, ref = rollout()
    metrics = learner.update(r, ref_log_probs=ref)
    state = learner.state_dict()
    if rank == 0:
        torch.save({**state, "metrics": metrics}, out)
    dp.close()


if __name__ == "__main__":
    main(sys.argv[1:])

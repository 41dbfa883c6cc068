"""The tolerance the GPU comparisons put on weights after an update (issue 52, item 5): Adam can
move a parameter whose gradient is near 0 by about ``lr`` a step in either direction, so two
devices' runs of one update may differ by up to ``2 * lr * adam_move_bound(steps)`` there."""

from __future__ import annotations

import torch


def test_adam_moves_no_parameter_further_than_the_bound_the_gpu_tests_use() -> None:
    """:func:`rlinf_algos.optim.adam_move_bound` (the tolerance on weights after an update on two
    devices): real Adam steps on gradients of every scale and sign, including near-zero ones
    whose sign flips, never move a parameter further than ``lr * bound``; a constant gradient
    moves it by exactly ``lr`` a step (so the bound is close to tight)."""
    from rlinf_algos.optim import adam_move_bound

    assert adam_move_bound(1) == 1.0 and 6.0 < adam_move_bound(6) < 6.1
    lr, steps = 1e-2, 6
    g = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.zeros(4096, dtype=torch.float64))
    opt = torch.optim.Adam([p], lr=lr, eps=0.0)
    scale = 10.0 ** torch.randint(-9, 3, (4096,), generator=g).double()
    for _ in range(steps):
        p.grad = torch.randn(4096, generator=g, dtype=torch.float64) * scale
        opt.step()
    assert float(p.detach().abs().max()) <= lr * adam_move_bound(steps) * (1 + 1e-9)
    q = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = torch.optim.Adam([q], lr=lr, eps=0.0)
    for _ in range(steps):
        q.grad = torch.ones(1, dtype=torch.float64)
        opt.step()
    assert abs(float(q.detach()) + lr * steps) < 1e-12

"""One rank of a gradient sync over Gloo (run as a process by test_algos_parallel.py):

    python sync_rank.py RANK WORLD PORT CAP OUT

Every rank gives its parameters gradients ``(rank + 1) * base`` (one parameter without a
gradient on rank 0 only, one without on every rank), syncs them with ``bucket_bytes = CAP`` while
recording every ``torch.cat`` the sync makes, and rank 0 writes the gradients and the largest
concatenation (in bytes) to OUT.
"""

from __future__ import annotations

import sys

import torch
from torch.overrides import TorchFunctionMode

from rlinf_algos.parallel import DataParallel


class CatSizes(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if func is torch.cat:
            self.sizes.append(out.numel() * out.element_size())
        return out


def main(argv: list[str]) -> None:
    rank, world, port, cap, out = int(argv[0]), int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    torch.set_num_threads(1)
    dp = DataParallel.start(rank, world, timeout=60, addr="127.0.0.1", port=port)
    dp.bucket_bytes = cap
    shapes = [(4, 4), (3,), (64, 8), (5,), (2, 2), (7,)]
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for i, p in enumerate(params):
        if i == 5 or (i == 3 and rank == 0):
            continue  # 5: no rank touched it; 3: only rank 1 did
        g = torch.Generator().manual_seed(i)
        p.grad = torch.randn(p.shape, generator=g) * (rank + 1)
    with CatSizes() as cats:
        dp.sync_grads(params)
    if rank == 0:
        torch.save({"grads": [p.grad for p in params], "max_cat": max(cats.sizes, default=0)}, out)
    dp.close()


if __name__ == "__main__":
    main(sys.argv[1:])

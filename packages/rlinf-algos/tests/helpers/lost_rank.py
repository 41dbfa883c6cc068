"""One rank of a learner group whose rank 1 dies mid wait (run as a process by
test_algos_parallel.py):

    python lost_rank.py RANK WORLD PORT MODE OUT

Rank 1 joins the group, waits a second (rank 0 is by then waiting for it: in an all-reduce for
``MODE`` ``collective``, in :meth:`~rlinf_algos.parallel.DataParallel.arrive` for ``arrive``)
and kills itself with SIGKILL. Rank 0 writes to OUT, as JSON, the first line of the error it
ends with (:meth:`~rlinf_algos.parallel.DataParallel.lost` for a failed collective, as the actor
worker makes it), the seconds it waited, rank 1's pid and node, and the group's timeout.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from rlinf_algos.parallel import DataParallel

TIMEOUT = 60.0


def main(argv: list[str]) -> None:
    rank, world, port, mode, out = int(argv[0]), int(argv[1]), int(argv[2]), argv[3], argv[4]
    torch.set_num_threads(1)
    dp = DataParallel.start(rank, world, timeout=TIMEOUT, addr="127.0.0.1", port=port)
    if rank == 1:
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        if mode == "collective":
            try:
                dist.all_reduce(torch.ones(4))
            except RuntimeError as err:
                raise dp.lost("sync_grads()", time.monotonic() - t0, err) from None
        else:
            dp.arrive("update 1")
        message = "(no error)"
    except Exception as err:
        message = f"{type(err).__name__}: {str(err).splitlines()[0]}"
    node, _, pid = dp.peers[1].partition(" (pid ")
    with open(out, "w") as f:
        json.dump(
            {
                "message": message,
                "waited": time.monotonic() - t0,
                "pid": int(pid.rstrip(")")),
                "node": node,
                "timeout": TIMEOUT,
            },
            f,
        )
    os._exit(0)  # the group is broken: leave without its teardown


if __name__ == "__main__":
    main(sys.argv[1:])

"""What every role's worker process does the same way, whatever the algorithm: report its process
id, set its threads, seed its random streams, hold the flow's domain object for its role (its
*body*), wait with timeouts and end an iteration on the driver's ``ABORT``.

A role worker is a thin host. The flow the driver launches it with (an embodied algorithm's
:class:`~rlinf_algos.embodied.recipe.Recipe`, the language-model :class:`~rlinf_algos.lm.flow.LMFlow`)
builds the body in the worker's process (``flow.body(role, host)``); the host's methods are the
role's calls, each handing the domain work to the body.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from rlinf_algos.runtime.host_values import to_cpu
from rlinf_core.errors import RlinfError
from rlinf_core.weights import WeightSync
from rlinf_core.worker import Worker

__all__ = ["RoleWorker", "close_links", "set_threads"]


def set_threads(n: int) -> None:
    """``n`` intra-op torch threads and one inter-op thread in this worker process."""
    import torch

    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass


def close_links(links: dict[int, Any]) -> None:
    """Close every direct link of ``links`` and forget them."""
    for link in links.values():
        link.close()
    links.clear()


class RoleWorker(Worker):
    """The host of one role's process.

    Args:
        flow: what builds the role's body (``flow.body(role, host)``); it travels to the process.
        timeout: seconds any wait of the role may take before it reports what it waited for
            (``runner.worker_timeout``).
        channels: the run's channels the role reads or writes, by name.
        weights: the run's weight sync the role publishes or follows (a
            :class:`~rlinf_core.weights.WeightSync` handle the driver made through
            :meth:`rlinf_core.Scheduler.weight_sync`; it travels as a call argument).
        seed: the base seed of the role's random streams (rank ``r`` uses ``seed + 7919 * r``).
        threads: intra-op torch threads (``0``: leave torch alone: a light role without torch).
        options: further settings the body reads (``host.options``).
    """

    role: ClassVar[str]

    def __init__(
        self,
        flow: Any,
        *,
        timeout: float = 300.0,
        channels: dict[str, Any] | None = None,
        weights: WeightSync | None = None,
        seed: int = 0,
        threads: int = 1,
        **options: Any,
    ) -> None:
        self.flow = flow
        self.timeout = float(timeout)
        self.channels = dict(channels or {})
        self.weights = weights
        self.seed = int(seed)
        self.threads = int(threads)
        self.options = options
        self.body: Any = None

    @property
    def rank_seed(self) -> int:
        """The seed of this rank's random streams."""
        return self.seed + 7919 * self.rank

    def setup(self) -> None:
        if self.threads:
            set_threads(self.threads)
        self.body = self.flow.body(self.role, self)

    def teardown(self) -> None:
        close = getattr(self.body, "close", None)
        if close is not None:
            close()

    def pid(self) -> int:
        """This worker's process id (the driver keeps it in ``pids``; fault tests and
        ``benchmarks/chaos.py`` and ``benchmarks/chaos_quickstart.py`` kill the process by it)."""
        return os.getpid()

    def channel(self, name: str) -> Any:
        """The run's channel ``name`` (an error naming the role when it was not given one)."""
        try:
            return self.channels[name]
        except KeyError:
            raise RlinfError(
                f"{self.role} rank {self.rank}: no {name!r} channel (it has {sorted(self.channels)})"
            ) from None

    def _body_call(self, method: str) -> Any:
        """The body's ``method``, its return value passed through
        :func:`~rlinf_algos.runtime.host_values.to_cpu` (it goes back to the driver)."""
        fn = getattr(self.body, method, None)
        if fn is None:
            raise RlinfError(
                f"{self.role} rank {self.rank}: the {type(self.body).__name__} of this run has no {method}() "
                f"(the flow {type(self.flow).__name__} does not use this call)"
            )

        def call(*args: Any, **kwargs: Any) -> Any:
            return to_cpu(fn(*args, **kwargs))

        return call

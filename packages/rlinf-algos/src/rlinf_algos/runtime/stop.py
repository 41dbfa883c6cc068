"""Stopping a run cleanly, and the process's random streams a checkpoint keeps.

:class:`DeferredStop` turns SIGTERM and Ctrl-C into a request the driver reads between
iterations: the iteration in flight ends, a checkpoint, the metrics, the policy and the summary
are written, then :class:`~rlinf_algos.training.TrainingInterrupted` is raised. A second
Ctrl-C (or a second SIGTERM, 2 s or more after the first) stops at once.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["DeferredStop", "cuda_rng_state", "rng_state", "set_cuda_rng_state", "set_rng_state"]

log = logging.getLogger(__name__)


def cuda_rng_state() -> list[Any] | None:
    """The CUDA random state of every GPU this process sees (``torch.cuda.get_rng_state_all``),
    or ``None`` when CUDA is not available or was never initialised here (nothing drew from it,
    and asking would initialise it)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return list(torch.cuda.get_rng_state_all())
    return None


def set_cuda_rng_state(states: list[Any] | None) -> None:
    """Restore :func:`cuda_rng_state` output on as many GPUs as this process sees and the
    checkpoint holds (a run resumed on fewer or more GPUs: the others keep their seeding, with a
    warning); nothing without CUDA or without states."""
    import torch

    if not states or not torch.cuda.is_available():
        return
    n = torch.cuda.device_count()
    if n != len(states):
        log.warning(
            "the checkpoint holds the CUDA random state of %d GPU(s); this process sees %d", len(states), n
        )
    for i, state in enumerate(states[:n]):
        torch.cuda.set_rng_state(state.cpu() if hasattr(state, "cpu") else state, i)


def rng_state() -> dict[str, Any]:
    """The process's torch (CPU, and CUDA when initialised), numpy and ``random`` streams."""
    import numpy as np
    import torch

    out: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    cuda = cuda_rng_state()
    if cuda is not None:
        out["cuda"] = cuda
    return out


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(tuple(state["numpy"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    set_cuda_rng_state(state.get("cuda"))


class DeferredStop:
    """While entered (in the main thread), SIGTERM and SIGINT set :attr:`requested` instead of
    interrupting: the loop ends the iteration in flight and stops cleanly. A handler installed
    before that asks for it (a ``rlinf_chain`` attribute: ``rlinf train``'s SIGTERM handler,
    which records that SIGTERM, not Ctrl-C, stopped the run, and kills at once when asked again
    later) is still told; any other (one that ``ray.init`` left behind, which exits at once) is
    not called, and is back in place on exit. A second Ctrl-C 2 s or
    more after the first raises :class:`KeyboardInterrupt` at once. Elsewhere than the main thread
    nothing changes."""

    repeat_window = 2.0

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at = 0.0
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def reason(self) -> str:
        return "SIGTERM" if self.signum == signal.SIGTERM else "Ctrl-C"

    def __enter__(self) -> DeferredStop:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        again = self.signum is not None and now - self.at >= self.repeat_window
        if self.signum is None:
            self.signum, self.at = signum, now
        prev = self._previous.get(signum)
        if again and signum == signal.SIGINT:
            self.__exit__()
            raise KeyboardInterrupt
        if callable(prev) and getattr(prev, "rlinf_chain", False):
            try:
                prev(signum, frame)  # e.g. rlinf train's handler: records SIGTERM, kills on a late repeat
            except KeyboardInterrupt:
                pass

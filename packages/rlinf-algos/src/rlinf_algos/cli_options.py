"""Options shared by the commands that write a run directory (``rlinf train``, ``rlinf sft``), and
their SIGTERM handling (:class:`StopOnTerm`)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import click

__all__ = ["StopOnTerm", "overwrite_option", "run_dir_option", "trust_option"]

run_dir_option = click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the run writes (default: runs/<config name>-<time>).",
)
"""``--run-dir`` of the commands that write a run directory (``train``, ``sft``)."""

overwrite_option = click.option(
    "--overwrite",
    is_flag=True,
    help="RUN_DIR may hold a run: move it aside to RUN_DIR.replaced-<time> and start anew.",
)
"""``--overwrite`` of the commands that write a run directory."""

trust_option = click.option(
    "--trust",
    is_flag=True,
    help="A run made elsewhere may run the code it names (a module:Env-vN env id, env wrappers, "
    "tool and reward files, model.trust_remote_code) that no installed plugin provides; without "
    "it such a run is refused, naming each reference.",
)
"""``--trust`` of the commands that open a run directory (``eval``, ``train --resume``)."""


class StopOnTerm:
    """SIGTERM (what a batch scheduler, ``kill`` or a preempted cloud node sends) stops training
    the way Ctrl-C does: the iteration in flight ends, a checkpoint, the policy and the summary
    are written, and the command exits 143. A second SIGTERM kills at once, unless it comes
    within ``repeat_window`` seconds of the first: ``pkill -f`` matches both ``uv run`` and the
    rlinf process, and uv forwards its signal, so one request arrives twice. Only the main thread
    can install handlers; elsewhere (a library caller's thread) nothing is changed."""

    repeat_window = 2.0

    def __init__(self) -> None:
        self.received = False
        self._first = 0.0
        self._previous: Any = None
        self._main = threading.current_thread() is threading.main_thread()
        self.arm()

    def arm(self) -> None:
        """Install the handler (again: ``ray.init`` installs its own, which exits at once)."""
        if self._main and signal.getsignal(signal.SIGTERM) != self._handle:
            previous = signal.signal(signal.SIGTERM, self._handle)
            if self._previous is None:
                self._previous = previous

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received:
            if time.monotonic() - self._first < self.repeat_window:
                return  # the same request, delivered twice
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # asked again: stop waiting for the checkpoint
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.received = True
        self._first = time.monotonic()
        raise KeyboardInterrupt

    _handle.rlinf_chain = True  # type: ignore[attr-defined]  # a deferred stop tells it (runtime.stop)

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

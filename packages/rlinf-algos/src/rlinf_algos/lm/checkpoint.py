"""Checkpoints of the language-model runs (``grpo_lm``, ``ppo_lm``), their resume, and the stop on
SIGTERM / Ctrl-C.

A checkpoint is the folder ``RUN_DIR/checkpoints/step_<n>/`` (``n``: GRPO iterations done) holding
``state.safetensors``, one :func:`~rlinf_algos.safe_state.save_state` file (no pickle):

- ``actor``: the trained weights as a weight publish carries them (the LoRA adapter alone with
  LoRA, every weight otherwise), the optimiser state, the update count (which is the learning-rate
  schedule's position: its warm-up reads it) and the minibatch-order generator; with ``ppo_lm``
  the critic and its optimiser too;
- ``rollout``: the sampling generator of the in-process rollout engine;
- ``rng``: the process's torch, numpy and ``random`` streams;
- ``sampler``: the training-data position (the problem generator's state, or a data set's
  shuffled order and where in it the run is);
- ``loop``: the iteration, every metrics row so far, the held-out evaluations, the warm start's
  figures and the wall seconds, so ``metrics.csv``, ``metrics.jsonl`` and ``summary.json`` of a
  resumed run hold each iteration exactly once.

A resumed in-process run (``runner.scheduler: local``) takes the batches an uninterrupted run
takes and logs the same values. Checkpoints are written every ``runner.checkpoint_interval``
iterations, at the end and on a stop; the newest :data:`KEEP` are kept. The file is written
beside its place and renamed into it; a folder whose state does not load (cut short, damaged)
is skipped with a warning naming it, and the one before is used.

:class:`DeferredStop` turns SIGTERM and Ctrl-C during the GRPO iterations into a request the loop
reads between iterations: the iteration in flight ends, a checkpoint, ``metrics.csv``, ``policy/``
and ``summary.json`` are written, then :class:`~rlinf_algos.runtime.training.TrainingInterrupted`
is raised. A second Ctrl-C (or a second SIGTERM, 2 s or more after the first) stops at once.
"""

from __future__ import annotations

import logging
import random
import shutil
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlinf_core.errors import RlinfError

__all__ = [
    "KEEP",
    "DeferredStop",
    "find_checkpoints",
    "latest_lm_checkpoint",
    "load_lm_checkpoint",
    "rng_state",
    "save_lm_checkpoint",
    "set_rng_state",
]

KEEP = 2
"""Checkpoints kept: the newest two (a damaged newest one falls back to the one before)."""

STATE_FILE = "state.safetensors"
_log = logging.getLogger("rlinf.train")


def _step_of(path: Path) -> int | None:
    try:
        return int(path.name.removeprefix("step_"))
    except ValueError:
        return None


def find_checkpoints(run_dir: str | Path) -> list[Path]:
    """The ``checkpoints/step_<n>/`` folders of ``run_dir``, newest (highest ``n``) first."""
    folder = Path(run_dir) / "checkpoints"
    found = [(n, p) for p in folder.glob("step_*") if p.is_dir() and (n := _step_of(p)) is not None]
    return [p for _, p in sorted(found, reverse=True)]


def latest_lm_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint folder of ``run_dir`` that holds a state file (not checked further:
    :func:`load_lm_checkpoint` skips a damaged one), or ``None``."""
    for p in find_checkpoints(run_dir):
        if (p / STATE_FILE).is_file():
            return p
    return None


def save_lm_checkpoint(run_dir: Path, iteration: int, state: Mapping[str, Any]) -> Path:
    """Write ``state`` as ``checkpoints/step_<iteration>/state.safetensors`` (atomically) and drop
    all but the newest :data:`KEEP` checkpoints; returns the folder."""
    from rlinf_algos.safe_state import save_state

    folder = Path(run_dir) / "checkpoints" / f"step_{iteration}"
    folder.mkdir(parents=True, exist_ok=True)
    save_state(
        state,
        folder / STATE_FILE,
        meta={"algorithm": str(state.get("algorithm", "")), "step": str(iteration)},
    )
    for old in find_checkpoints(run_dir)[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def load_lm_checkpoint(run_dir: str | Path, algorithm: str) -> tuple[Path, dict[str, Any]]:
    """The newest checkpoint of ``run_dir`` that loads, and its state. A damaged one is skipped
    with a warning naming it; an error if none loads or it belongs to another algorithm."""
    from rlinf_algos.safe_state import StateFileError, load_state

    found = find_checkpoints(run_dir)
    if not found:
        raise RlinfError(f"nothing to resume in {run_dir}: no checkpoints/step_<n>/ folders there")
    skipped: list[str] = []
    for folder in found:
        try:
            state = load_state(folder / STATE_FILE)
            if "loop" not in state or "actor" not in state:
                raise StateFileError(f"{folder / STATE_FILE} is not a language-model run checkpoint")
        except (StateFileError, FileNotFoundError) as err:
            why = "no state file (a checkpoint cut short)" if isinstance(err, FileNotFoundError) else str(err)
            skipped.append(f"{folder.name} ({why})")
            _log.warning("skipping the damaged checkpoint %s: %s", folder, why)
            continue
        if state.get("algorithm") != algorithm:
            raise RlinfError(f"{folder} is a {state.get('algorithm')!r} checkpoint, not {algorithm!r}")
        state["skipped_checkpoints"] = skipped
        return folder, state
    raise RlinfError(
        f"no checkpoint of {run_dir} loads: {'; '.join(skipped)}; the run cannot be resumed "
        "(start a new one with another --run-dir)"
    )


def rng_state() -> dict[str, Any]:
    """The process's torch (CPU, and CUDA when initialised), numpy and ``random`` streams."""
    import numpy as np
    import torch

    out: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = list(torch.cuda.get_rng_state_all())
    return out


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    np.random.set_state(tuple(state["numpy"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))


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

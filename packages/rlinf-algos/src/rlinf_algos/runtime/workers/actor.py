"""The actor role: the learner, on one process or as a data-parallel group of several
(:mod:`rlinf_algos.parallel`). The host joins the learner group, publishes every new version
through the run's weight sync (rank 0; the :class:`~rlinf_core.weights.WeightSync` handle the
driver passes), saves and restores the learner with this process's
random stream, and turns a failed collective into the exit of the whole group. The body the flow
gives it holds the model and its optimiser and runs the update: an embodied flow's learner side
(:class:`~rlinf_algos.embodied.recipe.LearnerSide`), the language-model learner.

The body: ``build(spec, state, init)``, ``version``, ``weights()`` (what a publish carries;
every rank calls, rank 0's is complete), ``train(gen, **kw)`` (the iteration's metrics, or
``{"aborted": True, ...}``), ``state()`` / ``load(state)``, ``policy()`` (the final policy
record) and ``parameters()`` (trainable and total counts).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from typing import Any

import numpy as np

from rlinf_algos.runtime.host_values import to_cpu
from rlinf_algos.runtime.workers.base import RoleWorker
from rlinf_core.errors import ChannelError, RlinfError
from rlinf_core.weights import WeightSync

log = logging.getLogger(__name__)

EXIT_GRACE_S = 2.0
"""How long a rank whose learner group broke lives on after raising, so that its error (which
names the gone rank) reaches the driver before its process ends."""

__all__ = ["ActorWorker", "digest"]


def digest(obj: Any) -> str:
    """A content hash of nested dicts/lists of tensors, arrays and scalars (keys sorted, tensors by
    dtype, shape and bytes), equal for equal states wherever they were built."""
    import torch

    h = hashlib.sha256()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            h.update(b"{")
            for k in sorted(x, key=repr):
                h.update(repr(k).encode())
                walk(x[k])
            h.update(b"}")
        elif isinstance(x, list | tuple):
            h.update(b"[")
            for v in x:
                walk(v)
            h.update(b"]")
        elif isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(x, np.ndarray):
            h.update(f"A{x.dtype}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        else:
            h.update(repr(x).encode())

    walk(obj)
    return h.hexdigest()[:16]


class ActorWorker(RoleWorker):
    """The learner's process (see the module docstring). Placed on N processes, the N workers
    form one ``torch.distributed`` group: the driver calls every method on every rank; rank 0
    takes the batches, publishes the weights and answers ``state``/``policy`` (the other ranks
    take part in the gathering and return ``None``). A collective that fails (a rank died) ends
    this process too, so the whole group goes down and the driver restarts it from the newest
    checkpoint; the error it raises first names the rank that is gone (the root cause).

    Options: ``strategy`` (``ddp`` or ``fsdp``), ``micro_batch_size``, ``device`` (``runner.device``).
    """

    role = "actor"

    def setup(self) -> None:
        import torch

        from rlinf_algos.devices import resolve_device
        from rlinf_algos.parallel import DataParallel

        try:  # torch optimisers import torch._dynamo on first use (seconds): do it now, in parallel
            import torch._dynamo
        except Exception:  # pragma: no cover - a torch without dynamo
            pass
        torch.manual_seed(self.seed)
        opts = self.options
        self.dp = DataParallel.start(
            self.rank,
            self.world_size,
            strategy=str(opts.get("strategy") or "ddp"),
            device=resolve_device(str(opts.get("device") or "cpu")),
            micro_batch_size=opts.get("micro_batch_size"),
            # a rank waits for rank 0, which waits on the channel first: twice the channel wait
            timeout=2 * self.timeout + 30.0,
        )
        self.wb: Any = None
        self.published = -1
        self.publish_s = 0.0
        super().setup()

    def teardown(self) -> None:
        super().teardown()
        dp = getattr(self, "dp", None)
        if dp is not None:
            dp.close()

    def _collective(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(...)`` on a learner group: when it fails in a collective or an arrival (another
        rank died or is stuck), this rank exits too, so no rank is left waiting and the driver
        sees the group die (and restarts it); on a group of one, errors propagate as usual.
        Running out of memory is neither: it is raised as
        :class:`~rlinf_algos.parallel.LearnerOutOfMemory` (the process stays, its cached memory
        freed), and the driver ends the run instead of restarting it into the same error."""
        import torch

        from rlinf_algos.parallel import LearnerOutOfMemory

        try:
            if not self.dp.distributed:
                return fn(*args, **kwargs)
            return self._group_call(fn, *args, **kwargs)
        except torch.OutOfMemoryError as err:
            if self.dp.device.type == "cuda":
                torch.cuda.empty_cache()
            first = (str(err).strip().splitlines() or ["out of memory"])[0]
            raise LearnerOutOfMemory(
                f"actor rank {self.rank} ran out of memory on {self.dp.device} in "
                f"{getattr(fn, '__name__', 'a call')}(): {first}"
            ) from None

    def _group_call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(...)`` on a learner group of several ranks. When a collective or an arrival fails
        (a rank died or is stuck), this rank raises a
        :class:`~rlinf_algos.parallel.LearnerGroupBroken` whose first line names the gone rank
        (the root cause), then this rank, the call and how long it waited, and exits
        :data:`EXIT_GRACE_S` later, once the driver has the error: no rank is left waiting."""
        from rlinf_algos.parallel import LearnerGroupBroken

        t0 = time.monotonic()
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, RlinfError) as err:
            if isinstance(err, ChannelError) or type(err).__name__ in ("ConfigError", "OutOfMemoryError"):
                raise
            name = getattr(fn, "__name__", "a call")
            broken = (
                err
                if isinstance(err, LearnerGroupBroken)
                else self.dp.lost(f"{name}()", time.monotonic() - t0, err)
            )
            log.error("%s; this rank exits in %g s", broken, EXIT_GRACE_S)
            exit_timer = threading.Timer(EXIT_GRACE_S, os._exit, args=(70,))
            exit_timer.daemon = True
            exit_timer.start()
            raise broken from None

    def configure(
        self,
        spec: dict[str, Any] | None = None,
        weights: WeightSync | None = None,
        state: dict[str, Any] | None = None,
        init: dict[str, Any] | None = None,
    ) -> int:
        """Build the learner (for ``spec``) and publish its first version through the weight
        sync: 0, or with ``state`` (:meth:`state` output: a restarted learner) the checkpoint's
        weights at their version. ``weights``: the weight sync to publish to (a restarted learner
        gets a new one; default the constructor's). ``init``: weights to start from (a warm
        start's), loaded before version 0 is published. Returns the published version."""

        if weights is not None:
            self.weights = weights
        self.spec = spec
        self._collective(self.body.build, spec, state, init)
        if state is not None:
            self._set_rng(state)
        if self.weights is None:
            raise RlinfError(f"actor rank {self.rank}: no weight sync to publish to (the driver passes one)")
        self.wb = self.weights if self.dp.is_main else None
        self.published = -1
        self.publish_s = 0.0
        self._collective(self.publish)
        return self.published

    def publish(self) -> None:
        """Publish the body's weights if its version moved on (every rank takes part: FSDP
        gathers them; rank 0 publishes)."""
        v = int(self.body.version)
        if v > self.published:
            t0 = time.perf_counter()
            weights = self.body.weights()
            if self.wb is not None:
                self.wb.publish(weights, version=v, timeout=self.timeout)
            self.published = v
            self.publish_s += time.perf_counter() - t0

    def version(self) -> int:
        return int(self.body.version)

    def train(self, gen: int | str, **kw: Any) -> dict[str, Any]:
        """One iteration of learning on the data of generation ``gen``; publishes the new
        weights. Returns the body's metrics (with ``publish_s``), or ``aborted``."""
        self.publish_s = 0.0
        try:
            metrics = self._collective(self.body.train, gen, **kw)
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}
        if not metrics.get("aborted"):
            self._collective(self.publish)
            metrics["publish_s"] = self.publish_s
            if self.dp.distributed:
                metrics.setdefault("allreduce_s", self.dp.take_comm_s())
        return to_cpu(metrics)

    # -- state ---------------------------------------------------------------------------------
    def state(self) -> dict[str, Any] | None:
        """What a checkpoint holds of the learner (weights, optimiser, RNG, statistics, buffers);
        ``None`` on ranks other than 0."""
        import torch

        from rlinf_algos.runtime.stop import cuda_rng_state

        state = self._collective(self.body.state)
        if not self.dp.is_main:
            return None  # rank 0 answers for the group
        out = {**state, "torch_rng": torch.get_rng_state()}
        cuda = cuda_rng_state()  # every GPU this process sees, beside the CPU stream
        if cuda is not None:
            out["cuda_rng"] = cuda
        return to_cpu(out)  # the optimiser's moments too: the driver may have no GPU

    def _set_rng(self, state: dict[str, Any]) -> None:
        """This process's CPU (and CUDA) random streams from a checkpoint's learner state."""
        import torch

        from rlinf_algos.runtime.stop import set_cuda_rng_state

        if "torch_rng" in state:
            torch.set_rng_state(state["torch_rng"])
        set_cuda_rng_state(state.get("cuda_rng"))

    def load(self, state: dict[str, Any]) -> int:
        """Restore :meth:`state` output (written by a group of any size), publish the restored
        weights; returns their version."""

        self._collective(self.body.load, state)
        self._set_rng(state)
        self._collective(self.publish)
        return int(self.body.version)

    def digest(self) -> str:
        """A short hash of :meth:`state` (tests compare it with the checkpoint's)."""
        state = self.state()
        return digest(state) if state is not None else ""

    def policy(self) -> dict[str, Any] | None:
        """The final policy record (``None`` on ranks other than 0)."""
        record = self._collective(self.body.policy)
        return to_cpu(record) if self.dp.is_main else None

    def world(self) -> dict[str, Any]:
        """The learner group: ``{"world_size", "strategy", "device", "parameters"}`` (the policy's
        trainable and total parameters)."""
        return {
            "world_size": self.dp.world,
            "strategy": self.dp.strategy,
            "device": str(self.dp.device),
            "parameters": self.body.parameters(),
        }

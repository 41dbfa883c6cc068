"""The actor worker of the workers' runtime: the learner (a recipe's
:class:`~rlinf_algos.recipe.LearnerSide`) fed from the trajectory channel, on one process or as a
data-parallel group of several (:mod:`rlinf_algos.parallel`)."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from typing import Any

import numpy as np

from rlinf_algos.channels import traj_key
from rlinf_algos.recipe import LearnerContext, Recipe
from rlinf_algos.runtime.workers import ProcessMixin, set_threads
from rlinf_core.errors import ChannelError, RlinfError
from rlinf_core.worker import Worker

log = logging.getLogger(__name__)

__all__ = ["ActorWorker", "digest"]


class _AuditedChannel:
    """The trajectory channel as the learner sees it: every item it takes is noted as
    ``(generation, weight version)`` (the generation from the key ``g<gen>/...``, the version
    from the item's ``version``, ``None`` where it has none)."""

    def __init__(self, ch: Any) -> None:
        self.ch = ch
        self.taken: list[tuple[str, int | None]] = []

    def get(self, key: Any, *args: Any, **kwargs: Any) -> Any:
        item = self.ch.get(key, *args, **kwargs)
        self._note(key, item)
        return item

    def get_nowait(self, key: Any) -> Any:
        item = self.ch.get_nowait(key)
        self._note(key, item)
        return item

    def _note(self, key: Any, item: Any) -> None:
        if isinstance(item, dict):
            gen = str(key).split("/", 1)[0].removeprefix("g")
            version = item.get("version")
            self.taken.append((gen, None if version is None else int(version)))

    def take(self) -> list[tuple[str, int | None]]:
        taken, self.taken = self.taken, []
        return taken

    def __getattr__(self, name: str) -> Any:
        if name == "ch":  # not built yet
            raise AttributeError(name)
        return getattr(self.ch, name)

    def __reduce__(self) -> tuple[Any, ...]:  # pickles as the channel it wraps
        return (_AuditedChannel, (self.ch,))


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


class ActorWorker(ProcessMixin, Worker):
    """The learner: the recipe's :class:`~rlinf_algos.recipe.LearnerSide` (networks, optimisers,
    buffers) fed from the trajectory channel. Placed on N processes, the N workers form one
    ``torch.distributed`` group (:mod:`rlinf_algos.parallel`, ``actor`` section): the driver calls
    every method on every rank; rank 0 takes the batches off the channel, publishes the weights
    and answers ``state``/``policy`` (the other ranks take part in the gathering and return
    ``None``). A collective that fails (a rank died) ends this process too, so the whole group
    goes down and the driver restarts it from the newest checkpoint.

    Args:
        recipe: the algorithm's :class:`~rlinf_algos.recipe.Recipe`.
        model_cfg, runner_cfg: the ``model`` and ``runner`` sections (dicts).
        traj_ch: the trajectory channel; ``weights``: the weight broadcast's name.
        rollout_world: the number of rollout workers.
        actor_cfg: the ``actor`` section (dict; strategy, micro-batch size).
    """

    def __init__(
        self,
        recipe: Recipe,
        model_cfg: dict[str, Any],
        runner_cfg: dict[str, Any],
        traj_ch: Any,
        weights: str,
        rollout_world: int,
        actor_cfg: dict[str, Any] | None = None,
    ) -> None:
        self.recipe, self.model_cfg, self.runner_cfg = recipe, model_cfg, runner_cfg
        self.actor_cfg = dict(actor_cfg or {})
        self.traj_ch, self.weights_name = traj_ch, weights
        self.rollout_world = rollout_world
        self.timeout = float(runner_cfg.get("worker_timeout", 300.0))
        self.side: Any = None
        self.audit = _AuditedChannel(traj_ch)

    def setup(self) -> None:
        import torch

        import rlinf_algos.models.mlp  # noqa: F401 - the heavy imports, while the envs start
        from rlinf_algos.parallel import DataParallel, resolve_device

        try:  # torch optimisers import torch._dynamo on first use (seconds): do it now, in parallel
            import torch._dynamo
        except Exception:  # pragma: no cover - a torch without dynamo
            pass
        set_threads(int(self.runner_cfg.get("torch_threads", 1)))
        torch.manual_seed(int(self.runner_cfg.get("seed", 0)))
        self.dp = DataParallel.start(
            self.rank,
            self.world_size,
            strategy=str(self.actor_cfg.get("strategy", "ddp")),
            device=resolve_device(str(self.runner_cfg.get("device", "cpu"))),
            micro_batch_size=self.actor_cfg.get("micro_batch_size"),
            # a rank waits for rank 0, which waits on the channel first: twice the channel wait
            timeout=2 * self.timeout + 30.0,
        )

    def teardown(self) -> None:
        if self.side is not None:
            self.side.close()
        self.dp.close()

    def _collective(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(...)`` on a learner group: when it fails in a collective or an arrival (another
        rank died or is stuck), this rank exits too, so no rank is left waiting and the driver
        sees the group die (and restarts it); on a group of one, errors propagate as usual."""
        if self.dp.world == 1:
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, RlinfError) as err:
            if isinstance(err, ChannelError) or type(err).__name__ == "ConfigError":
                raise
            log.exception("actor rank %d: the learner group failed (%s); this rank exits", self.rank, err)
            os._exit(70)

    def configure(
        self,
        spec: dict[str, Any],
        weights: str | None = None,
        state: dict[str, Any] | None = None,
        init: dict[str, Any] | None = None,
    ) -> int:
        """Build the learner for ``spec``, create the weight broadcast and publish version 0, or
        with ``state`` (:meth:`state` output: a restarted learner) the checkpoint's weights at
        its version. ``weights``: the broadcast's name (default the constructor's). ``init``: the
        policy's weights to start from (``model.warm_start``'s), loaded before version 0 is
        published. Returns the published version."""
        import torch

        from rlinf_scheduler.weights import WeightBroadcast

        if weights is not None:
            self.weights_name = weights
        self.spec = spec
        ctx = LearnerContext(
            traj_ch=self.audit,
            rollout_world=self.rollout_world,
            timeout=self.timeout,
            publish=self._publish,
            seed=int(self.runner_cfg.get("seed", 0)),
            device=str(self.dp.device),
            dp=self.dp,
        )
        self.side = self._collective(self.recipe.learner, spec, self.model_cfg, ctx)
        if init is not None and state is None:
            self.dp.load_state_dict(self.side.publish_module(), init)
        if state is not None:
            self._collective(self.side.load, state)
            torch.set_rng_state(state["torch_rng"])
        self.wb = (
            WeightBroadcast.create(self.weights_name, default_timeout=self.timeout)
            if self.dp.is_main
            else None
        )
        self.published = -1
        self.publish_s = 0.0
        self._collective(self._publish)
        return self.published

    def _publish(self) -> None:
        v = int(self.side.version)
        if v > self.published:
            t0 = time.perf_counter()
            weights = self.dp.state_dict(self.side.publish_module())  # gathered once with FSDP
            if self.wb is not None:
                self.wb.publish(weights, version=v)
            self.published = v
            self.publish_s += time.perf_counter() - t0

    def version(self) -> int:
        return int(self.side.version)

    def train(self, gen: int | str, **kw: Any) -> dict[str, Any]:
        """One iteration of learning on the data of generation ``gen``; publishes the new
        weights. Returns the learner's metrics, or ``aborted``."""
        version = int(self.side.version)
        self.audit.take()
        self.publish_s = 0.0
        try:
            metrics = self._collective(self.side.train, gen, **kw)
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}
        if not metrics.get("aborted"):
            self._collective(self._publish)
            metrics["publish_s"] = self.publish_s
            if self.dp.world > 1:
                metrics["allreduce_s"] = self.dp.take_comm_s()
        # what the update consumed: the driver checks that no batch mixes weight versions or
        # generations (read by benchmarks/chaos.py; not a metrics column)
        metrics["batch_audit"] = {"learner_version": version, "items": self.audit.take()}
        return metrics

    def discard(self, gen: int) -> int:
        """Drop whatever generation ``gen`` left in the trajectory channel (after an abort)."""
        dropped = 0
        for r in range(self.rollout_world):
            while True:
                try:
                    self.traj_ch.get_nowait(traj_key(gen, r))
                    dropped += 1
                except ChannelError:
                    break
        return dropped

    # -- state ---------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What a checkpoint holds of the learner (weights, optimiser, RNG, statistics, buffers)."""
        import torch

        state = self._collective(self.side.state)
        if not self.dp.is_main:
            return None  # type: ignore[return-value]  # rank 0 answers for the group
        return {**state, "torch_rng": torch.get_rng_state()}

    def load(self, state: dict[str, Any]) -> str:
        """Restore :meth:`state` output (written by a group of any size) and publish the restored
        weights; returns its digest."""
        import torch

        self._collective(self.side.load, state)
        torch.set_rng_state(state["torch_rng"])
        self._collective(self._publish)
        return self.digest()

    def digest(self) -> str:
        """A short hash of :meth:`state` (tests compare it with the checkpoint's)."""
        state = self.state()
        return digest(state) if state is not None else ""

    def policy(self) -> dict[str, Any]:
        """The final policy record (``policy.safetensors``; ``None`` on ranks other than 0)."""
        weights = self._collective(self.side.final_state_dict)
        if not self.dp.is_main:
            return None  # type: ignore[return-value]
        spec = {k: v for k, v in self.spec.items() if k != "num_slots"}
        return {"algorithm": self.recipe.name, "spec": spec, "state_dict": weights}

    def world(self) -> dict[str, Any]:
        """The learner group: ``{"world_size", "strategy", "device", "parameters"}`` (the policy's
        trainable and total parameters)."""
        from rlinf_algos.models import parameter_counts

        return {
            "world_size": self.dp.world,
            "strategy": self.dp.strategy,
            "device": str(self.dp.device),
            "parameters": parameter_counts(self.side.publish_module()),
        }

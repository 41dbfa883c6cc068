"""The bodies an embodied flow gives the generic role workers (:mod:`rlinf_algos.runtime.workers`):
:class:`EmbodiedRollout` (the policy network a recipe's collection loop samples with, over the
rollout worker's env links) and :class:`EmbodiedLearner` (a recipe's
:class:`~rlinf_algos.embodied.recipe.LearnerSide` on the actor worker). They never name an algorithm: the
recipe's ``collect`` and ``learner`` do the algorithm's part.
"""

from __future__ import annotations

from typing import Any

from rlinf_algos.embodied.recipe import LearnerContext, Recipe
from rlinf_core.errors import ChannelError

__all__ = ["AuditedChannel", "EmbodiedLearner", "EmbodiedRollout", "cpu_state_dict", "placed_device"]


def placed_device(host: Any) -> Any:
    """The torch device of a role's process that computes with a policy (rollout, reference):
    :func:`~rlinf_algos.devices.role_device` of the ``device`` option the driver launched it
    with (``runner.device``; ``cpu`` when not given)."""
    from rlinf_algos.devices import role_device

    return role_device(str(host.options.get("device") or "cpu"))


def cpu_state_dict(module: Any) -> dict[str, Any]:
    """``module``'s state dict with every tensor on the CPU (the same tensors when they are)."""
    return {k: v.detach().cpu() if hasattr(v, "detach") else v for k, v in module.state_dict().items()}


class EmbodiedRollout:
    """The rollout body of an embodied flow, and what the recipe's
    :meth:`~rlinf_algos.embodied.recipe.Recipe.collect` gets as its ``worker``: the policy (``model``, built
    by :meth:`configure`), its weight ``version``, the sampling streams (``generator``,
    ``np_rng``), and the host's port (``recv``, ``send``, ``stages``, ``slots``), channel
    (``traj_ch``), ``rank``, ``timeout`` and ``sync``."""

    def __init__(self, host: Any, recipe: Recipe) -> None:
        import rlinf_algos.models.mlp  # noqa: F401 - the heavy imports, while the envs start

        self.host, self.recipe = host, recipe
        self.model: Any = None
        self.spec: dict[str, Any] = {}
        self.version = -1

    # -- what the host asks ------------------------------------------------------------------------
    def configure(self, spec: dict[str, Any]) -> None:
        """Build the policy for ``spec`` on this process's device (:func:`placed_device`: the GPU
        its placement gives it under ``runner.device`` other than ``cpu``, else the CPU)."""
        from rlinf_algos.models import build_policy

        self.spec = spec
        self.model = build_policy(spec).to(placed_device(self.host))
        self.model.eval()
        self.version = -1

    def set_weights(self, state_dict: dict[str, Any], version: int) -> None:
        self.model.load_state_dict(state_dict)
        self.version = version

    def weights(self) -> dict[str, Any]:
        """The weights it acts with, on the CPU (``policy.safetensors`` when the learner is gone)."""
        return cpu_state_dict(self.model)

    def collect(self, gen: int, steps: int, **kwargs: Any) -> dict[str, Any]:
        return self.recipe.collect(self, gen, steps, **kwargs)

    # -- the port and streams the recipe's collection loop uses -----------------------------------
    @property
    def generator(self) -> Any:
        return self.host.generator

    @property
    def np_rng(self) -> Any:
        return self.host.np_rng

    @property
    def stages(self) -> int:
        return self.host.stages

    @property
    def slots(self) -> int:
        return self.host.slots

    @property
    def rank(self) -> int:
        return self.host.rank

    @property
    def traj_ch(self) -> Any:
        return self.host.traj_ch

    @property
    def timeout(self) -> float:
        return self.host.timeout

    def recv(self, s: int) -> dict[str, Any]:
        return self.host.recv(s)

    def send(self, s: int, actions: Any) -> None:
        self.host.send(s, actions)

    def sync(self, min_version: int) -> None:
        self.host.sync(min_version)


class AuditedChannel:
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
        return (AuditedChannel, (self.ch,))


class EmbodiedLearner:
    """The actor body of an embodied flow: the recipe's learner side, fed from the trajectory
    channel (audited: every update reports the generations and weight versions it consumed,
    which ``benchmarks/chaos_quickstart.py`` and the restart tests check)."""

    def __init__(self, host: Any, recipe: Recipe) -> None:
        import rlinf_algos.models.mlp  # noqa: F401 - the heavy imports, while the envs start

        self.host, self.recipe = host, recipe
        self.audit = AuditedChannel(host.channel("traj"))
        self.side: Any = None
        self.spec: dict[str, Any] = {}

    def build(self, spec: dict[str, Any], state: dict[str, Any] | None, init: dict[str, Any] | None) -> None:
        host = self.host
        self.spec = spec
        if self.side is not None:
            self.side.close()
        ctx = LearnerContext(
            traj_ch=self.audit,
            rollout_world=int(host.options.get("rollout_world", 1)),
            timeout=host.timeout,
            publish=host.publish,
            seed=host.seed,
            device=str(host.dp.device),
            dp=host.dp,
        )
        self.side = self.recipe.learner(spec, host.options.get("model"), ctx)
        if init is not None and state is None:
            host.dp.load_state_dict(self.side.publish_module(), init)
        if state is not None:
            self.side.load(state)

    @property
    def version(self) -> int:
        return int(self.side.version)

    def weights(self) -> dict[str, Any]:
        return self.host.dp.state_dict(self.side.publish_module())  # gathered once with FSDP

    def train(self, gen: int | str, **kwargs: Any) -> dict[str, Any]:
        version = int(self.side.version)
        self.audit.take()
        try:
            metrics = self.side.train(gen, **kwargs)
        except ChannelError as err:
            metrics = {"aborted": True, "error": str(err)}
        # what the update consumed: the driver checks that no batch mixes weight versions or
        # generations (read by benchmarks/chaos_quickstart.py; not a metrics column)
        metrics["batch_audit"] = {"learner_version": version, "items": self.audit.take()}
        return metrics

    def state(self) -> dict[str, Any]:
        return self.side.state()

    def load(self, state: dict[str, Any]) -> None:
        self.side.load(state)

    def policy(self) -> dict[str, Any]:
        spec = {k: v for k, v in self.spec.items() if k != "num_slots"}
        return {"algorithm": self.recipe.name, "spec": spec, "state_dict": self.side.final_state_dict()}

    def parameters(self) -> dict[str, int]:
        from rlinf_algos.models import parameter_counts

        return parameter_counts(self.side.publish_module())

    def close(self) -> None:
        if self.side is not None:
            self.side.close()

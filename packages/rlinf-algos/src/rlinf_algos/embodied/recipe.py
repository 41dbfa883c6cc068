"""The embodied algorithm's part of the embodied flow (:class:`~rlinf_algos.embodied.flow.EmbodiedFlow`).

A :class:`Flow` (:mod:`rlinf_algos.flow`) is what the driver runs for any family; an embodied
algorithm (``ppo/``, ``sac/``, ``grpo/``) does not write one. It writes a :class:`Recipe`: the
policy spec, per iteration an :class:`IterationPlan` (which env-worker method serves it, what the
rollout workers are told, how the learning side starts), what a rollout worker collects, and its
:class:`LearnerSide` on the actor worker (built with a :class:`LearnerContext`). The embodied
flow runs any recipe on the driver's scheduler.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel

from rlinf_algos.flow import RoleHost
from rlinf_core.channel import Channel
from rlinf_core.errors import RlinfError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from rlinf_algos.config import EnvConfig, RolloutConfig, RunnerConfig
    from rlinf_algos.models.config import ModelConfig
    from rlinf_algos.parallel import DataParallel

__all__ = [
    "IterationPlan",
    "LearnerContext",
    "LearnerSide",
    "PlacedRunView",
    "Recipe",
    "RolloutView",
]

ConfigT = TypeVar("ConfigT", bound=BaseModel)
"""The ``algorithm`` section's model of a recipe (``PPOConfig``...)."""


class PlacedRunView(Protocol):
    """What a recipe reads of the embodied run on workers
    (:class:`~rlinf_algos.embodied.placed.EmbodiedPlacedRun`) in :meth:`Recipe.plan` and
    :meth:`Recipe.launch_extra`."""

    @property
    def groups(self) -> dict[str, Any]: ...
    @property
    def gen(self) -> int: ...
    @property
    def steps(self) -> int: ...
    @property
    def iterations(self) -> int: ...
    @property
    def timeout(self) -> float: ...
    @property
    def runner_cfg(self) -> RunnerConfig: ...
    @property
    def rollout_cfg(self) -> RolloutConfig: ...
    @property
    def traj_ch(self) -> Channel: ...
    @property
    def weights(self) -> Any: ...  # the run's weight sync (rollout.weight_sync)


class RolloutView(Protocol):
    """What :meth:`Recipe.collect` gets as its ``worker`` on a rollout worker
    (:class:`~rlinf_algos.embodied.roles.EmbodiedRollout`): the policy and its weight version,
    the sampling streams, the env links (``recv``/``send`` per stage) and the trajectory
    channel."""

    model: torch.nn.Module
    spec: dict[str, Any]
    version: int

    @property
    def generator(self) -> torch.Generator: ...
    @property
    def np_rng(self) -> np.random.Generator: ...
    @property
    def stages(self) -> int: ...
    @property
    def slots(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def traj_ch(self) -> Channel: ...
    @property
    def timeout(self) -> float: ...
    def recv(self, s: int) -> dict[str, Any]: ...
    def send(self, s: int, actions: Any) -> None: ...
    def sync(self, min_version: int) -> None: ...


@dataclass
class IterationPlan:
    """How the driver runs one iteration on workers.

    Attributes:
        env_method: the :class:`~rlinf_algos.runtime.workers.EnvWorker` method that serves it
            (``run``: fixed steps; ``run_episodes``: whole episodes), called as
            ``method(gen, link_addresses, *env_args)``.
        env_args: its further arguments.
        rollout_kwargs: keyword arguments of every rollout worker's ``collect`` (beside the
            generation, the steps and the minimum weight version).
        learn: starts the learning side of the iteration (``None`` in rollout-only mode); its
            awaitable gives ``[metrics]`` (``{"aborted": True, ...}`` if the batch was lost).
        abort_keys: every channel key a consumer of this iteration may wait on (the driver puts an
            ``ABORT`` on each when the iteration fails).
        count_env_steps: the iteration's env steps are what the env workers report (episodes end
            when they end); otherwise exactly :attr:`Recipe.batch`.
    """

    env_method: str
    env_args: tuple[Any, ...]
    rollout_kwargs: dict[str, Any]
    learn: Callable[[], Awaitable[list[dict[str, Any]]]] | None
    abort_keys: list[str]
    count_env_steps: bool = False


@dataclass
class LearnerContext:
    """What the actor worker hands a recipe's learner: the trajectory channel, the number of
    rollout workers, the wait limit, ``publish()`` (broadcast the weights if the learner's
    version moved on) and ``dp``, the learner group (a
    :class:`~rlinf_algos.parallel.DataParallel`; a group of one by default): rank 0 reads the
    channel and :meth:`~rlinf_algos.parallel.DataParallel.broadcast_object` hands the batch on,
    the model goes through :meth:`~rlinf_algos.parallel.DataParallel.wrap`."""

    traj_ch: Channel
    rollout_world: int
    timeout: float
    publish: Callable[[], None]
    seed: int = 0
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)
    dp: DataParallel = None  # type: ignore[assignment]  # made by __post_init__ when not given

    def __post_init__(self) -> None:
        if self.dp is None:
            from rlinf_algos.parallel import DataParallel

            self.dp = DataParallel(device=self.device)

    def take(self, keys: list[str]) -> list[Any] | None:
        """The items of ``keys`` from the trajectory channel on every rank of the learner group
        (rank 0 takes them, the others get rank 0's); ``None`` if the iteration was aborted."""
        from rlinf_algos.channels import get_all

        dp = self.dp
        dp.arrive(f"the batch of {keys[0].split('/', 1)[0] if keys else 'an iteration'}")
        return dp.from_main(lambda: get_all(self.traj_ch, keys, self.timeout))


class LearnerSide(ABC):
    """The learning side of a recipe, living on the actor worker."""

    @property
    @abstractmethod
    def version(self) -> int:
        """The weight version of :meth:`publish_module`."""

    @abstractmethod
    def train(self, gen: int | str, **kwargs: Any) -> dict[str, Any]:
        """Learn on iteration data of generation ``gen`` from the channel; returns the metrics
        (``{"aborted": True}`` if the driver aborted it)."""

    @abstractmethod
    def publish_module(self) -> torch.nn.Module:
        """The module whose ``state_dict`` the rollout workers load (at :attr:`version`)."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """What a checkpoint holds of the learner."""

    @abstractmethod
    def load(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state` output."""

    @abstractmethod
    def final_state_dict(self) -> dict[str, Any]:
        """The weights of ``policy.safetensors``."""

    def close(self) -> None:  # noqa: B027 - optional; most learners run nothing beside
        """Stop whatever the learner runs beside (threads)."""


class Recipe(ABC, Generic[ConfigT]):
    """An algorithm's part of the embodied flow, written once for every scheduler (see the module
    docstring).

    Class attributes:
        name: the algorithm's name (checkpoints and summaries record it).
        learner_columns: the learner's ``metrics.csv`` columns (after the base columns).
        worker_columns: further columns the workers' runtime adds (``wait_s``, ``policy_lag``...).
        extra_components: components besides ``env``, ``rollout`` and ``actor`` (launched by
            :meth:`launch_extra`).
        policy_components: those of them that build the policy: ``configure(spec)`` is called on
            them once the actor has published version 0.
        stateful_components: those of them whose ``state()`` / ``load()`` go into checkpoints.
        whole_batch: the learner trains on an iteration's complete batch only (an aborted
            iteration must never have been trained on).
    """

    name: ClassVar[str]
    learner_columns: ClassVar[tuple[str, ...]]
    worker_columns: ClassVar[tuple[str, ...]] = ("wait_s", "policy_lag")
    extra_components: ClassVar[tuple[str, ...]] = ()
    policy_components: ClassVar[tuple[str, ...]] = ()
    stateful_components: ClassVar[tuple[str, ...]] = ()
    whole_batch: ClassVar[bool] = False

    def __init__(self, cfg: ConfigT) -> None:
        self.cfg = cfg

    # -- on the driver -------------------------------------------------------------------------
    def metric_columns(self, model_cfg: ModelConfig) -> tuple[str, ...]:
        """The learner's ``metrics.csv`` columns for a run of the ``model`` section
        ``model_cfg``: ``learner_columns`` (a recipe adds what only some models report, such as
        an auxiliary loss)."""
        return self.learner_columns

    @abstractmethod
    def policy_spec(self, model_cfg: ModelConfig, spaces: Mapping[str, Any]) -> dict[str, Any]:
        """The spec of the policy (see :func:`rlinf_algos.models.build_policy`) for the ``model``
        section and the env's ``spaces`` (``obs_dim``, ``act_dim``, ``action_low``,
        ``action_high``, ``max_episode_steps``)."""

    def check_spaces(self, env_cfg: EnvConfig, spaces: Mapping[str, Any]) -> None:
        """Raise :class:`~rlinf_core.errors.ConfigError` if the env cannot be trained on."""

    # -- on workers ------------------------------------------------------------------------------
    def channel_maxsize(self, rollout_cfg: RolloutConfig) -> int:
        """The bound of each key of the trajectory channel (0: none)."""
        return 0

    @abstractmethod
    def iteration_steps(self, rollout_cfg: RolloutConfig, max_episode_steps: int | None) -> int:
        """Vector steps per env per iteration (an upper bound for whole episodes)."""

    def staleness(self, rollout_cfg: RolloutConfig) -> int:
        """How many weight versions the rollout policy may lag the learner."""
        return max(1, rollout_cfg.max_staleness)

    @property
    def on_policy(self) -> bool:
        """Collection of iteration ``k`` waits for weights ``k - staleness``."""
        return True

    def launch_extra(self, run: PlacedRunView) -> dict[str, dict[str, Any]]:
        """The launch settings of each of :attr:`extra_components` (keyword arguments of its role
        worker, :class:`~rlinf_algos.runtime.workers.base.RoleWorker`: ``channels``, ``weights``,
        ``threads``, options)."""
        return {}

    def body(self, role: str, host: RoleHost) -> object:
        """The body of one of :attr:`extra_components` in its worker's process (``host``: the
        role worker); the rollout and actor bodies are the embodied flow's own
        (:mod:`rlinf_algos.embodied.roles`)."""
        raise RlinfError(f"{self.name} has no {role!r} component")

    @abstractmethod
    def plan(self, run: PlacedRunView, k: int) -> IterationPlan:
        """Iteration ``k`` of ``run`` (an :class:`~rlinf_algos.embodied.placed.EmbodiedPlacedRun`)."""

    @abstractmethod
    def collect(self, worker: RolloutView, gen: int, steps: int, **kwargs: Any) -> dict[str, Any]:
        """On a rollout worker: one iteration over its env links (``worker.recv(s)`` /
        ``worker.send(s, actions)``); put the data on the channel; return
        ``{"aborted": False, "version": ..., "steps": ...}``."""

    @abstractmethod
    def learner(self, spec: dict[str, Any], model_cfg: ModelConfig, ctx: LearnerContext) -> LearnerSide:
        """On the actor worker: the learner for ``spec``."""

"""The whole algorithm contract: what an algorithm gives the one driver
(:mod:`rlinf_algos.runtime.driver`), and what its parts in the worker processes get.

- :class:`Flow`: an algorithm's flow: its name, its checkpoint layout, its role bodies
  (``body(role, host)``, built in the worker processes), and its :class:`FlowRun`,
  ``placed(driver)``: the roles on the workers of the driver's scheduler, whichever it is (Ray's
  processes, or ``runner.scheduler: local``'s worker objects in the driver's process,
  :mod:`rlinf_algos.runtime.inprocess`: one iteration loop for every scheduler);
- :class:`FlowRun`: what the driver calls in a run: ``start``, ``load``, ``step`` until ``done``,
  ``drain``, ``state`` for checkpoints, ``final_policy``, ``finish`` for the summary; and what
  each role's death costs (``roles``);
- the embodied family's pieces (``ppo/``, ``sac/``, ``grpo/``): a :class:`Recipe` (the
  algorithm's part of the embodied flow, :mod:`rlinf_algos.embodied`), its :class:`LearnerSide`
  (on the actor worker, with a :class:`LearnerContext`) and, per iteration, an
  :class:`IterationPlan`: which
  env-worker method serves it, what the rollout workers are told, how the learning side starts.

The language-model family's flow is :mod:`rlinf_algos.lm.flow`. Adding an embodied algorithm is
one folder with a recipe (its class derives from :class:`~rlinf_algos.embodied.algorithm.EmbodiedAlgorithm`)
and one registration line in :mod:`rlinf_algos.plugin`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rlinf_core.errors import RlinfError

__all__ = [
    "Flow",
    "FlowRun",
    "IterationPlan",
    "LearnerContext",
    "LearnerSide",
    "Recipe",
    "await_call",
]


async def await_call(call: Any) -> Any:
    """Await a :class:`~rlinf_core.worker.GroupCall` (its ``__await__``): what an
    :attr:`IterationPlan.learn` returns for a plain call on the actor."""
    return await call


class Flow(ABC):
    """An algorithm's flow (see the module docstring). It travels to the worker processes, where
    :meth:`body` builds each role's domain object.

    Class attributes:
        checkpoint_layout: ``"file"`` (``checkpoints/step_<n>.safetensors``) or ``"folder"``
            (``checkpoints/step_<n>/state.safetensors``).
        keep_checkpoints: how many checkpoints are kept (``None``: all).
        final_checkpoint: a checkpoint at the end even with ``runner.checkpoint_interval: 0``.
    """

    checkpoint_layout: ClassVar[str] = "file"
    keep_checkpoints: ClassVar[int | None] = None
    final_checkpoint: ClassVar[bool] = False

    @property
    @abstractmethod
    def name(self) -> str:
        """The algorithm's name (checkpoints and summaries record it)."""

    @property
    @abstractmethod
    def runner(self) -> Any:
        """The ``runner`` section (``worker_timeout``, ``max_restarts``, ``checkpoint_interval``,
        ``loggers``, ``seed``...)."""

    @abstractmethod
    def placed(self, driver: Any) -> FlowRun:
        """The run on workers the driver's scheduler places."""

    @abstractmethod
    def body(self, role: str, host: Any) -> Any:
        """The domain object of ``role`` in its worker process (``host``: the role worker)."""


class FlowRun(ABC):
    """One run of a flow, in one process or on workers; the driver calls it (see
    :mod:`rlinf_algos.runtime.driver`). ``step``, ``drain``, ``final_policy``, ``abort`` and
    ``close`` may return a coroutine: the driver runs it on its event loop.

    Attributes:
        roles: what the death of each placed role's process costs
            (:data:`~rlinf_algos.runtime.recovery.RESTART`: ``in_place``, ``learner``, ``never``).
        holds: for ``never`` roles, what they hold (the message that ends the run names it).
        unit: what a step of progress is (``"env step"``, ``"iteration"``).
        lookahead: how many units one iteration adds at most, when a learner restart can go back
            to a checkpoint (checkpoints are written before an iteration would pass the
            interval); 0: after (in one process).
        log_interval: units between metrics rows.
        episodes: the episode statistics of the rows (``None``: rows without them).
        jsonl: rows also to ``metrics.jsonl``.
        failure_files: what a failed run still writes (named in its message).
        checkpoint_on_hard_stop: a stop that could not wait for the iteration in flight still
            writes a checkpoint (its state is consistent between any two calls).
    """

    roles: dict[str, str] = {}
    holds: dict[str, str] = {}
    unit = "step"
    lookahead = 0
    log_interval = 1
    episodes: Any = None
    jsonl = False
    failure_files = "the policy"
    checkpoint_on_hard_stop = True

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    # what tests and callbacks read through the run
    @property
    def groups(self) -> dict[str, Any]:
        return self.driver.groups

    @property
    def pids(self) -> dict[str, list[int]]:
        return self.driver.pids

    @property
    def iteration(self) -> int:
        return self.driver.iteration

    @property
    def restarts(self) -> int:
        return self.driver.restarts

    @property
    def dropped_batches(self) -> int:
        return self.driver.dropped_batches

    @property
    def learner_restarts(self) -> list[dict[str, Any]]:
        return self.driver.learner_restarts

    @property
    def events(self) -> list[str]:
        return self.driver.events

    @abstractmethod
    def columns(self) -> tuple[str, ...]:
        """The header of ``metrics.csv``."""

    @abstractmethod
    def start(self, state: dict[str, Any] | None) -> None:
        """Build or launch everything (``state``: the checkpoint a resumed run continues from,
        loaded next by :meth:`load`)."""

    def load(self, state: dict[str, Any]) -> None:  # noqa: B027 - a run without state of its own
        """Continue from a checkpoint's flow part (the driver restores its books after)."""

    def legacy_books(self, state: dict[str, Any]) -> dict[str, Any]:
        """The driver's books of a checkpoint written before they were kept (``run``)."""
        raise RlinfError("the checkpoint has no run record")

    @abstractmethod
    def done(self) -> bool:
        """Whether the budget is spent."""

    @abstractmethod
    def step(self) -> Any:
        """One iteration (metrics rows through ``driver.row``)."""

    def drain(self) -> Any:  # noqa: B027 - optional
        """Finish what is in flight (updates started by earlier steps)."""

    def last_row(self) -> None:  # noqa: B027 - rows written by every step
        """The last metrics row, when the budget is spent."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The flow run's part of a checkpoint (a ``run`` key adds to the driver's books)."""

    def final_policy(self) -> Any:  # noqa: B027 - optional
        """Fetch the final policy (written by :meth:`finish`)."""

    @abstractmethod
    def finish(self, interrupted: bool, error: str | None) -> dict[str, Any]:
        """Write the policy; return the summary's fields (the driver adds its counters)."""

    def abort(self) -> Any:  # noqa: B027 - optional
        """End the iteration in flight at once (best effort)."""

    def close(self) -> Any:  # noqa: B027 - optional
        """Stop what the run started beside the worker groups."""

    def after_restart(self, role: str, ranks: list[int], configure: bool) -> str | None:
        """Bring restarted ranks of ``role`` up to date; returns a note for the event."""
        return None

    async def settle_inflight(self) -> None:  # noqa: B027 - optional
        """End every update in flight (the learner died)."""

    def restart_learner(self, state: dict[str, Any] | None) -> None:
        """Replace the learner's processes from a checkpoint's ``state`` (``None``: the run's
        start) and point the other roles at it; :class:`~rlinf_algos.runtime.recovery.LearnerDied`
        if it dies again."""
        raise RlinfError(f"{type(self).__name__} cannot restart its learner")

    def user_error(self, err: RlinfError) -> RlinfError:
        """``err`` as the user should see it."""
        return err


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

    traj_ch: Any
    rollout_world: int
    timeout: float
    publish: Callable[[], None]
    seed: int = 0
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)
    dp: Any = None

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
    def publish_module(self) -> Any:
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


class Recipe(ABC):
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

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    # -- on the driver -------------------------------------------------------------------------
    def metric_columns(self, model_cfg: Any) -> tuple[str, ...]:
        """The learner's ``metrics.csv`` columns for a run of the ``model`` section
        ``model_cfg``: ``learner_columns`` (a recipe adds what only some models report, such as
        an auxiliary loss)."""
        return self.learner_columns

    @abstractmethod
    def policy_spec(self, model_cfg: Any, spaces: Mapping[str, Any]) -> dict[str, Any]:
        """The spec of the policy (see :func:`rlinf_algos.models.build_policy`) for the ``model``
        section and the env's ``spaces`` (``obs_dim``, ``act_dim``, ``action_low``,
        ``action_high``, ``max_episode_steps``)."""

    def check_spaces(self, env_cfg: Any, spaces: Mapping[str, Any]) -> None:  # noqa: B027 - optional
        """Raise :class:`~rlinf_core.errors.ConfigError` if the env cannot be trained on."""

    # -- on workers ------------------------------------------------------------------------------
    def channel_maxsize(self, rollout_cfg: Any) -> int:
        """The bound of each key of the trajectory channel (0: none)."""
        return 0

    @abstractmethod
    def iteration_steps(self, rollout_cfg: Any, max_episode_steps: int | None) -> int:
        """Vector steps per env per iteration (an upper bound for whole episodes)."""

    def staleness(self, rollout_cfg: Any) -> int:
        """How many weight versions the rollout policy may lag the learner."""
        return max(1, rollout_cfg.max_staleness)

    @property
    def on_policy(self) -> bool:
        """Collection of iteration ``k`` waits for weights ``k - staleness``."""
        return True

    def launch_extra(self, run: Any) -> dict[str, dict[str, Any]]:
        """The launch settings of each of :attr:`extra_components` (keyword arguments of its role
        worker, :class:`~rlinf_algos.runtime.workers.base.RoleWorker`: ``channels``, ``weights``,
        ``threads``, options)."""
        return {}

    def body(self, role: str, host: Any) -> Any:
        """The body of one of :attr:`extra_components` in its worker's process (``host``: the
        role worker); the rollout and actor bodies are the embodied flow's own
        (:mod:`rlinf_algos.embodied.roles`)."""
        raise RlinfError(f"{self.name} has no {role!r} component")

    @abstractmethod
    def plan(self, run: Any, k: int) -> IterationPlan:
        """Iteration ``k`` of ``run`` (an :class:`~rlinf_algos.embodied.placed.EmbodiedPlacedRun`)."""

    @abstractmethod
    def collect(self, worker: Any, gen: int, steps: int, **kwargs: Any) -> dict[str, Any]:
        """On a rollout worker: one iteration over its env links (``worker.recv(s)`` /
        ``worker.send(s, actions)``); put the data on the channel; return
        ``{"aborted": False, "version": ..., "steps": ...}``."""

    @abstractmethod
    def learner(self, spec: dict[str, Any], model_cfg: Any, ctx: LearnerContext) -> LearnerSide:
        """On the actor worker: the learner for ``spec``."""

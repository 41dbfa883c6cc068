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

A family writes one flow: the embodied family's is :mod:`rlinf_algos.embodied.flow`, which runs
any embodied algorithm's :class:`~rlinf_algos.embodied.recipe.Recipe` (the algorithm's part of
it: no algorithm writes a flow of its own); the language-model family's is
:mod:`rlinf_algos.lm.flow`. Adding an embodied algorithm is one folder with a recipe (its class
derives from :class:`~rlinf_algos.embodied.algorithm.EmbodiedAlgorithm`) and one registration line
in :mod:`rlinf_algos.plugin`.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from rlinf_core.channel import Channel
from rlinf_core.errors import RlinfError

if TYPE_CHECKING:
    from rlinf_algos.stats import EpisodeStats
    from rlinf_core.links import Links
    from rlinf_core.weights import WeightSync

__all__ = [
    "DriverView",
    "Flow",
    "FlowRun",
    "RoleHost",
    "RunnerSettings",
    "await_call",
]

T = TypeVar("T")


async def await_call(call: Awaitable[T]) -> T:
    """Await a :class:`~rlinf_core.worker.GroupCall` (its ``__await__``): what an
    :attr:`~rlinf_algos.embodied.recipe.IterationPlan.learn` returns for a plain call on the actor."""
    return await call


class RunnerSettings(Protocol):
    """What the driver reads of a flow's ``runner`` section (every family's has these:
    :class:`~rlinf_algos.config.RunnerConfig`, :class:`~rlinf_algos.lm.config.LMRunnerConfig`,
    ``rlinf sft``'s)."""

    @property
    def worker_timeout(self) -> float: ...
    @property
    def max_restarts(self) -> int: ...
    @property
    def checkpoint_interval(self) -> int: ...
    @property
    def torch_threads(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def loggers(self) -> Sequence[str]: ...


class RoleHost(Protocol):
    """What a role's body gets of the role worker that hosts it
    (:class:`~rlinf_algos.runtime.workers.base.RoleWorker`): its rank, its wait limit, its
    options and its channels by name."""

    rank: int
    timeout: float
    options: dict[str, Any]

    def channel(self, name: str) -> Channel: ...


class DriverView(Protocol):
    """What a :class:`FlowRun` reads and calls of the driver that runs it
    (:class:`~rlinf_algos.runtime.driver.Driver`, with its recovery,
    :class:`~rlinf_algos.runtime.recovery.Recovery`). A protocol, so that the flows never import
    the runtime above them; its members are the driver's, with their signatures."""

    scheduler: Any
    """The started :class:`rlinf_core.scheduler.Scheduler` the roles are placed on."""
    run_dir: Path
    rollout_only: bool
    timeout: float
    groups: dict[str, Any]
    """Each role's worker group (:class:`rlinf_core.worker.WorkerGroup` of the scheduler)."""
    pids: dict[str, list[int]]
    steps: int
    iteration: int
    gen: int
    restarts: int
    dropped_batches: int
    dropped_steps: int
    learner_restarts: list[dict[str, Any]]
    events: list[str]
    last_checkpoint: Path | None
    callbacks: dict[str, Callable[..., Any]]
    rec: Any
    """The run's :class:`~rlinf_algos.runtime.recorder.RunRecorder` (metrics rows, episodes)."""
    say: Callable[[str], None]

    def log(self, message: str) -> None: ...
    def callback(self, name: str, *args: Any) -> None: ...
    def row(self, step: int, metrics: Mapping[str, Any], force: bool = False) -> dict[str, Any] | None: ...
    def run_async(self, work: Any) -> Any: ...
    def plan(self, role: str) -> Any: ...
    def world(self, role: str) -> int | None: ...
    def channel(self, name: str, near: str, **options: Any) -> Any: ...
    def weight_sync(
        self, name: str, mode: str, roles: Iterable[str], *, adapter_only: bool = False
    ) -> WeightSync: ...
    def links(self) -> Links: ...
    def launch(self, launches: Mapping[str, tuple[type, tuple[Any, ...], dict[str, Any]]]) -> None: ...
    def replace_dead(
        self, dead: Mapping[tuple[str, int], BaseException], where: str, configure: bool = True
    ) -> str | None: ...
    def drop(self, k: int, lost: int, why: str) -> None: ...
    def note_pids(self, role: str, ranks: list[int] | None = None) -> None: ...
    def with_restarts(self, role: str, call: Callable[[], Any]) -> Any: ...
    async def gather(
        self,
        calls: Mapping[tuple[str, int], Any],
        *,
        abort: Callable[[], None],
        learn: asyncio.Future[Any] | None = None,
        drain: Callable[[threading.Event], None] | None = None,
        watch: Mapping[tuple[str, int], asyncio.Future[Any]] | None = None,
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any], BaseException | None]: ...


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
    def runner(self) -> RunnerSettings:
        """The ``runner`` section (``worker_timeout``, ``max_restarts``, ``checkpoint_interval``,
        ``loggers``, ``seed``...)."""

    @abstractmethod
    def placed(self, driver: DriverView) -> FlowRun:
        """The run on workers the driver's scheduler places."""

    @abstractmethod
    def body(self, role: str, host: RoleHost) -> object:
        """The domain object of ``role`` in its worker process (``host``: the role worker); the
        worker calls its methods by name."""


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
    episodes: EpisodeStats | None = None
    jsonl = False
    failure_files = "the policy"
    checkpoint_on_hard_stop = True

    def __init__(self, driver: DriverView) -> None:
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
        """Continue from a checkpoint's flow part (the driver restores its run counters after)."""

    def legacy_run_counters(self, state: dict[str, Any]) -> dict[str, Any]:
        """The driver's run counters of a checkpoint written before they were kept (``run``)."""
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
        """The flow run's part of a checkpoint (a ``run`` key adds to the driver's run counters)."""

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

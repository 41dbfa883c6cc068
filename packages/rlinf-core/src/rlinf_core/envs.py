"""Environments that plugins contribute: gymnasium ids and env families.

Core does not import gymnasium: plugins return :class:`EnvSpec` records from
``rlinf_register_envs`` and :func:`register_with_gymnasium` hands them to gymnasium when a
training process actually needs environments.

An **env family** (:class:`EnvFamily`, registered with ``rlinf_register_env_families`` and
selected by ``env.family``) is a kind of simulator: how its vector env is made from the ``env``
section (possibly already batched, possibly in an interpreter of its own), its task suites with
fixed initial states and instructions, and the checks of its settings. rlinf-algos ships
``gymnasium`` (any gymnasium id: the default), ``metaworld``, ``maniskill`` and ``libero``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["EnvFamily", "EnvSpec", "Interpreter", "TaskInfo", "register_with_gymnasium"]


@dataclass(frozen=True)
class EnvSpec:
    """A gymnasium registration: ``id`` (``rlinf/FrankaReach-v0``), ``entry_point``
    (``"package.module:Class"``), ``max_episode_steps`` and default ``kwargs``."""

    id: str
    entry_point: str
    max_episode_steps: int | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)


def register_with_gymnasium(specs: Iterable[EnvSpec]) -> list[str]:
    """Register every spec with gymnasium (imported here, lazily); ids already registered are
    left alone. Returns the ids registered."""
    import gymnasium

    done = []
    for spec in specs:
        if spec.id in gymnasium.registry:
            continue
        gymnasium.register(
            id=spec.id,
            entry_point=spec.entry_point,
            max_episode_steps=spec.max_episode_steps,
            kwargs=dict(spec.kwargs),
        )
        done.append(spec.id)
    return done


@dataclass(frozen=True)
class Interpreter:
    """The interpreter a family's simulator runs in when it cannot share rlinf's (its pins
    collide): ``rlinf env setup FAMILY`` makes a cached uv venv of ``python`` with
    ``requirements`` and checks that ``imports`` import; ``env.python`` names another one."""

    python: str
    requirements: tuple[str, ...]
    imports: tuple[str, ...]


@dataclass(frozen=True)
class TaskInfo:
    """One task of a family: its ``name`` (what ``env.id`` or a suite lists), the
    ``instruction`` a language-conditioned policy gets, and how many fixed initial states it
    has (``init_states``: an evaluation's episode ``e`` starts from state ``e % init_states``;
    ``0``: the reset seed alone decides)."""

    name: str
    instruction: str = ""
    init_states: int = 0


class EnvFamily(ABC):
    """Base class of a registered env family (``env.family``).

    Class attributes:
        PLUGIN_NAME: the name ``env.family`` selects.
        description: one line for listings and error messages.
        interpreter: :class:`Interpreter` when the simulator runs in an interpreter of its own
            (a child process of the env worker), ``None`` when it runs in rlinf's.
        setup_hint: the command that makes the family work on a fresh machine (shown in the
            errors that say it does not, e.g. ``rlinf env setup metaworld``).
        scripted_expert: whether its vector envs have ``expert_actions()`` (a scripted
            demonstrator: ``rlinf eval expert``, ``rlinf demos record``).

    A subclass implements :meth:`make_vector`, and :meth:`suites` / :meth:`problems` where it
    has suites or settings to check. Torch-free and simulator-free at import: the class is
    registered in processes that never build an env.
    """

    PLUGIN_NAME: ClassVar[str]
    description: ClassVar[str] = ""
    interpreter: ClassVar[Interpreter | None] = None
    setup_hint: ClassVar[str] = ""
    scripted_expert: ClassVar[bool] = False

    @abstractmethod
    def make_vector(self, request: Any) -> Any:
        """A gymnasium vector env of ``request.num_envs`` copies (the ``env`` section as a
        request: ``id``, ``seed``, ``options``, ``obs_mode``, ``image_size``, ``python``,
        ``timeout_s``, ``tasks``...) with gymnasium's ``SAME_STEP`` autoreset: the observation
        of a copy whose episode ended is the next episode's first, ``info["final_obs"]`` holds
        the last one. Where the simulator reports success, ``info["success"]`` each step and,
        for finished episodes, ``info["final_info"]`` with ``success`` (at the last step) and
        ``success_once`` (at any step). Errors in the user's settings are
        :class:`~rlinf_core.errors.ConfigError` at their YAML path."""

    def suites(self) -> Mapping[str, Sequence[str]]:
        """Task suites by name (``MT10`` -> its ten tasks); ``env.id`` may name one (each env
        slot ``i`` then runs task ``i % len(suite)``) and ``rlinf eval --suite FAMILY:SUITE``
        evaluates each task. Empty: the family has none."""
        return {}

    def tasks(self, request: Any) -> Sequence[TaskInfo]:
        """The tasks ``request.id`` names (one task, or a suite's), with instructions and fixed
        initial states where the family knows them without building a simulator."""
        return [TaskInfo(str(request.id))]

    def setup(self, log: Any = print) -> None:
        """Make the simulator work on this machine beyond its interpreter (a driver, assets),
        idempotent and cheap when done: what ``rlinf env setup FAMILY`` runs after making the
        family's venv (where it has an :attr:`interpreter`). ``log`` takes progress lines."""
        return None

    def missing(self) -> str | None:
        """What this machine lacks for the family beyond its interpreter (``None``: nothing),
        for ``rlinf env list``; cheap."""
        return None

    def problems(self, env: Mapping[str, Any]) -> list[Any]:
        """:class:`~rlinf_core.errors.ConfigProblem` s of the ``env`` section (a plain
        mapping, already shape-checked): an unknown task or suite, options the family does not
        take, a missing interpreter... each at its YAML path, naming what would be valid. Called
        by ``--dry-run`` and before a run starts; cheap (no simulator is built)."""
        return []

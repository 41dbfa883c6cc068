"""Env families (``env.family``): the kinds of simulator rlinf trains and evaluates in.

- ``gymnasium`` (the default): any registered gymnasium id, rlinf's original path
  (:mod:`.gymnasium`);
- ``metaworld``: MetaWorld's tasks and its MT10/MT50 suites, in MetaWorld's own interpreter
  (:mod:`.metaworld`);

and whatever installed plugins register with ``rlinf_register_env_families``
(:class:`rlinf_core.envs.EnvFamily`). The runtime never branches on a family's name: it asks the
registry (:func:`get_family`) for the family and the family for a vector env
(:class:`EnvRequest` in, a gymnasium vector env with ``SAME_STEP`` autoreset out).

A family whose simulator needs an interpreter of its own (:attr:`~rlinf_core.envs.EnvFamily.
interpreter`) runs it in a child process of the env worker (:mod:`.subproc`), in ``env.python``
or in the venv ``rlinf env setup FAMILY`` made (:mod:`.venvs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlinf_core.envs import EnvFamily
from rlinf_core.errors import ConfigError, RlinfError

__all__ = ["EnvRequest", "SimulatorError", "get_family", "suite_tasks"]


class SimulatorError(RlinfError):
    """A simulator process failed: it died, did not answer in time, or its simulator raised.
    The vector env that raised it starts a new process at its next reset."""


@dataclass
class EnvRequest:
    """The ``env`` section as a family's :meth:`~rlinf_core.envs.EnvFamily.make_vector` gets it
    (with the number of copies and the seed of the caller: an env worker's share, an
    evaluation's batch)."""

    id: str
    num_envs: int = 1
    seed: int = 0
    vectorization: str = "sync"
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
    obs_mode: str = "state"
    image_size: tuple[int, int] = (64, 64)
    wrappers: list[Any] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    python: str | None = None
    timeout_s: float = 60.0
    tasks: list[str] | None = None
    render: bool = False


def get_family(name: str, path: str = "env.family") -> EnvFamily:
    """The registered env family ``name`` (an instance); an unknown name is a
    :class:`ConfigError` at ``path`` listing the installed ones."""
    from rlinf_core.errors import PluginError
    from rlinf_core.plugins import load_plugins

    try:
        cls = load_plugins().env_families.get(name)
    except PluginError as err:
        raise ConfigError(str(err), path=path) from None
    return cls()


def suite_tasks(family: EnvFamily, name: str, num_envs: int) -> list[str]:
    """The task of each of ``num_envs`` env slots when ``env.id`` is ``name``: a suite's tasks
    in turn (slot ``i`` runs task ``i % len(suite)``), or ``name`` itself in every slot."""
    suite = family.suites().get(name)
    tasks = list(suite) if suite else [name]
    return [tasks[i % len(tasks)] for i in range(num_envs)]

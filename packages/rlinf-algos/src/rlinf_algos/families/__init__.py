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
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError

__all__ = ["EnvRequest", "SimulatorError", "SubprocessFamily", "get_family", "suite_tasks"]


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


class SubprocessFamily(EnvFamily):
    """An env family whose simulator runs in its own interpreter (``interpreter``) through a
    backend file under :data:`~rlinf_algos.families.subproc.CHILD_DIR`: what such families share. A subclass names its
    ``backend`` file and implements :meth:`own_problems` (its options) and :meth:`backend_spec`
    (what its backend's ``make`` takes besides the tasks, seed, obs mode and image size)."""

    backend: str = ""
    start_timeout_per_copy = 0.0
    """Seconds building one copy may take beyond 300 (LIBERO's scenes take 15-60 s each)."""

    def own_problems(self, env: Any) -> list[ConfigProblem]:
        return []

    def backend_spec(self, request: Any, tasks: list[str]) -> dict[str, Any]:
        return {}

    def problems(self, env: Any) -> list[ConfigProblem]:
        from rlinf_algos.families.venvs import family_python

        problems = self.own_problems(env)
        for key in ("kwargs", "wrappers"):
            if env.get(key):
                problems.append(
                    ConfigProblem(f"env.{key}", f"the {self.PLUGIN_NAME} family takes no env.{key}")
                )
        try:
            family_python(self, env.get("python"))
        except ConfigError as err:
            problems.extend(err.problems)
        return problems

    def make_vector(self, request: Any) -> Any:
        from rlinf_algos.families.subproc import CHILD_DIR, RemoteVectorEnv
        from rlinf_algos.families.venvs import family_python

        env = {
            "id": request.id,
            "options": request.options,
            "kwargs": request.kwargs,
            "wrappers": request.wrappers,
        }
        problems = [p for p in self.problems(env) if not p.path.startswith("env.python")]
        if problems:
            raise ConfigError(problems)
        python = family_python(self, request.python)
        assert python is not None  # a family with an interpreter always has one
        tasks = request.tasks or suite_tasks(self, request.id, request.num_envs)
        spec = {
            "tasks": tasks,
            "seed": int(request.seed),
            "obs_mode": request.obs_mode,
            "image_size": list(request.image_size),
            "max_episode_steps": request.max_episode_steps,
            "render": bool(request.render),
            **self.backend_spec(request, tasks),
        }
        return RemoteVectorEnv(
            self.PLUGIN_NAME,
            python,
            CHILD_DIR / self.backend,
            spec,
            timeout=request.timeout_s,
            start_timeout=max(300.0, request.timeout_s, self.start_timeout_per_copy * len(tasks)),
            env={"MUJOCO_GL": "egl"},
        )

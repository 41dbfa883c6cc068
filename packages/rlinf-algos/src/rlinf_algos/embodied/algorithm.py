"""The base class of the embodied algorithms (``ppo``, ``sac``, ``grpo``): their shared sections,
checks and the choice of runtime. Light (pydantic and rlinf_core): the plugin imports it."""

from __future__ import annotations

import itertools
import os
from abc import abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rlinf_core.algorithm import Algorithm, ProgressFn
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from rlinf_algos.config import RunSections
    from rlinf_algos.embodied.recipe import Recipe
    from rlinf_core.plugins import PluginHost
    from rlinf_core.scheduler import Scheduler

__all__ = ["EmbodiedAlgorithm"]


class EmbodiedAlgorithm(Algorithm):
    """Base class of the algorithms that train a policy in gymnasium environments: validates the
    ``env``, ``model``, ``runner`` and ``rollout`` sections and runs the algorithm's
    :class:`Recipe` in one process or on workers."""

    components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor")
    required_components: ClassVar[tuple[str, ...]] = ("env", "rollout", "actor")
    distributed: ClassVar[bool] = True
    sections: ClassVar[tuple[str, ...]] = (
        "cluster",
        "algorithm",
        "env",
        "model",
        "runner",
        "rollout",
        "actor",
    )
    multi_rank_learner: ClassVar[bool] = True
    """The learner may run on several processes (one ``torch.distributed`` group)."""
    action_kinds: ClassVar[tuple[str, ...]] = ("box",)
    """The action-space parts it trains (:func:`~rlinf_algos.action_spaces.space_kinds`: ``box``,
    ``discrete``, ``multi_discrete``, ``multi_binary``; dicts and tuples of them); an env with
    others is refused before anything starts."""
    action_space_hint: ClassVar[str] = (
        "use algorithm.name: ppo (or grpo), which train discrete, multi-discrete, multi-binary and "
        "hybrid (dict/tuple) action spaces"
    )
    """What the refusal of an action space tells the user to do instead."""

    @abstractmethod
    def recipe(self) -> Recipe:
        """The algorithm's flow (imports the training code)."""

    @classmethod
    def run_config_problems(cls, run_config: Mapping[str, Any]) -> list[ConfigProblem]:
        """Every problem of the ``env``, ``model``, ``runner`` and ``rollout`` sections and of how
        they fit the algorithm (:meth:`validate_sections`)."""
        return cls.validate_sections(run_config)[1]

    @classmethod
    def validate_sections(
        cls,
        run_config: Mapping[str, Any],
        algorithm_config: BaseModel | None = None,
        host: PluginHost | None = None,
    ) -> tuple[RunSections | None, list[ConfigProblem]]:
        """``(RunSections, problems)``: the ``env``, ``model`` (by the model of its type),
        ``runner``, ``rollout`` and ``actor`` sections validated once, and every problem of them
        and of how they fit the algorithm: pipeline stages, the learner's device, memory, the
        env id and its spaces (:meth:`fit_problems`, :meth:`algorithm_fit_problems`,
        :meth:`space_problems`). ``algorithm_config``: the validated ``algorithm`` section
        (``None``: validated here, as far as it goes, for the checks that need it)."""
        from rlinf_algos.config import env_id_problems, validate_run_sections

        unknown = cls.unknown_sections(run_config)
        try:
            sections = validate_run_sections(run_config, host)
        except ConfigError as err:
            return None, unknown + list(err.problems) + env_id_problems(run_config)
        if algorithm_config is None:
            try:
                algorithm_config = cls.config_model.model_validate(run_config.get("algorithm"))
            except Exception:  # its own problems are reported with their paths
                algorithm_config = None
        env_problems = env_id_problems(run_config)
        return sections, (
            unknown
            + cls.fit_problems(sections)
            + cls.algorithm_fit_problems(sections, algorithm_config)
            + env_problems
            + ([] if env_problems else cls.space_problems(sections))
        )

    @classmethod
    def algorithm_fit_problems(
        cls, sections: RunSections, algorithm_config: BaseModel | None
    ) -> list[ConfigProblem]:
        """How the valid sections fit the validated ``algorithm`` section (``None`` when it is
        invalid: nothing to check): the memory the run needs (:meth:`memory_problems`);
        algorithms add theirs."""
        return [] if algorithm_config is None else cls.memory_problems(sections, algorithm_config)

    @classmethod
    def resolved_config(cls, run_config: Mapping[str, Any]) -> dict[str, Any] | None:
        """``run_config`` with the ``env``, ``model``, ``runner`` and ``rollout`` sections (and
        ``actor`` when given) as validated, every default filled in; the other sections as
        written (the runtime fills in ``algorithm``)."""
        from rlinf_algos.config import load_run_sections

        sections = load_run_sections(run_config)
        out = dict(run_config)
        for name in ("env", "model", "runner", "rollout", "actor"):
            if name != "actor" or isinstance(run_config.get(name), Mapping):
                out[name] = getattr(sections, name).model_dump(mode="json")
        return out

    @classmethod
    def space_problems(cls, sections: RunSections) -> list[ConfigProblem]:
        """Whether the env's observation and action spaces can be trained on, from one copy built
        here (:func:`~rlinf_algos.envs.probe_spaces`: gymnasium's own envs and ``module:Env``
        ids; nothing for the ids of installed plugins, which the env worker checks)."""
        from rlinf_algos.action_spaces import action_space_spec
        from rlinf_algos.envs import probe_spaces
        from rlinf_algos.obs import describe_space

        env = sections.env
        try:
            got = probe_spaces(env.id, env.kwargs, env.wrappers, env.timeout_s)
        except ConfigError as err:
            return list(err.problems)
        if got is None:
            return []
        obs_space, act_space = got
        problems = []
        if env.obs_mode == "state":
            try:
                obs = describe_space(obs_space)
            except ValueError as err:
                problems.append(ConfigProblem("env.id", f"{env.id!r}: {err}"))
            else:
                if obs["kind"] == "box" and len(obs["shape"]) != 1:
                    problems.append(
                        ConfigProblem(
                            "env.id",
                            f"{env.id!r} has observation space {obs_space}; rlinf takes a flat Box (a vector) "
                            "or a flat Dict (image, state, instruction); for images set env.obs_mode: pixels or "
                            "pixels+state, or flatten it (env.wrappers: [gymnasium.wrappers:FlattenObservation])",
                        )
                    )
        try:
            spec = action_space_spec(act_space)
        except ValueError as err:
            return [*problems, ConfigProblem("env.id", f"{env.id!r}: {err}")]
        problem = cls.action_space_problem(spec, str(act_space), env.id, sections.model.type)
        return problems if problem is None else [*problems, problem]

    @classmethod
    def action_space_problem(
        cls, spec: Mapping[str, Any], shown: str, env_id: str, model_type: str = "mlp"
    ) -> ConfigProblem | None:
        """Why this algorithm cannot train the action space ``spec`` (shown as ``shown``), or
        ``None``."""
        from rlinf_algos.action_spaces import space_kinds

        extra = sorted(space_kinds(spec) - set(cls.action_kinds))
        if extra:
            takes = (
                "a continuous (Box) action space"
                if cls.action_kinds == ("box",)
                else (f"action spaces of {', '.join(cls.action_kinds)} parts")
            )
            return ConfigProblem(
                "env.id",
                f"{env_id!r} has action space {shown}; {cls.PLUGIN_NAME} needs {takes}: {cls.action_space_hint}",
            )
        if spec["kind"] != "box" and not _builds_any_action_space(model_type):
            return ConfigProblem(
                "model.type",
                f"{env_id!r} has action space {shown}; model.type {model_type} takes a continuous (Box) "
                "action space; use model.type mlp",
            )
        return None

    @classmethod
    def memory_items(cls, sections: RunSections, algo_config: BaseModel | None) -> list[tuple[str, str, int]]:
        """What the run will hold in memory, as ``(YAML path, what, lower bound in bytes)``
        estimated from the config alone (observations and actions count as one number each, so
        the true need is larger): the env copies and the networks with their gradients and Adam
        moments. Algorithms add their rollout or replay buffer."""
        items = [
            ("env.num_envs", f"{sections.env.num_envs:,} env copies", sections.env.num_envs * _ENV_BYTES)
        ]
        sizes = sections.model.hidden_sizes
        if sizes:
            dims = [1, *sizes, 1]
            params = sum((a + 1) * b for a, b in itertools.pairwise(dims))
            items.append(
                (
                    "model.hidden_sizes",
                    f"networks of hidden sizes {_short(sizes)} ({params:,} parameters each, with "
                    f"gradients and Adam moments, x{cls.network_copies})",
                    params * 4 * 4 * cls.network_copies,
                )
            )
        return items

    network_copies: ClassVar[int] = 2
    """How many networks of ``model.hidden_sizes`` the learner holds (actor and critic)."""

    @classmethod
    def memory_problems(
        cls, sections: RunSections, algorithm_config: BaseModel | None
    ) -> list[ConfigProblem]:
        """The items of :meth:`memory_items` that cannot fit in this machine's memory (each
        alone); ``RLINF_SKIP_MEMORY_CHECK=1`` turns the check off (a learner node with more
        memory than the driver's). ``algorithm_config``: the validated ``algorithm`` section."""
        if os.environ.get("RLINF_SKIP_MEMORY_CHECK", "") not in ("", "0"):
            return []
        total = memory_total()
        problems = []
        for path, what, nbytes in cls.memory_items(sections, algorithm_config):
            if nbytes > total:
                problems.append(
                    ConfigProblem(
                        path,
                        f"{what} would need at least {format_bytes(nbytes)}, more than the {format_bytes(total)} "
                        "of memory of this machine: lower it (RLINF_SKIP_MEMORY_CHECK=1 skips this check)",
                    )
                )
        return problems

    @classmethod
    def fit_problems(cls, sections: RunSections) -> list[ConfigProblem]:
        """How the valid sections fit this algorithm (subclasses add theirs)."""
        problems = []
        stages = sections.rollout.pipeline_stages
        if sections.env.num_envs % stages:
            problems.append(
                ConfigProblem(
                    "rollout.pipeline_stages",
                    f"{stages} stages do not divide env.num_envs={sections.env.num_envs}; "
                    "each env worker's envs are split evenly into stages",
                )
            )
        return problems

    def run(
        self,
        scheduler: Scheduler | None,
        run_config: Mapping[str, Any],
        run_dir: str | Path,
        *,
        resume: bool = False,
        progress: ProgressFn | None = None,
        callbacks: Mapping[str, Callable[..., Any]] | None = None,
        rollout_only: bool = False,
    ) -> dict[str, Any]:
        """Train over the run's sections; write metrics, checkpoints, the final policy and
        ``summary.json`` under ``run_dir``; return the summary. The one driver
        (:mod:`rlinf_algos.runtime.driver`) runs the recipe's flow
        (:mod:`rlinf_algos.embodied`): in this process with ``scheduler=None``, on workers with a
        started scheduler."""
        from rlinf_algos.config import load_run_sections

        sections = load_run_sections(run_config)
        problems = self.fit_problems(sections)
        if problems:
            raise ConfigError(problems)
        from rlinf_algos.embodied.flow import EmbodiedFlow
        from rlinf_algos.runtime.driver import Driver

        return Driver(
            EmbodiedFlow(self.recipe(), sections),
            scheduler,
            Path(run_dir),
            resume=resume,
            progress=progress,
            callbacks=callbacks,
            rollout_only=rollout_only,
        ).run()

    def summary_text(self, summary: Mapping[str, Any]) -> str:
        ret = summary.get("final_return_mean")
        success = summary.get("success_rate")
        return (
            f"done: {summary['total_env_steps']} env steps in {summary['wall_s']:.1f} s "
            f"({summary['env_steps_per_s']:,.0f} steps/s); final return "
            f"{'-' if ret is None else f'{ret:.1f}'}, best {summary.get('best_return_mean')}"
            + ("" if success is None else f", success rate {success:.2f} (last 100 training episodes)")
        )


_ENV_BYTES = 4 * 2**10
"""A lower bound of the memory of one env copy (a gymnasium env object and its arrays)."""


def memory_total() -> int:
    """This machine's physical memory in bytes."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def format_bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit below it: ``7.3 TiB``."""
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n} bytes"


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def rollout_item(
    sections: RunSections, steps: int, steps_path: str, floats_per_step: int, what: str
) -> tuple[str, str, int]:
    """A buffer of ``env.num_envs x steps`` steps of ``floats_per_step`` float32, reported at the
    larger of its two factors."""
    n = sections.env.num_envs
    path = steps_path if steps > n else "env.num_envs"
    return (
        path,
        f"{what} of env.num_envs {n:,} x {steps_path} {steps:,} steps",
        n * steps * floats_per_step * 4,
    )


def _builds_any_action_space(type_name: str) -> bool:
    """Whether the model type ``type_name`` builds the ``ActorCritic`` over discrete, multi-discrete,
    multi-binary and hybrid action spaces (its registered roles say so; ``mlp``'s do)."""
    from rlinf_algos.models import model_type

    try:
        return "ActorCritic" in model_type(type_name).roles
    except RlinfError:  # not registered: validation names it
        return False

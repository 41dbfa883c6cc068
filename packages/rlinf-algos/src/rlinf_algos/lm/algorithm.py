"""The language-model algorithms: :class:`LMAlgorithm`, their base, and ``grpo_lm``
(:class:`GRPOLM`, what ``rlinf train examples/grpo_arith.yaml`` selects with
``algorithm: {name: grpo_lm}``) and ``ppo_lm`` (:class:`PPOLM`), registered by
:mod:`rlinf_algos.plugin`. Imports pydantic and rlinf_core only; the training code loads inside
:meth:`LMAlgorithm.run`.

Adding one is one folder and one registration line, as for the embodied algorithms
(``packages/rlinf-algos/docs/extending.md``): its ``algorithm`` section subclasses
:class:`~rlinf_algos.lm.config.LMGRPOConfig` (its ``name`` a ``Literal`` of the algorithm's name,
its ``actor`` the ``module:Class`` of its learner, imported when the actor starts), its class
subclasses :class:`LMAlgorithm` with ``PLUGIN_NAME`` and ``config_model``, and the plugin returns
it from ``rlinf_register_algorithms``. ``algorithm.name`` then selects it, and its section is
validated by its own model wherever a run's sections are
(:func:`~rlinf_algos.lm.algorithm_registry.lm_algorithm_config`).

``rlinf train`` validates the whole YAML once, through :meth:`LMAlgorithm.validate_sections`
(:func:`rlinf_algos.config.prepare.prepare_run`), before anything starts, writes ``config.yaml``,
starts the scheduler ``runner.scheduler`` names (none for ``local``) and calls :meth:`LMAlgorithm.run`
with a mapping that carries the validated sections; ``run`` runs the language-model flow
(:mod:`rlinf_algos.lm.flow`) with the one driver: in this process or on workers placed by the
``cluster`` section.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from rlinf_algos.lm.config import (
    LMGRPOConfig,
    LMPPOConfig,
    LMRunConfig,
    load_lm_sections,
    resolved_lm_config,
    validate_lm_sections,
)
from rlinf_algos.lm.engines import rollout_problems
from rlinf_core.algorithm import Algorithm, ProgressFn
from rlinf_core.errors import ConfigError, ConfigProblem, RlinfError

if TYPE_CHECKING:
    from rlinf_core.plugins import PluginHost
    from rlinf_core.scheduler import Scheduler

__all__ = ["GRPOLM", "PPOLM", "LMAlgorithm"]

SECTIONS = (
    "cluster",
    "algorithm",
    "model",
    "task",
    "sft",
    "runner",
    "data",
    "reward",
    "critic",
    "actor",
    "rollout",
    "tools",
)


class LMAlgorithm(Algorithm):
    """Base class of the algorithms that train a language policy on prompts with a reward
    (``grpo_lm``, ``ppo_lm``, a plugin's): validates the ``model``, ``task``/``data``,
    ``reward``, ``runner``, ``rollout``... sections and runs the language-model flow
    (:mod:`rlinf_algos.lm.flow`) in this process or on workers. A subclass sets ``PLUGIN_NAME``
    and ``config_model`` (a subclass of :class:`~rlinf_algos.lm.config.LMGRPOConfig` whose
    ``actor`` names its learner class)."""

    config_model: ClassVar[type[BaseModel]] = LMGRPOConfig
    components: ClassVar[tuple[str, ...]] = ("rollout", "reward", "reference", "actor", "agent", "tool")
    required_components: ClassVar[tuple[str, ...]] = ("rollout", "reward", "actor")
    """The ``reference`` is required too when ``algorithm.kl_coef > 0`` (its KL term uses it):
    :meth:`run_config_problems` checks that."""
    distributed: ClassVar[bool] = True
    """``rlinf train`` defaults to ``runner.scheduler: ray`` (workers placed by the ``cluster``
    section); ``runner.scheduler: local`` trains in the rlinf process."""
    multi_rank_learner: ClassVar[bool] = True
    """The actor may be placed on several processes (a data-parallel learner group)."""
    lora_publishes_adapter: ClassVar[bool] = True
    """With ``model.lora`` the learner publishes the adapter alone, through the object store
    (``rollout.weight_sync``: :mod:`rlinf_algos.weight_sync`)."""

    @classmethod
    def idle_components(cls, run_config: Mapping[str, Any]) -> dict[str, str]:
        """The placed components a run of ``run_config`` never starts, and why: the
        ``reference`` at ``algorithm.kl_coef: 0`` (``--dry-run`` leaves them out of the plan)."""
        algo = run_config.get("algorithm")
        kl = algo.get("kl_coef", 0.0) if isinstance(algo, Mapping) else 0.0
        if isinstance(kl, int | float) and kl == 0:
            return {"reference": "algorithm.kl_coef is 0: no KL term, no reference is started"}
        return {}

    @classmethod
    def run_config_problems(cls, run_config: Mapping[str, Any]) -> list[ConfigProblem]:
        """Every problem of the run's sections but ``algorithm`` (:meth:`validate_sections`)."""
        return cls.validate_sections(run_config)[1]

    @classmethod
    def validate_sections(
        cls,
        run_config: Mapping[str, Any],
        algorithm_config: BaseModel | None = None,
        host: PluginHost | None = None,
    ) -> tuple[LMRunConfig | None, list[ConfigProblem]]:
        """``(LMRunConfig, problems)``: every section validated once
        (:func:`~rlinf_algos.lm.config.validate_lm_sections`; the ``algorithm`` section's own
        problems are the runner's), and every problem of the ``model``, ``task``, ``sft`` and
        ``runner`` sections, unknown sections, an ``agent`` component missing from the placement
        of a multi-agent run, a ``reference`` missing while ``algorithm.kl_coef > 0``, and a
        ``rollout.engine`` that is not registered or ``rollout.options`` it does not take."""
        problems = [
            ConfigProblem(str(key), f"unknown section; a {cls.PLUGIN_NAME} run has {', '.join(SECTIONS)}")
            for key in run_config
            if key not in SECTIONS
        ]
        try:
            run = validate_lm_sections(run_config, algorithm_config, host)
        except ConfigError as err:
            return None, problems + [p for p in err.problems if not p.path.startswith("algorithm")]
        problems += _source_problems(run)
        if run_config.get("critic") is not None and not isinstance(run.algorithm, LMPPOConfig):
            problems.append(ConfigProblem("critic", "a critic is trained by algorithm.name: ppo_lm only"))
        scheduler = run.runner.scheduler or "ray"
        cluster = run_config.get("cluster")
        placement = cluster.get("component_placement") if isinstance(cluster, Mapping) else None
        placed = (
            {x.strip() for key in placement for x in str(key).split(",")}
            if isinstance(placement, Mapping)
            else set()
        )
        multiagent = run.task.mode == "multiagent"
        if scheduler != "local" and multiagent and isinstance(placement, Mapping) and "agent" not in placed:
            problems.append(
                ConfigProblem(
                    "cluster.component_placement",
                    "task.mode multiagent runs its lead and subagents as `agent` processes: place them, "
                    'e.g. agent: {node_group: node, placement: "0:0-15"}',
                )
            )
        if run.tools is None and "tool" in placed:
            problems.append(
                ConfigProblem(
                    "cluster.component_placement.tool",
                    "a `tool` component serves the run's tools, but the run has no `tools` section: "
                    "add one, or remove the `tool` component",
                )
            )
        if scheduler != "local" and run.algorithm.kl_coef > 0 and placed and "reference" not in placed:
            problems.append(
                ConfigProblem(
                    "cluster.component_placement",
                    f"algorithm.kl_coef is {run.algorithm.kl_coef:g}: its KL term needs the reference "
                    "policy: place a `reference` component, or set algorithm.kl_coef: 0",
                )
            )
        problems += _device_problems(run, placement)
        problems += rollout_problems(run)
        return run, problems

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
        """Warm start, evaluate, train with GRPO, evaluate; return the summary
        (``accuracy_before``, ``accuracy_after``...; also in ``run_dir/summary.json``).

        ``scheduler=None`` (``runner.scheduler: local``) runs every component in this process;
        a started scheduler places the rollout, reward, reference, actor (and agent) workers
        where the ``cluster`` section says. ``progress`` is called with every metrics row.
        """
        if rollout_only:
            raise RlinfError(
                f"{self.PLUGIN_NAME} has no rollout-only mode (it measures accuracy, not env steps)"
            )
        from rlinf_algos.lm.flow import train_lm

        return train_lm(
            load_lm_sections(run_config),
            Path(run_dir),
            progress=progress,
            cluster=_cluster_of(run_config),
            resume=resume,
            scheduler=scheduler,
            callbacks=callbacks,
            write_config=False,  # rlinf train wrote config.yaml before the scheduler started
        )

    @classmethod
    def resolved_config(cls, run_config: Mapping[str, Any]) -> dict[str, Any] | None:
        """Every section with its defaults (:func:`~rlinf_algos.lm.config.resolved_lm_config`; the
        sections ``run_config`` carries, when it is validated): what ``config.yaml`` holds and
        ``--dry-run`` prints; it runs as it is when fed back."""
        return resolved_lm_config(load_lm_sections(run_config), _cluster_of(run_config))

    @classmethod
    def plan_memory(
        cls, run: Mapping[str, Any], devices: Mapping[str, Any], gpu_memory_gib: float | None
    ) -> list[Any] | None:
        """Each role's memory per process (:func:`rlinf_algos.lm.memory.plan_memory`), for
        ``--dry-run`` and the refusal of plans that cannot fit."""
        from rlinf_algos.lm.memory import plan_memory

        return plan_memory(run, devices, gpu_memory_gib)

    def summary_text(self, summary: Mapping[str, Any]) -> str:
        """Held-out accuracy (reward 1) and mean reward before and after, not env steps."""
        return (
            f"done: held-out accuracy {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f} "
            f"({summary['accuracy_gain_pp']:+.1f} pp), mean reward {summary['val_score_before']:.3f} -> "
            f"{summary['val_score_after']:.3f} in {summary['total_s']:.1f} s, {summary['iterations']} iterations"
        )


class GRPOLM(LMAlgorithm):
    """GRPO on a language policy with an exact verifier; components rollout, reward, reference,
    actor (and agent: multi-agent and tool-calling episodes; tool: a tools run's tools)."""

    PLUGIN_NAME: ClassVar[str] = "grpo_lm"
    config_model: ClassVar[type[BaseModel]] = LMGRPOConfig


class PPOLM(GRPOLM):
    """PPO on a language policy: GRPO's components, with a critic (a value head on a model of
    the same architecture, the ``critic`` section) trained on the actor and token-level GAE."""

    PLUGIN_NAME: ClassVar[str] = "ppo_lm"
    config_model: ClassVar[type[BaseModel]] = LMPPOConfig
    multi_rank_learner: ClassVar[bool] = False
    """Not yet: the critic's value loss and its own optimiser would need the same split as the
    policy step; place the ppo_lm actor on one process (grpo_lm's may have several)."""


def _device_problems(run: LMRunConfig, placement: object) -> list[ConfigProblem]:
    """``runner.device`` names a CUDA device while the actor is placed on the ``node`` group
    (whole nodes as the resource: no accelerator is given to the process)."""
    device = str(run.runner.device)
    if device.strip() not in ("auto", ""):
        import torch

        try:
            torch.device(device.strip())
        except (RuntimeError, ValueError):
            return [
                ConfigProblem(
                    "runner.device", f"{device!r} is not a torch device; use auto, cpu, cuda or cuda:N"
                )
            ]
    if not device.startswith("cuda") or not isinstance(placement, Mapping):
        return []
    for key, spec in placement.items():
        if "actor" in [x.strip() for x in str(key).split(",")] and isinstance(spec, Mapping):
            group = spec.get("node_group", "node")
            if group == "node":
                return [
                    ConfigProblem(
                        "runner.device",
                        f"{device!r}, but the actor is placed on node group 'node' (whole nodes, no "
                        "accelerators given to the process): place it on a node group with GPUs "
                        "(placement: '0-1' gives GPUs 0 and 1) or use device: auto or cpu",
                    )
                ]
    return []


def _source_problems(run: LMRunConfig) -> list[ConfigProblem]:
    """What can be checked up front of the model folder, the data files and the reward: the
    folder is a causal LM, it has a chat template when ``data.apply_chat_template`` is true,
    the data files exist, the reward loads."""
    from pathlib import Path

    problems: list[ConfigProblem] = []
    if run.model.path is not None:
        from rlinf_algos.lm.folder import check_model_files, check_model_folder, has_chat_template

        try:
            check_model_folder(run.model.path)
            check_model_files(run.model.path, "model.path", run.model.trust_remote_code)
        except ConfigError as err:
            return [*problems, *err.problems]
        if run.data is not None and run.data.apply_chat_template and not has_chat_template(run.model.path):
            problems.append(
                ConfigProblem(
                    "data.apply_chat_template",
                    f"the tokenizer in {run.model.path} has no chat template; set data.apply_chat_template=false "
                    "(prompts used as plain text) or add a chat_template to its tokenizer_config.json",
                )
            )
    if run.data is not None:
        from rlinf_algos.lm.data import check_data_files

        for key in ("train_files", "val_files"):
            missing = False
            for i, f in enumerate(getattr(run.data, key)):
                if not Path(f).expanduser().is_file():
                    problems.append(ConfigProblem(f"data.{key}[{i}]", f"{f}: no such file"))
                    missing = True
            if not missing:
                try:
                    check_data_files(run.data, "train" if key == "train_files" else "val")
                except ConfigError as err:
                    problems.extend(err.problems)
    if run.reward is not None:
        from rlinf_algos.lm.rewards import load_reward

        try:
            load_reward(run.reward)
        except ConfigError as err:
            problems.extend(err.problems)
        except RlinfError as err:
            problems.append(ConfigProblem("reward", str(err)))
    return problems


def _cluster_of(run_config: object) -> dict[str, Any] | None:
    cluster = run_config.get("cluster") if isinstance(run_config, Mapping) else None
    return dict(cluster) if isinstance(cluster, Mapping) else None

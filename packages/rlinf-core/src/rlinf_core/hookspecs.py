"""Hook specifications: everything a plugin can contribute to rlinf.

A plugin is a module registered under the ``rlinf`` entry-point group, whose name is its
distribution name without ``rlinf-`` (``hw-franka = "rlinf_hw_franka.plugin"``). It implements
any of the hooks below with :data:`rlinf_core.plugins.hookimpl`::

    from rlinf_core.plugins import hookimpl

    @hookimpl
    def rlinf_register_hardware():
        return [Franka]

Registration hooks take no arguments and return *classes* that carry a ``PLUGIN_NAME``; rlinf
builds instances from validated configuration. A plugin module must import without torch, ray or
any vendor SDK: keep heavy imports inside the classes' methods or in modules the classes live in
and import them lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Callable

    import click

    from rlinf_core.algorithm import Algorithm
    from rlinf_core.envs import EnvFamily, EnvSpec
    from rlinf_core.hardware import HardwarePlugin
    from rlinf_core.model import ModelType
    from rlinf_core.network import NetworkProvider
    from rlinf_core.reward import RewardFunction
    from rlinf_core.rollout import RolloutEngine
    from rlinf_core.scheduler import Scheduler
    from rlinf_core.tools import ToolSet

PROJECT_NAME = "rlinf"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def rlinf_register_hardware() -> list[type[HardwarePlugin]] | None:
    """Register hardware types that node groups can own (``hardware.type`` in the cluster YAML).

    :returns: :class:`~rlinf_core.hardware.HardwarePlugin` subclasses. Their ``PLUGIN_NAME`` is
        matched case-insensitively; two plugins claiming one name is an error naming both.
        ``None`` or an empty list registers nothing.

    Called once per process that builds the plugin manager: the driver (placement planning,
    ``rlinf hw check``) and workers that validate hardware.
    """


@hookspec
def rlinf_register_algorithms() -> list[type[Algorithm]] | None:
    """Register training algorithms, selected by ``algorithm.name`` in the run YAML.

    :returns: :class:`~rlinf_core.algorithm.Algorithm` subclasses (``ppo``, ``sac``, ``grpo``...).
        ``None`` or an empty list registers nothing.

    Called in the driver process when a run configuration is validated.
    """


@hookspec
def rlinf_register_schedulers() -> list[type[Scheduler]] | None:
    """Register runtimes that place and launch components (``ray`` is shipped by rlinf-scheduler).

    :returns: :class:`~rlinf_core.scheduler.Scheduler` subclasses. ``None`` or an empty list
        registers nothing.

    Called in the driver process.
    """


@hookspec
def rlinf_register_network_providers() -> list[type[NetworkProvider]] | None:
    """Register overlay network providers (``easytier`` is shipped by rlinf-net-easytier).

    :returns: :class:`~rlinf_core.network.NetworkProvider` subclasses. ``None`` or an empty list
        registers nothing.

    Called in the process running ``rlinf net`` or ``rlinf node start --network``.
    """


@hookspec
def rlinf_register_envs() -> list[EnvSpec] | None:
    """Register gymnasium environment ids (``rlinf/FrankaReach-v0``).

    :returns: :class:`~rlinf_core.envs.EnvSpec` records; rlinf hands them to gymnasium in the
        processes that create environments, so this hook must not import gymnasium itself.
        ``None`` or an empty list registers nothing.

    Called in the driver (config validation) and in env worker processes.
    """


@hookspec
def rlinf_register_env_families() -> list[type[EnvFamily]] | None:
    """Register env families, selected by ``env.family`` in the run YAML (rlinf-algos ships
    ``gymnasium``, ``metaworld``, ``maniskill`` and ``libero``).

    :returns: :class:`~rlinf_core.envs.EnvFamily` subclasses: each says how its vector env is
        made from the ``env`` section (possibly already batched, possibly in an interpreter of
        its own: ``interpreter``), its task suites with fixed initial states and instructions,
        and the checks of its settings. Their ``PLUGIN_NAME`` is matched case-insensitively; two
        plugins claiming one name is an error naming both. ``None`` or an empty list registers
        nothing.

    Called in the driver (config validation, ``rlinf env``, ``rlinf eval --suite``) and in env
    worker processes, so keep the hook itself free of simulators, torch and gymnasium.
    """


@hookspec
def rlinf_register_models() -> list[type[ModelType]] | None:
    """Register model types, selected by ``model.type`` in the run YAML (``mlp``, ``vla`` and
    ``hf`` are shipped by rlinf-algos).

    :returns: :class:`~rlinf_core.model.ModelType` subclasses; each declares the pydantic model
        of its ``model`` section (``config_model``: its own options, validated with their YAML
        paths before a run starts) and builds policy modules from the spec an algorithm makes of
        the section. ``None`` or an empty list registers nothing. A model type of the
        language-model algorithms subclasses ``rlinf_algos.lm.model_type.LMModelType`` (its
        ``load(spec, path, *, trainable, device, meta)``): every language-model role loads its
        model through the type ``model.type`` names.

    Called in the driver (config validation) and in every worker process that builds a policy
    (rollout, actor, reference workers), so keep the hook itself torch-free.
    """


@hookspec
def rlinf_register_rollout_engines() -> list[type[RolloutEngine]] | None:
    """Register rollout engines for language-model runs, selected by ``rollout.engine`` (``hf``,
    Hugging Face ``generate``, is shipped by rlinf-algos; vLLM or SGLang engines come this way).

    :returns: :class:`~rlinf_core.rollout.RolloutEngine` subclasses; rlinf builds one per rollout
        process with the ``model`` section, the sampling settings and ``rollout.options``.
        ``None`` or an empty list registers nothing.

    Called in the driver (config validation) and in the rollout processes, so keep the hook and
    the class torch-free at import (import the engine's library in its constructor).
    """


@hookspec
def rlinf_register_rewards() -> list[type[RewardFunction]] | None:
    """Register reward functions, selected by ``reward.name`` in the run YAML (``exact_match``,
    ``math`` and ``arith`` are shipped by rlinf-algos).

    :returns: :class:`~rlinf_core.reward.RewardFunction` subclasses; rlinf builds each with the
        keyword arguments of ``reward.kwargs`` and calls it on batches of completions. ``None``
        or an empty list registers nothing.

    Called in the driver (config validation) and in every process that scores completions (the
    reward component, which may run on a CPU-only node), so keep the hook and the reward
    torch-free.
    """


@hookspec
def rlinf_register_tools() -> list[Callable[..., Any] | type[ToolSet]] | None:
    """Register tools that agents can call, selected by ``tools[].name`` in the run YAML
    (``search`` and ``python`` are shipped by rlinf-algos).

    :returns: tool functions (type hints on every parameter, a Google-style docstring; named by
        their ``__name__``; sync or ``async``) and :class:`~rlinf_core.tools.ToolSet`
        subclasses (named by ``PLUGIN_NAME``; their public methods are the tools). Two plugins
        claiming one name is an error naming both. ``None`` or an empty list registers nothing.

    Called in the driver (config validation), in agent processes (the tools' JSON schemas go
    into the chat template) and in the processes that execute tool calls, which may run on
    CPU-only nodes: keep the hook and the tools' modules torch-free at import.
    """


@hookspec
def rlinf_register_advantage_estimators() -> list[Callable[..., Any]] | None:
    """Register advantage estimators, selected by ``algorithm.adv_estimator`` in the run YAML
    (``gae``, ``grpo``, ``dr_grpo``, ``rloo`` and ``reinforce_plus_plus`` are shipped by
    rlinf-algos).

    :returns: functions, each named by its ``PLUGIN_NAME`` attribute (else its ``__name__``) and
        marked with rlinf-algos' ``rlinf_algos.objectives.advantage_estimator`` decorator, which
        says which kind it is: an *outcome* estimator ``fn(outcomes, cfg) -> Tensor [E]`` (one
        advantage per episode from the episodes' rewards in groups: ``grpo``, ``grpo_lm``) or a
        *critic* estimator ``fn(steps, cfg) -> (advantages, returns)`` (per-step rewards and a
        critic's values: ``ppo``, ``ppo_lm``); ``cfg`` is the validated ``algorithm`` section.
        Two plugins claiming one name is an error naming both. ``None`` or an empty list
        registers nothing.

    Called in the driver (config validation) and in the processes that compute advantages (the
    actor, the reward worker of embodied GRPO), and by ``rlinf plugins`` (which lists the names).
    The functions may import torch at module level: the hook runs only when a run names an
    estimator or the plugins are listed (``rlinf_algos.objectives.deferred`` stand-ins import
    nothing until called).
    """


@hookspec
def rlinf_register_policy_losses() -> list[Callable[..., Any]] | None:
    """Register policy losses, selected by ``algorithm.policy_loss`` in the run YAML
    (``ppo_clip``, ``dapo`` and ``gspo`` are shipped by rlinf-algos).

    :returns: functions ``fn(log_prob, old_log_prob, advantages, mask, settings,
        ref_log_prob=None) -> (loss, stats)`` over ``[B, L]`` tensors (``settings``:
        ``rlinf_algos.objectives.losses.LossSettings``; ``stats``: ``kl``, ``clip_fraction``,
        ``ratio_mean``), named by their ``PLUGIN_NAME`` (rlinf-algos'
        ``rlinf_algos.objectives.policy_loss`` decorator sets it, and the aggregation the loss is
        defined with, and whether it reads whole sequences, which embodied ``ppo``'s single
        steps refuse) or ``__name__``. Two plugins claiming one name is an error naming both.
        ``None`` or an empty list registers nothing.

    Called in the driver (config validation), in the actor processes, and by ``rlinf plugins``
    (which lists the names).
    """


@hookspec
def rlinf_register_commands(cli: click.Group) -> None:
    """Add subcommands to the ``rlinf`` command line.

    :param cli: the root ``click.Group``; call ``cli.add_command(...)`` or decorate functions
        with ``@cli.command()`` / ``@cli.group()``.
    :returns: nothing; the return value is ignored.

    Called once in the ``rlinf`` CLI process, before arguments are parsed. Keep it cheap: import
    heavy modules inside the command functions, not here.
    """

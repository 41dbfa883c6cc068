"""rlinf plugin of rlinf-algos (entry point ``algos``).

Registers the ``ppo``, ``sac``, ``grpo``, ``grpo_lm`` and ``ppo_lm`` algorithms, the ``mlp``, ``vla`` and ``hf`` model types, the
``exact_match``, ``math`` and ``arith`` rewards, the ``hf`` rollout engine, the ``gae``, ``grpo``, ``dr_grpo``, ``rloo`` and
``reinforce_plus_plus`` advantage estimators, the ``ppo_clip``, ``dapo`` and ``gspo`` policy losses
and the ``rlinf train|eval|plot|sft`` commands. Must
import without torch, gymnasium or mujoco: each algorithm's package (:mod:`rlinf_algos.ppo`...)
imports only pydantic and rlinf_core and loads its training code when it runs.
"""

from __future__ import annotations

from typing import Any

from rlinf_core.plugins import hookimpl


@hookimpl
def rlinf_register_algorithms() -> list[type]:
    from rlinf_algos.grpo import GRPO
    from rlinf_algos.lm.algorithm import GRPOLM, PPOLM
    from rlinf_algos.ppo import PPO
    from rlinf_algos.sac import SAC

    return [PPO, SAC, GRPO, GRPOLM, PPOLM]


@hookimpl
def rlinf_register_models() -> list[type]:
    from rlinf_algos.lm.model_type import HFModels
    from rlinf_algos.models import MLPModels, VLAModels

    return [MLPModels, VLAModels, HFModels]


@hookimpl
def rlinf_register_env_families() -> list[type]:
    from rlinf_algos.families.gymnasium import GymnasiumFamily
    from rlinf_algos.families.libero import LiberoFamily
    from rlinf_algos.families.maniskill import ManiSkillFamily
    from rlinf_algos.families.metaworld import MetaWorldFamily

    return [GymnasiumFamily, MetaWorldFamily, ManiSkillFamily, LiberoFamily]


@hookimpl
def rlinf_register_rollout_engines() -> list[type]:
    from rlinf_algos.lm.engines import HFEngine

    return [HFEngine]


@hookimpl
def rlinf_register_rewards() -> list[type]:
    from rlinf_algos.lm.rewards import ArithReward, ExactMatchReward, MathReward

    return [ExactMatchReward, MathReward, ArithReward]


@hookimpl
def rlinf_register_tools() -> list[Any]:
    from rlinf_algos.tools.sandbox import Python
    from rlinf_algos.tools.search import Search

    return [Search, Python]


@hookimpl
def rlinf_register_advantage_estimators() -> list[Any]:
    # deferred: validating a name and `rlinf plugins` read the marks without importing torch
    from rlinf_algos.objectives import advantage_estimator as mark
    from rlinf_algos.objectives import deferred

    at = "rlinf_algos.objectives.advantages:"
    return [
        mark("gae", critic=True)(deferred(at + "gae")),
        mark("grpo")(deferred(at + "grpo")),
        mark("dr_grpo", aggregation="seq-mean-token-sum-norm")(deferred(at + "dr_grpo")),
        mark("rloo")(deferred(at + "rloo")),
        mark("reinforce_plus_plus")(deferred(at + "reinforce_plus_plus")),
    ]


@hookimpl
def rlinf_register_policy_losses() -> list[Any]:
    from rlinf_algos.objectives import deferred
    from rlinf_algos.objectives import policy_loss as mark

    at = "rlinf_algos.objectives.losses:"
    return [
        mark("ppo_clip")(deferred(at + "ppo_clip")),
        mark("dapo", aggregation="token-mean")(deferred(at + "dapo")),
        mark("gspo", aggregation="seq-mean-token-mean", sequences=True)(deferred(at + "gspo")),
    ]


@hookimpl
def rlinf_register_commands(cli: Any) -> None:
    from rlinf_algos.cli import register

    register(cli)

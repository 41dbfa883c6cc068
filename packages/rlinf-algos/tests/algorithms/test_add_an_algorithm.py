"""Adding an algorithm is one folder and one registration line, for both families.

A test plugin package (a real installed-looking distribution: a ``*.dist-info`` with an
``rlinf`` entry point on ``sys.path``, found by :func:`rlinf_core.plugins.load_plugins` as any
installed plugin is) registers two algorithms through the one hook ``rlinf_register_algorithms``:

- ``ppo_counted`` (embodied): an :class:`~rlinf_algos.embodied.algorithm.EmbodiedAlgorithm`
  whose recipe is PPO's with a learner that counts its updates;
- ``grpo_counted`` (language model): an :class:`~rlinf_algos.lm.algorithm.LMAlgorithm` whose
  ``algorithm`` section adds ``bonus`` and whose learner (the section's ``actor`` reference) counts its
  updates and sees ``bonus``.

Each is validated by name with its own config class (errors name the YAML path and the valid
choices) and runs briefly in process.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import rlinf_algos
from rlinf_algos import models
from rlinf_algos.lm import algorithm_registry
from rlinf_core.plugins import load_plugins

PLUGIN = '''
"""A test plugin: one embodied and one language-model algorithm."""

from typing import ClassVar, Literal

from pydantic import Field

from rlinf_algos.embodied.algorithm import EmbodiedAlgorithm
from rlinf_algos.lm.algorithm import LMAlgorithm
from rlinf_algos.lm.config import LMGRPOConfig
from rlinf_algos.ppo import PPOConfig
from rlinf_core.plugins import hookimpl

UPDATES = {"ppo_counted": 0, "grpo_counted": 0}
BONUS = []


class PPOCountedConfig(PPOConfig):
    name: Literal["ppo_counted"] = Field("ppo_counted", description="selects this algorithm")


class PPOCounted(EmbodiedAlgorithm):
    PLUGIN_NAME = "ppo_counted"
    config_model = PPOCountedConfig

    def recipe(self):
        from rlinf_algos.ppo.recipe import PPORecipe

        class Counted(PPORecipe):
            def learner(self, spec, model_cfg, ctx):
                side = super().learner(spec, model_cfg, ctx)
                train = side.train

                def counted(*args, **kwargs):
                    UPDATES["ppo_counted"] += 1
                    return train(*args, **kwargs)

                side.train = counted
                return side

        return Counted(self.config)


class GRPOCountedConfig(LMGRPOConfig):
    name: Literal["grpo_counted"] = "grpo_counted"
    bonus: float = Field(0.5, ge=0.0, description="recorded by the learner")
    actor: ClassVar[str] = "rlinf_testalgos_learner:CountedLearner"  # imported when the actor starts


class GRPOCounted(LMAlgorithm):
    PLUGIN_NAME = "grpo_counted"
    config_model = GRPOCountedConfig


@hookimpl
def rlinf_register_algorithms():
    return [PPOCounted, GRPOCounted]
'''

LEARNER = '''
"""The language-model learner of ``grpo_counted`` (imported when the run builds its actor)."""

import rlinf_testalgos
from rlinf_algos.lm.learner import LMLearner


class CountedLearner(LMLearner):
    def update(self, *args, **kwargs):
        rlinf_testalgos.UPDATES["grpo_counted"] += 1
        rlinf_testalgos.BONUS.append(self.cfg.bonus)
        return super().update(*args, **kwargs)
'''


@pytest.fixture
def plugin(install_plugin: Any) -> Iterator[Any]:
    """The plugin installed in a folder on ``sys.path``; yields ``(module, host)``."""
    files = {"rlinf_testalgos.py": PLUGIN, "rlinf_testalgos_learner.py": LEARNER}
    install_plugin("testalgos", "rlinf_testalgos", files)
    models._registry.cache_clear()
    algorithm_registry.clear_cache()
    try:
        yield importlib.import_module("rlinf_testalgos"), load_plugins()
    finally:
        models._registry.cache_clear()
        algorithm_registry.clear_cache()
        for name in ("rlinf_testalgos", "rlinf_testalgos_learner"):
            sys.modules.pop(name, None)


EMBODIED: dict[str, Any] = {
    "algorithm": {"name": "ppo_counted", "rollout_steps": 32, "minibatch_size": 32, "update_epochs": 1},
    "env": {"id": "Pendulum-v1", "num_envs": 2},
    "model": {"hidden_sizes": [8, 8]},
    "runner": {"scheduler": "local", "total_steps": 64, "log_interval": 64, "loggers": ["csv"]},
}


def test_an_embodied_algorithm_added_by_a_plugin_runs_by_name(plugin: Any, tmp_path: Path) -> None:
    module, host = plugin
    assert host.algorithms.owner("ppo_counted").distribution == "rlinf-testalgos"
    summary = rlinf_algos.train(EMBODIED, tmp_path / "run", host=host)
    assert summary["total_env_steps"] == 64 and module.UPDATES["ppo_counted"] >= 1
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert written["algorithm"]["name"] == "ppo_counted"


@pytest.mark.slow  # a warm start and one GRPO iteration of a 1-layer model: ~15 s idle
def test_a_language_model_algorithm_added_by_a_plugin_runs_by_name(
    plugin: Any, tiny_lm: Any, tmp_path: Path
) -> None:
    module, host = plugin
    config = tiny_lm.config("algorithm.name=grpo_counted", "+algorithm.bonus=2.5", "++runner.scheduler=local")
    summary = rlinf_algos.train(config, tmp_path / "run", host=host)
    assert summary["iterations"] == 1
    assert module.UPDATES["grpo_counted"] >= 1 and module.BONUS[-1] == 2.5
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert written["algorithm"]["name"] == "grpo_counted" and written["algorithm"]["bonus"] == 2.5


def test_the_language_model_sections_are_validated_by_the_registered_algorithm(plugin: Any) -> None:
    from rlinf_algos.lm.config import LMRunConfig, load_lm_sections
    from rlinf_core.errors import ConfigError

    run = load_lm_sections({"algorithm": {"name": "grpo_counted", "bonus": 2.5}})
    assert type(run.algorithm).__name__ == "GRPOCountedConfig" and run.algorithm.bonus == 2.5
    # what a placed process gets: the sections as a mapping, validated again by name
    again = LMRunConfig.model_validate(run.model_dump())
    assert type(again.algorithm).__name__ == "GRPOCountedConfig" and again.algorithm.bonus == 2.5
    assert again.model_dump()["algorithm"]["bonus"] == 2.5
    with pytest.raises(ConfigError) as err:
        load_lm_sections({"algorithm": {"name": "grpo_countd"}})
    assert [str(p) for p in err.value.problems] == [
        "algorithm.name: 'grpo_countd' is not a language-model algorithm; registered: grpo_counted, "
        "grpo_lm, ppo_lm"
    ]
    with pytest.raises(ConfigError, match=r"algorithm\.bonus: .*greater than or equal to 0"):
        load_lm_sections({"algorithm": {"name": "grpo_counted", "bonus": -1}})

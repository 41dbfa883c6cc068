"""A model type from a plugin package brings its own options: one module and one registration line.

The plugin is a real installed-looking distribution written here (a ``*.dist-info`` with an
``rlinf`` entry point on ``sys.path``), found by :func:`rlinf_core.plugins.load_plugins` as any
installed plugin is. Its model type ``deep`` declares ``DeepConfig`` (the embodied ``model``
section plus ``depth`` and ``width``): the options are validated with their YAML paths before
anything starts, reach ``build(spec)`` through the policy spec, and a PPO iteration trains the
network they describe, in process.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import rlinf_algos
from rlinf_algos import models
from rlinf_algos.config.prepare import prepare_run
from rlinf_core.errors import ConfigError
from rlinf_core.plugins import load_plugins

PLUGIN = '''
"""A test plugin: model type ``deep``, an MLP actor-critic of ``depth`` layers of ``width``."""

from pydantic import Field

from rlinf_algos.config import ModelConfig
from rlinf_core.errors import RlinfError
from rlinf_core.model import ModelType
from rlinf_core.plugins import hookimpl


class DeepConfig(ModelConfig):
    """``model.type: deep``."""

    type: str = "deep"
    depth: int = Field(2, ge=1, le=8, description="hidden layers")
    width: int = Field(16, ge=1, description="units of each hidden layer")


class DeepModels(ModelType):
    PLUGIN_NAME = "deep"
    config_model = DeepConfig
    roles = ("GaussianActorCritic",)

    def build(self, spec):
        from rlinf_algos.models.mlp import GaussianActorCritic

        if spec.get("cls") != "GaussianActorCritic":
            raise RlinfError(f"model type deep builds GaussianActorCritic, not {spec.get('cls')!r}")
        return GaussianActorCritic(
            spec["obs_dim"], spec["act_dim"], [spec["width"]] * spec["depth"], "tanh",
            spec["log_std_init"], spec["normalize_obs"], spec.get("ortho_init", True),
        )


@hookimpl
def rlinf_register_models():
    return [DeepModels]
'''

RUN: dict[str, Any] = {
    "algorithm": {"name": "ppo", "rollout_steps": 32, "minibatch_size": 32, "update_epochs": 1},
    "env": {"id": "Pendulum-v1", "num_envs": 2},
    "model": {"type": "deep", "depth": 3, "width": 8},
    "runner": {"scheduler": "local", "total_steps": 64, "log_interval": 64, "loggers": ["csv"]},
}
"""One PPO iteration (2 envs x 32 steps) of a ``deep`` policy, in process."""


@pytest.fixture
def deep_plugin(install_plugin: Any) -> Iterator[Any]:
    """The plugin installed in a folder on ``sys.path``; yields the host that loaded it (the
    model registry of :mod:`rlinf_algos.models`, which builds policies, sees it too)."""
    install_plugin("testmodels", "rlinf_testmodels_deep", {"rlinf_testmodels_deep.py": PLUGIN})
    models._registry.cache_clear()
    try:
        yield load_plugins()
    finally:
        models._registry.cache_clear()
        sys.modules.pop("rlinf_testmodels_deep", None)


def test_the_plugin_type_is_registered_with_its_config_model(deep_plugin: Any) -> None:
    assert "deep" in deep_plugin.models.names()
    assert deep_plugin.models.owner("deep").distribution == "rlinf-testmodels"
    cfg = models.validate_model_section({"type": "deep", "depth": 4}, host=deep_plugin)
    assert type(cfg).__name__ == "DeepConfig" and (cfg.depth, cfg.width) == (4, 16)
    assert cfg.spec_options() == {"depth": 4, "width": 16}  # what build(spec) receives


@pytest.mark.parametrize(
    ("model", "path", "says"),
    [
        ({"type": "deep", "depth": 0}, "model.depth", "greater than or equal to 1"),
        ({"type": "deep", "width": "wide"}, "model.width", "valid integer"),
        ({"type": "deep", "depht": 3}, "model.depht", "unknown key"),
        (
            {"type": "deep", "vision": {}},
            "model.vision",
            "an option of model.type vla, not of model.type deep",
        ),
        ({"type": "mlp", "depth": 3}, "model.depth", "an option of model.type deep, not of model.type mlp"),
        ({"type": "deeep"}, "model.type", "unknown model type 'deeep'"),
    ],
)
def test_its_options_are_validated_with_their_yaml_paths(
    deep_plugin: Any, model: dict[str, Any], path: str, says: str
) -> None:
    with pytest.raises(ConfigError) as err:
        prepare_run({**RUN, "model": model}, host=deep_plugin)
    problems = {p.path: p.message for p in err.value.problems}
    assert path in problems and says in problems[path], problems


def test_a_ppo_iteration_trains_the_plugin_model_in_process(deep_plugin: Any, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    summary = rlinf_algos.train(RUN, run_dir, host=deep_plugin)
    assert summary["total_env_steps"] == 64
    written = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert written["model"] == {**written["model"], "type": "deep", "depth": 3, "width": 8}
    policy = rlinf_algos.load_policy(run_dir)
    assert policy.spec["type"] == "deep" and (policy.spec["depth"], policy.spec["width"]) == (3, 8)
    shapes = [
        tuple(p.shape) for name, p in policy.module.named_parameters() if name.startswith("actor_mean.")
    ]
    assert [s for s in shapes if len(s) == 2] == [(8, 3), (8, 8), (8, 8), (1, 8)]  # depth 3 of width 8
    obs = [0.1, 0.2, 0.3]
    assert policy.act(obs).shape == (1,)


def test_hf_is_a_registered_type_of_the_language_model_algorithms(host: Any) -> None:
    from rlinf_algos.lm.config import LMModelConfig, load_lm_sections
    from rlinf_algos.lm.model_type import HFModels

    assert host.models.get("hf") is HFModels and HFModels.config_model is LMModelConfig
    assert load_lm_sections({"algorithm": {"name": "grpo_lm"}, "model": {"type": "hf"}}).model.type == "hf"
    with pytest.raises(ConfigError) as err:
        load_lm_sections({"algorithm": {"name": "grpo_lm"}, "model": {"type": "vla"}})
    assert [p.path for p in err.value.problems] == ["model.type"]
    assert "'vla' is a model type of other algorithms" in str(err.value) and "this run takes: hf" in str(
        err.value
    )
    with pytest.raises(ConfigError, match=r"model\.type: .*this run takes: mlp, vla"):
        models.validate_model_section({"type": "hf"}, host=host)


def test_a_run_recorded_when_every_type_listed_every_option_still_resumes(tmp_path: Path) -> None:
    from rlinf_algos.rundir import check_resume_config

    now = {
        "algorithm": {"name": "ppo"},
        "env": {"id": "Pendulum-v1"},
        "model": {"type": "mlp", "hidden_sizes": None},
    }
    then = {
        **now,
        "model": {**now["model"], "critic_input": "features", "predict_privileged": 0.0, "encoder_loss": "all",
                  "warm_start": None, "vision": None, "language": None, "lora": None},
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(then))
    check_resume_config(path, now)  # the vla options it recorded at their defaults never acted
    path.write_text(yaml.safe_dump({**then, "model": {**then["model"], "predict_privileged": 1.0}}))
    with pytest.raises(
        ConfigError, match=r"model\.predict_privileged: is None, but the run being resumed used 1\.0"
    ):
        check_resume_config(path, now)

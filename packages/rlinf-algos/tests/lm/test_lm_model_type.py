"""A language-model type from a plugin package is what every role of a run builds.

The plugin is a real installed-looking distribution written here (a ``*.dist-info`` with an
``rlinf`` entry point on ``sys.path``), found by :func:`rlinf_core.plugins.load_plugins` as any
installed plugin is. Its model type ``tiny_causal`` declares ``TinyCausalConfig`` (the language
``model`` section plus ``note``) and builds a ``transformers`` causal LM from the folder's
``config.json`` (``AutoModelForCausalLM.from_config``), then reads its weights: no download, no
``from_pretrained``. Each build records which module asked for it (the role's), whether it is
trainable, and the ``note`` option it was given; a short ``grpo_lm`` run (local scheduler, a
1-layer model) must build its actor, rollout engine and reference through it, and
:func:`rlinf_algos.load_policy` of the run too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos import models

PLUGIN = '''
"""A test plugin: language-model type ``tiny_causal``."""

import traceback
from pathlib import Path

from pydantic import Field

from rlinf_algos.lm.config import LMModelConfig
from rlinf_algos.lm.model_type import LMModelType, finish
from rlinf_core.plugins import hookimpl

BUILDS = []
"""(module of the caller, trainable, meta, note) of every build."""


class TinyCausalConfig(LMModelConfig):
    type: str = "tiny_causal"
    note: str = Field("plain", description="recorded with every build")


class TinyCausalModels(LMModelType):
    PLUGIN_NAME = "tiny_causal"
    config_model = TinyCausalConfig

    def load(self, spec, path, *, trainable, device, meta):
        import torch
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModelForCausalLM

        caller = Path(traceback.extract_stack()[-3].filename).name
        BUILDS.append((caller, trainable, meta, spec.note))
        folder = Path(path or spec.path)
        config = AutoConfig.from_pretrained(str(folder))
        if meta:
            with torch.device("meta"):
                return AutoModelForCausalLM.from_config(config)
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=False)
        model.tie_weights()
        model.rlinf_tiny_note = spec.note
        return finish(model, trainable=trainable, device=device)


@hookimpl
def rlinf_register_models():
    return [TinyCausalModels]
'''


@pytest.fixture
def tiny_type(install_plugin: Any) -> Iterator[Any]:
    """The plugin installed in a folder on ``sys.path``; yields its module (its ``BUILDS``)."""
    import importlib

    install_plugin("testlmtype", "rlinf_testlmtype", {"rlinf_testlmtype.py": PLUGIN})
    models._registry.cache_clear()
    try:
        yield importlib.import_module("rlinf_testlmtype")
    finally:
        models._registry.cache_clear()
        sys.modules.pop("rlinf_testlmtype", None)


@pytest.mark.slow  # a whole run: ~15 s on an idle 2-core machine
def test_every_role_of_a_run_builds_the_plugins_model_type(
    tiny_type: Any, tiny_lm: Any, tmp_path: Path
) -> None:
    import rlinf_algos
    from rlinf_algos.lm.config import load_lm_sections
    from rlinf_algos.lm.flow import train_lm

    data = tiny_lm.config(
        "algorithm.kl_coef=0.05",
        "+model.type=tiny_causal",
        "+model.note=from-the-yaml",
        "++runner.scheduler=local",
    )
    run = load_lm_sections(data)
    assert type(run.model).__name__ == "TinyCausalConfig" and run.model.note == "from-the-yaml"
    summary = train_lm(run, tmp_path / "run", log=None)
    assert summary["iterations"] == 1
    builds = list(tiny_type.BUILDS)
    callers = {caller for caller, *_ in builds}
    # the actor (trainer.policy_to_train), the rollout engine, the frozen reference
    assert {"trainer.py", "engines.py", "learner.py"} <= callers, builds
    assert all(note == "from-the-yaml" for *_, note in builds), builds
    assert any(c == "engines.py" and not trainable for c, trainable, *_ in builds)  # rollout frozen
    assert any(c == "trainer.py" and trainable for c, trainable, *_ in builds)  # actor trains
    # the trained policy loads back through the run's model type, with its own option
    before = len(tiny_type.BUILDS)
    policy = rlinf_algos.load_policy(tmp_path / "run")
    assert len(tiny_type.BUILDS) == before + 1 and tiny_type.BUILDS[-1][0] == "saved_policy.py"
    assert policy.model.rlinf_tiny_note == "from-the-yaml"


def test_each_roles_model_is_built_by_the_plugins_type(tiny_type: Any, tmp_path: Path) -> None:
    """The fast twin of the run above: each role's constructor, on a 1-layer folder."""
    from rlinf_algos.lm import hf
    from rlinf_algos.lm.config import CriticConfig, LMPPOConfig, ModelInitConfig, load_lm_sections
    from rlinf_algos.lm.engines import HFEngine
    from rlinf_algos.lm.learner import ReferenceModel
    from rlinf_algos.lm.ppo import PPOLMLearner
    from rlinf_algos.lm.trainer import policy_to_train

    init = ModelInitConfig(hidden_size=16, num_layers=1, num_heads=2, max_position_embeddings=64)
    folder = str(hf.new_model_folder(tmp_path / "m", init, seed=0))
    section = {"type": "tiny_causal", "path": folder, "note": "n1"}
    run = load_lm_sections({"algorithm": {"name": "ppo_lm"}, "model": section})
    actor, _ = policy_to_train(run)
    HFEngine(section)  # the rollout engine takes the section as a mapping on its worker
    ReferenceModel(run.model)
    PPOLMLearner(actor, LMPPOConfig(), critic=CriticConfig(path=folder), model_spec=run.model)
    callers = [(caller, trainable, note) for caller, trainable, _meta, note in tiny_type.BUILDS]
    assert callers == [
        ("trainer.py", True, "n1"),
        ("engines.py", False, "n1"),
        ("learner.py", False, "n1"),
        ("ppo.py", True, "n1"),  # the critic's backbone
    ]
    assert actor.rlinf_tiny_note == "n1"


def test_a_model_type_of_other_algorithms_is_refused_at_model_type(tiny_lm: Any) -> None:
    from rlinf_algos.lm.model_type import load_lm_model
    from rlinf_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"model\.type: .*is a model type of other algorithms.*takes: hf"):
        load_lm_model({"type": "mlp", "path": "nowhere"})

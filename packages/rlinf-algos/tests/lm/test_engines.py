"""Rollout engines: ``rollout.engine`` selects a registered :class:`rlinf_core.RolloutEngine`
(``hf``, :class:`~rlinf_algos.lm.learner.HFEngine`, by default, through rlinf-algos'
``rlinf_register_rollout_engines``); a third-party engine registered by a plugin runs a real GRPO
iteration; an unknown engine or option is refused up front."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rlinf_algos.lm.config import load_lm_sections
from rlinf_algos.lm.engines import HFEngine, check_options, engine_class
from rlinf_algos.lm.flow import train_lm
from rlinf_core import RolloutEngine
from rlinf_core.config import apply_overrides, load_yaml
from rlinf_core.errors import ConfigError
from rlinf_core.plugins import hookimpl, load_plugins

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
TINY = (  # beside conftest's tiny_lm
    "algorithm.kl_coef=0.0",
)


class Counting(HFEngine):
    """The hf engine, counting its calls and keeping its options (a stand-in for vLLM)."""

    PLUGIN_NAME: ClassVar[str] = "counting"
    made: ClassVar[list[Counting]] = []

    def __init__(self, model_config: Any, *, tag: str = "", **kw: Any) -> None:
        super().__init__(model_config, **kw)
        self.tag, self.calls, self.loads = tag, 0, []
        Counting.made.append(self)

    def set_weights(self, state_dict: Any, version: int) -> None:
        super().set_weights(state_dict, version)
        self.loads.append(version)

    def generate(self, prompts: list[list[int]], *args: Any, **kw: Any) -> list[list[int]]:
        self.calls += 1
        return super().generate(prompts, *args, **kw)


class EnginePlugin:
    @hookimpl
    def rlinf_register_rollout_engines(self) -> list[type]:
        return [Counting]


def test_rlinf_algos_registers_the_hf_engine() -> None:
    eps = [ep for ep in md.entry_points(group="rlinf") if ep.name == "algos"]
    host = load_plugins(entry_points=eps)
    assert host.failures == [] and host.rollout_engines.names() == ["hf"]
    assert host.rollout_engines.owner("hf").distribution == "rlinf-algos"
    assert issubclass(HFEngine, RolloutEngine) and HFEngine.PLUGIN_NAME == "hf"
    run = load_lm_sections({"algorithm": {"name": "grpo_lm"}})
    assert run.rollout.engine == "hf" and run.rollout.options == {}
    assert engine_class(run.rollout.engine, host) is HFEngine  # what a default run builds
    assert engine_class("hf", load_plugins(entry_points=[])) is HFEngine


def test_an_engine_from_a_plugin_runs_a_grpo_iteration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_lm: Any
) -> None:
    import rlinf_core.plugins as plugins

    real = plugins.load_plugins
    monkeypatch.setattr(plugins, "load_plugins", lambda **kw: real(extra=[("engine-demo", EnginePlugin())]))
    Counting.made.clear()
    data = apply_overrides(
        load_yaml(EXAMPLES / "grpo_arith.yaml"),
        tiny_lm(*TINY, "runner.scheduler=local", "rollout.engine=counting", "rollout.options.tag=x"),
    )
    summary = train_lm(load_lm_sections(data), tmp_path, log=None)
    assert summary["iterations"] == 1
    (engine,) = Counting.made  # the run's rollout component (the warm start checks with hf)
    assert engine.tag == "x" and engine.calls >= 2  # the evaluations and the iteration
    assert engine.loads[0] == 0 and engine.loads[-1] == 1 and engine.version == 1
    assert engine.tokens > 0


def test_an_unknown_engine_or_option_is_refused_with_its_path(host: Any, invoke: Any) -> None:
    result = invoke(host, "train", str(EXAMPLES / "grpo_arith.yaml"), "--dry-run", "rollout.engine=vllm")
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError)
    (problem,) = [p for p in result.exception.problems if p.path == "rollout.engine"]
    assert "vllm" in problem.message and "hf" in problem.message
    assert "rlinf_register_rollout_engines" in problem.message
    result = invoke(
        host, "train", str(EXAMPLES / "grpo_arith.yaml"), "--dry-run", "rollout.options.gpu_memory=0.9"
    )
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError)
    (problem,) = [p for p in result.exception.problems if p.path == "rollout.options"]
    assert "gpu_memory" in problem.message and "takes: merge_lora" in problem.message
    check_options(Counting, {"tag": "x"})
    with pytest.raises(ConfigError, match=r"come from the run.*takes: tag"):
        check_options(Counting, {"seed": 1})


def test_an_engine_must_implement_both_calls() -> None:
    class Half(RolloutEngine):
        PLUGIN_NAME: ClassVar[str] = "half"

        def set_weights(self, state_dict: Any, version: int) -> None:
            pass

    with pytest.raises(TypeError, match="generate"):
        Half(None)  # type: ignore[abstract]

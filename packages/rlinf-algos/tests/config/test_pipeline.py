"""The config pipeline (``rlinf_algos.config.prepare``): every entry point composes, translates
and validates through it, each section is validated once per run, and its errors name the key
(and the file or override that set it). Real runs in process (``runner.scheduler: local``,
Pendulum-v1 and the arithmetic task with a tiny model), counted with the section models'
``model_validate``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

import rlinf_algos
from rlinf_algos.config import EnvConfig, RunnerConfig, load_run_sections
from rlinf_algos.config.prepare import PreparedRun, prepare_run
from rlinf_algos.config.validated import ValidatedConfig
from rlinf_algos.lm.config import ArithTaskConfig, LMGRPOConfig, LMRunnerConfig
from rlinf_algos.ppo import PPOConfig
from rlinf_algos.training import run_training
from rlinf_core.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

TINY_PPO: dict[str, Any] = {
    "algorithm": {"name": "ppo", "rollout_steps": 32, "minibatch_size": 32, "update_epochs": 1},
    "env": {"id": "Pendulum-v1", "num_envs": 2},
    "model": {"hidden_sizes": [8]},
    "runner": {"scheduler": "local", "total_steps": 64, "log_interval": 64, "loggers": ["csv"]},
}
"""One PPO update of 2 envs x 32 steps, in process."""

TINY_LM = (  # beside conftest's tiny_lm
    "sft.steps=0",
    "runner.scheduler=local",
    "runner.loggers=[csv]",
)


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times each section model validated a section (its ``model_validate``)."""
    counts: Counter[str] = Counter()
    for model in (EnvConfig, RunnerConfig, PPOConfig, ArithTaskConfig, LMGRPOConfig, LMRunnerConfig):
        original = model.model_validate

        def counted(cls: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            counts[cls.__name__] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(model, "model_validate", classmethod(counted))
    return counts


def write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


# -- validated once ------------------------------------------------------------------------------


def test_an_embodied_run_validates_each_section_once(
    tmp_path: Path, host: Any, validations: Counter[str]
) -> None:
    summary = run_training(TINY_PPO, run_dir=tmp_path / "run", host=host)
    assert summary["total_env_steps"] == 64
    # up front (rlinf train), not again for config.yaml, nor inside Algorithm.run
    assert validations == {"EnvConfig": 1, "RunnerConfig": 1, "PPOConfig": 1}
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert written["runner"]["worker_timeout"] == 300.0 and written["algorithm"]["clip_low"] == 0.2


def test_a_language_model_run_validates_each_section_once(
    tmp_path: Path, host: Any, validations: Counter[str], tiny_lm: Any
) -> None:
    summary = rlinf_algos.train(EXAMPLES / "grpo_arith.yaml", tmp_path / "run", tiny_lm(*TINY_LM), host=host)
    assert summary["iterations"] == 1
    assert validations == {"ArithTaskConfig": 1, "LMGRPOConfig": 1, "LMRunnerConfig": 1}


def test_dry_run_and_multirun_validate_each_run_once(
    tmp_path: Path, host: Any, invoke: Any, validations: Counter[str]
) -> None:
    config = write(tmp_path / "ppo.yaml", TINY_PPO)
    res = invoke(host, "train", str(config), "--dry-run")
    assert res.exit_code == 0, res.output
    assert validations == {"EnvConfig": 1, "RunnerConfig": 1, "PPOConfig": 1}
    validations.clear()
    sweep = tmp_path / "sweep"
    res = invoke(
        host, "train", str(config), "--multirun", "runner.seed=0,1", "--run-dir", str(sweep), "--quiet"
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0_seed=0", "1_seed=1"]
    # each run prepared (and planned) once before any trains, then run as prepared
    assert validations == {"EnvConfig": 2, "RunnerConfig": 2, "PPOConfig": 2}


def test_run_receives_the_validated_sections(
    tmp_path: Path, host: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared = prepare_run(TINY_PPO, ["runner.seed=3"], host=host)
    assert isinstance(prepared.config, ValidatedConfig) and prepared.config["runner"]["seed"] == 3
    assert load_run_sections(prepared.config) is prepared.sections  # carried, not validated again
    assert load_run_sections(dict(prepared.config)) == prepared.sections  # a copy is validated
    with pytest.raises(TypeError, match="read-only"):
        prepared.config["runner"] = {}
    seen: list[Any] = []
    algo_cls = prepared.algorithm_class
    original = algo_cls.run
    monkeypatch.setattr(
        algo_cls, "run", lambda self, s, cfg, *a, **k: seen.append(cfg) or original(self, s, cfg, *a, **k)
    )
    run_training(prepared, run_dir=tmp_path / "run")
    assert seen == [prepared.config] and seen[0] is prepared.config
    with pytest.raises(TypeError, match="prepare_run"):
        run_training(prepared, run_dir=tmp_path / "again", overrides=["runner.seed=1"])


# -- every entry point goes through it ------------------------------------------------------------


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pipeline steps taken, in order (``compose``, ``validate``), whichever entry point
    takes them."""
    import rlinf_algos.config.prepare as prepare

    taken: list[str] = []
    compose, validate = prepare._compose, prepare.validate

    def composing(*args: Any) -> Any:
        taken.append("compose")
        return compose(*args)

    def validating(*args: Any, **kwargs: Any) -> Any:
        taken.append("validate")
        return validate(*args, **kwargs)

    monkeypatch.setattr(prepare, "_compose", composing)
    monkeypatch.setattr(prepare, "validate", validating)
    return taken


def test_every_entry_point_takes_the_pipeline(
    tmp_path: Path, host: Any, invoke: Any, steps: list[str]
) -> None:
    config = write(tmp_path / "ppo.yaml", TINY_PPO)
    res = invoke(host, "train", str(config), "--print-config")
    assert res.exit_code == 0 and steps == ["compose"]
    for args in (["--dry-run"], ["--run-dir", str(tmp_path / "cli"), "--quiet"]):
        steps.clear()
        res = invoke(host, "train", str(config), *args)
        assert res.exit_code == 0, res.output
        assert steps == ["compose", "validate"], args
    steps.clear()
    res = invoke(
        host, "train", str(config), "-m", "runner.seed=0,1", "--run-dir", str(tmp_path / "m"), "--quiet"
    )
    assert res.exit_code == 0 and steps == ["compose", "validate"] * 2
    steps.clear()
    rlinf_algos.train(config, tmp_path / "api", host=host)
    assert steps == ["compose", "validate"]
    steps.clear()
    res = invoke(host, "bench", "throughput", str(config), "--iterations", "2", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["runs"][0]["updates_measured"] >= 1
    assert steps == [
        "compose",
        "compose",
        "compose",
        "validate",
    ]  # read, probe (sizes only), burst: validated once
    steps.clear()
    sft = write(tmp_path / "sft.yaml", {"model": {"type": "mlp"}, "data": {"train_files": ["x.jsonl"]}})
    res = invoke(host, "sft", str(sft), "--dry-run")
    assert steps == ["compose"] and isinstance(res.exception, ConfigError)
    assert "model.type: 'mlp' is a model type of other algorithms" in str(res.exception)


# -- errors name the key, and the file or override that set it ------------------------------------


def test_each_step_names_the_key_and_where_it_came_from(tmp_path: Path, host: Any) -> None:
    conf = tmp_path / "conf"
    pendulum = write(conf / "env" / "pendulum.yaml", {"id": "Pendulum-v1", "num_envs": 0})
    main = write(conf / "train.yaml", {**TINY_PPO, "defaults": ["env/pendulum@env", "_self_"], "env": {}})
    # compose: the file and the key
    bad = write(
        conf / "bad.yaml", {**TINY_PPO, "runner": {**TINY_PPO["runner"], "log_interval": "${runner.x}"}}
    )
    with pytest.raises(ConfigError, match=r"bad\.yaml: runner\.log_interval: cannot resolve"):
        prepare_run(bad, host=host)
    # validate: the key, and the defaults file that set it
    with pytest.raises(ConfigError) as err:
        prepare_run(main, host=host)
    (problem,) = err.value.problems
    assert problem.path == "env.num_envs" and problem.message.endswith(f"(from {pendulum})")
    # ... or the override that set it; a key of the primary file itself needs no note
    with pytest.raises(ConfigError) as err:
        prepare_run(main, ["env.num_envs=2", "runner.total_steps=-1"], host=host)
    (problem,) = err.value.problems
    assert problem.path == "runner.total_steps"
    assert problem.message.endswith("(got -1) (from override 'runner.total_steps=-1')")
    own = write(conf / "own.yaml", {**TINY_PPO, "algorithm": {**TINY_PPO["algorithm"], "update_epochs": 0}})
    with pytest.raises(ConfigError) as err:
        prepare_run(own, host=host)
    (problem,) = err.value.problems
    assert problem.path == "algorithm.update_epochs" and "(from" not in problem.message
    # translate: a worker-pool key as written, and where a value came from
    seed = write(tmp_path / "seed.yaml", {"algorithm": "ppo", "rollout_worker": {"num_worker": 2}})
    with pytest.raises(
        ConfigError, match=r"rollout_worker\.num_worker: unknown key \(did you mean 'num_workers'\?"
    ):
        prepare_run(seed, host=host)
    with pytest.raises(ConfigError) as err:
        prepare_run(seed, ["~rollout_worker.num_worker", "+trainer.num_gpus=2", "algorithm=sac"], host=host)
    assert any(
        p.path == "trainer.num_gpus" and p.message.endswith("(from override '+trainer.num_gpus=2')")
        for p in err.value.problems
    ), err.value


def test_a_prepared_run_reports_as_dry_run_does(host: Any) -> None:
    prepared = prepare_run(EXAMPLES / "quickstart.yaml", ["runner.total_steps=1000"], host=host, plan=True)
    assert isinstance(prepared, PreparedRun) and prepared.scheduler == "ray" and prepared.plan is not None
    report = prepared.report()
    assert report["config"]["runner"]["total_steps"] == 1000 and report["expansion"] is None
    assert (
        prepared.composed["runner"]["total_steps"] == 1000
        and prepared.config_path == EXAMPLES / "quickstart.yaml"
    )

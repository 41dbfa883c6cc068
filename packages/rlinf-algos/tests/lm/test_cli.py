"""``rlinf train examples/grpo_*.yaml``: the ``grpo_lm`` algorithm through the CLI (one iteration
with a tiny model, in process), its up-front configuration errors, and the distributed runner
(rollout, reward, reference, actor and agent workers on a real embedded Ray; marked
``network``)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinf_algos.config.validate import validate_run_config
from rlinf_algos.training import run_training
from rlinf_core.config import apply_overrides, load_yaml
from rlinf_core.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

TINY = (  # beside conftest's tiny_lm
    "algorithm.kl_coef=0.05",
)


def check_run_dir(run_dir: Path, mode: str) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algorithm"] == "grpo_lm" and summary["mode"] == mode
    for key in ("accuracy_before", "accuracy_after"):
        assert 0.0 <= summary[key] <= 1.0
    assert summary["iterations"] == 1 and summary["eval_size"] == 4 and summary["total_s"] > 0
    assert [e["iteration"] for e in summary["evals"]] == [0, 1]
    with (run_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and int(rows[0]["iteration"]) == 1
    for phase in ("generate", "reward", "reference", "update", "sync"):
        assert float(rows[0][f"{phase}_s"]) >= 0.0
    assert float(rows[0]["reference_s"]) > 0.0  # kl_coef > 0: the reference ran
    assert (run_dir / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    # config.yaml is the configuration as given with its defaults (what --dry-run prints): it
    # runs as it is when fed back; the model it built is RUN_DIR/base_model
    assert config["algorithm"]["name"] == "grpo_lm" and config["model"]["init"]["hidden_size"] == 16
    assert (run_dir / "base_model" / "config.json").is_file()
    assert config["task"]["mode"] == mode and "cluster" in config
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(str(run_dir / "policy")).config.hidden_size == 16
    return summary


@pytest.mark.parametrize(
    ("name", "mode"), [("grpo_arith.yaml", "single"), ("grpo_multiagent.yaml", "multiagent")]
)
def test_rlinf_train_runs_one_iteration_of_each_example(
    host: Any, name: str, mode: str, tmp_path: Path, invoke: Any, tiny_lm: Any
) -> None:
    res = invoke(
        host,
        "train",
        str(EXAMPLES / name),
        "--run-dir",
        str(tmp_path),
        *tiny_lm(*TINY),
        "runner.scheduler=local",
    )
    assert res.exit_code == 0, res.output
    assert "held-out accuracy after the warm start" in res.output
    assert "done: held-out accuracy" in res.output and str(tmp_path) in res.output
    summary = check_run_dir(tmp_path, mode)
    assert summary["scheduler"] == "local"


def test_both_examples_validate_with_their_placement(host: Any) -> None:
    for name, default in (("grpo_arith.yaml", "ray"), ("grpo_multiagent.yaml", "ray")):
        data = load_yaml(EXAMPLES / name)
        algo_cls, cfg, scheduler = validate_run_config(data, host)
        assert algo_cls.PLUGIN_NAME == "grpo_lm" and cfg.name == "grpo_lm" and scheduler == default
        _, _, scheduler = validate_run_config(apply_overrides(data, ["runner.scheduler=local"]), host)
        assert scheduler == "local"


def test_bad_configs_are_reported_up_front_with_their_yaml_paths(
    host: Any, tmp_path: Path, invoke: Any
) -> None:
    res = invoke(
        host,
        "train",
        str(EXAMPLES / "grpo_arith.yaml"),
        "--run-dir",
        str(tmp_path / "x"),
        "algorithm.group_size=1",
        "task.num_terms=[1]",
        "model.init.num_heads=3",
        "sft.carry_drop=2",
        "runner.scheduler=local",
    )
    # the rlinf entry point prints a ConfigError without a traceback and exits 2
    assert isinstance(res.exception, ConfigError), res.output
    message = str(res.exception)
    for path in ("algorithm.group_size", "task: num_terms", "model.init: hidden_size", "sft.carry_drop"):
        assert path in message, path
    assert not (tmp_path / "x").exists()  # nothing started

    data = load_yaml(EXAMPLES / "grpo_multiagent.yaml")
    del data["cluster"]["component_placement"]["agent"]
    data["extra_section"] = {}
    with pytest.raises(ConfigError) as err:
        validate_run_config(data, host)
    paths = {p.path: p.message for p in err.value.problems}
    assert "agent" in paths["cluster.component_placement"]
    assert "unknown section" in paths["extra_section"]


def test_resume_without_a_checkpoint_says_so(host: Any, tmp_path: Path, tiny_lm: Any) -> None:
    from rlinf_algos.lm.algorithm import GRPOLM
    from rlinf_algos.lm.config import load_lm_sections
    from rlinf_core.errors import RlinfError

    data = tiny_lm.config(*TINY)
    with pytest.raises(RlinfError, match=r"nothing to resume in .*checkpoints/step_<n>/"):
        GRPOLM(load_lm_sections(data).algorithm).run(None, data, tmp_path, resume=True)


# -- the distributed runner ------------------------------------------------------------------------


@pytest.mark.network
@pytest.mark.parametrize(
    ("name", "mode", "extra"),
    [
        # 2-3 minutes each on CI's 2 cores: CI places the FSDP actors (below), which cover placing
        # a component on 2 ranks; these two are opt-in (-m extended)
        pytest.param(
            "grpo_arith.yaml",
            "single",
            ["cluster.component_placement.rollout.placement=0:0-1"],
            marks=pytest.mark.extended,
        ),
        pytest.param(
            "grpo_multiagent.yaml",
            "multiagent",
            ["cluster.component_placement.agent.placement=0:0-2"],
            marks=pytest.mark.extended,
        ),
        # the actor as 2 FSDP ranks: rank 1 shards a meta skeleton and receives its shards
        (
            "grpo_arith.yaml",
            "single",
            ["cluster.component_placement.actor.placement=0:0-1", "actor.strategy=fsdp"],
        ),
    ],
    ids=["single-2-rollout", "multiagent-3-agents", "single-2-fsdp-actors"],
)
@pytest.mark.slow
def test_distributed_run_places_every_component(
    ray_cluster: Any, name: str, mode: str, extra: list[str], tmp_path: Path, tiny_lm: Any
) -> None:
    data = apply_overrides(
        load_yaml(EXAMPLES / name),
        tiny_lm(*TINY, *extra, "runner.worker_timeout=120", "runner.scheduler=ray"),
    )
    summary = run_training(data, run_dir=tmp_path)
    check_run_dir(tmp_path, mode)
    placed = summary["placement"]
    assert summary["scheduler"] == "ray"
    for comp in ("actor", "reward", "reference", "rollout"):
        assert placed[comp]["processes"] >= 1, comp
    if "actor.strategy=fsdp" in extra:
        assert (placed["actor"]["processes"], summary["learner_world_size"]) == (2, 2), (placed, summary)
    if mode == "multiagent":
        assert placed["agent"]["processes"] == 3
    elif any("rollout.placement" in e for e in extra):
        assert placed["rollout"]["processes"] == 2

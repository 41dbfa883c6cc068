"""GRPO on a user's data set: verl's parquet with a ``compute_score`` file and RLinf's JSONL
with a TRL-style reward callable, a model folder built here (BPE tokenizer, ChatML template),
LoRA with adapter-only weight sync, the up-front checks of ``rlinf train --dry-run``, and a
reward that fails named with its sample."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinf_algos.lm.algorithm import GRPOLM
from rlinf_algos.lm.config import load_lm_sections
from rlinf_algos.lm.flow import train_lm
from rlinf_core.errors import ConfigError, RlinfError

PLACEMENT = {
    "num_nodes": 1,
    "component_placement": {
        c: {"node_group": "node", "placement": "0"} for c in ("actor", "rollout", "reference", "reward")
    },
}


def _rows(n: int, start: int = 0) -> list[tuple[int, int]]:
    return [((7 * i) % 40 + 1, (11 * i) % 30 + 1) for i in range(start, start + n)]


def write_verl(tmp: Path) -> dict[str, str]:
    """A verl-schema parquet pair and a compute_score file with partial credit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split, n, start in (("train", 48, 0), ("val", 8, 100)):
        rows = [
            {
                "data_source": "rlinf/addition",
                "prompt": [{"role": "user", "content": f"What is {a} + {b}?"}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": split, "index": i},
            }
            for i, (a, b) in enumerate(_rows(n, start))
        ]
        pq.write_table(pa.Table.from_pylist(rows), tmp / f"{split}.parquet")
    (tmp / "score.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    assert data_source == 'rlinf/addition' and extra_info['split'] in ('train', 'val')\n"
        "    digits = ''.join(c for c in solution_str if c.isdigit())\n"
        "    return 1.0 if digits == ground_truth else 0.1 * len(set(digits) & set(ground_truth))\n"
    )
    return {
        "train": str(tmp / "train.parquet"),
        "val": str(tmp / "val.parquet"),
        "score": str(tmp / "score.py"),
    }


def config(files: dict[str, str], **over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "cluster": PLACEMENT,
        "algorithm": {
            "name": "grpo_lm",
            "group_size": 2,
            "prompts_per_iter": 4,
            "iterations": 2,
            "minibatch_size": 8,
            "kl_coef": 0.05,
            "max_new_tokens": 8,
        },
        "model": {
            "init": {
                "tokenizer": "bpe",
                "vocab_size": 320,
                "hidden_size": 32,
                "num_layers": 1,
                "num_heads": 2,
                "max_position_embeddings": 96,
            },
            "lora": {"rank": 4, "alpha": 8},
        },
        "data": {"train_files": files["train"], "val_files": files["val"]},
        "reward": {"path": files["score"]},
        "runner": {"scheduler": "local", "seed": 0, "torch_threads": 1},
    }
    for key, value in over.items():
        cfg[key] = value
    return cfg


def test_verl_parquet_with_compute_score_and_lora(tmp_path: Path) -> None:
    files = write_verl(tmp_path)
    summary = train_lm(load_lm_sections(config(files)), tmp_path / "run", log=None)
    assert summary["iterations"] == 2 and summary["eval_size"] == 8 and summary["lora"]
    for key in ("val_score_before", "val_score_after"):
        assert 0.0 <= summary[key] <= 1.0
    # adapter-only sync: what a publish moves is the LoRA tensors, a small part of the model
    assert 0 < summary["publish_bytes"] == 4 * summary["trainable_parameters"] < summary["parameters"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for col in ("reward_mean", "response_length", "kl", "clip_fraction", "publish_bytes"):
        assert col in rows[0], col
    outcomes = json.loads((tmp_path / "run" / "eval_after.json").read_text())["outcomes"]
    assert outcomes[0]["prompt"].startswith("<|im_start|>user\nWhat is")  # the chat template applied
    assert outcomes[0]["source"].endswith("val.parquet:0")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = tmp_path / "run"
    AutoTokenizer.from_pretrained(str(run / "policy"))
    AutoModelForCausalLM.from_pretrained(str(run / "policy"))
    PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(run / "base_model")), str(run / "adapter")
    )


def test_rlinf_jsonl_with_a_trl_style_reward_full_finetuning(tmp_path: Path) -> None:
    for split, n, start in (("train", 32, 0), ("val", 4, 100)):
        with (tmp_path / f"{split}.jsonl").open("w") as f:
            for a, b in _rows(n, start):
                f.write(json.dumps({"question": f"{a} plus {b}", "answer": str(a + b)}) + "\n")
            if split == "train":  # prompts too long for data.max_prompt_length: left out, counted
                for a, b in _rows(3, 50):
                    q = f"{a} plus {b}" + " and then add nothing more" * 12
                    f.write(json.dumps({"question": q, "answer": str(a + b)}) + "\n")
    (tmp_path / "trl_reward.py").write_text(
        "def reward_len(completions, answer, **kwargs):\n"
        "    return [1.0 if c.strip() == a else -0.01 * len(c) for c, a in zip(completions, answer)]\n"
    )
    files = {"train": str(tmp_path / "train.jsonl"), "val": str(tmp_path / "val.jsonl"), "score": ""}
    cfg = config(files)
    cfg["model"].pop("lora")
    cfg["data"].update(prompt_key="question", apply_chat_template=False, max_prompt_length=40)
    cfg["reward"] = {"path": str(tmp_path / "trl_reward.py"), "name": "reward_len"}
    said: list[str] = []
    summary = train_lm(load_lm_sections(cfg), tmp_path / "run", log=said.append)
    train = summary["data"]["train"]
    assert (train["rows"], train["kept"], train["filtered"]) == (35, 32, 3)
    assert train["filtered_sources"] == [f"{tmp_path / 'train.jsonl'}:{i}" for i in (33, 34, 35)]  # lines
    assert any("left out 3 of 35 prompts" in line for line in said), said
    assert not summary["lora"] and summary["publish_bytes"] > 0
    assert summary["trainable_parameters"] == summary["parameters"]
    assert summary["val_score_before"] < 0.0  # the length penalty: the callable really scored
    outcomes = json.loads((tmp_path / "run" / "eval_before.json").read_text())["outcomes"]
    assert not outcomes[0]["prompt"].startswith("<|im_start|>")  # plain text, no template


def test_a_failing_reward_names_its_sample(tmp_path: Path) -> None:
    files = write_verl(tmp_path)
    (tmp_path / "score.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    raise KeyError('no such column')\n"
    )
    with pytest.raises(RlinfError, match=r"val\.parquet:\d+") as err:
        train_lm(load_lm_sections(config(files)), tmp_path / "run", log=None)
    assert "no such column" in str(err.value)


def _problems(cfg: dict[str, Any]) -> dict[str, str]:
    return {p.path: p.message for p in GRPOLM.run_config_problems(cfg)}


def test_up_front_checks_name_the_yaml_path(tmp_path: Path) -> None:
    files = write_verl(tmp_path)
    cfg = config(files)
    cfg["model"] = {"path": str(tmp_path / "missing")}
    assert "is not a folder" in _problems(cfg)["model.path"]
    cfg["model"] = {"path": str(tmp_path)}  # a folder without config.json
    assert "no config.json" in _problems(cfg)["model.path"]
    from rlinf_algos.lm import hf
    from rlinf_algos.lm.config import ModelInitConfig

    arith = hf.new_model_folder(
        tmp_path / "arith", ModelInitConfig(hidden_size=16, num_layers=1, num_heads=2)
    )
    cfg["model"] = {"path": str(arith)}
    cfg["data"]["apply_chat_template"] = True
    assert "no chat template" in _problems(cfg)["data.apply_chat_template"]
    cfg = config(files)
    cfg["data"]["val_files"] = [files["val"], str(tmp_path / "nope.parquet")]
    cfg["reward"] = {"path": str(tmp_path / "score.py"), "name": "missing_fn"}
    problems = _problems(cfg)
    assert "no such file" in problems["data.val_files[1]"]
    assert "compute_score" in problems["reward.name"]  # lists what the file has
    cfg = config(files, task={"mode": "single"})
    assert "remove the task section" in _problems(cfg)["task"]
    with pytest.raises(ConfigError, match="rlinf sft"):
        load_lm_sections(config(files, sft={"steps": 10}))


@pytest.mark.slow
@pytest.mark.extended  # 160 s on CI's 2 cores; test_verl_parquet_with_compute_score_and_lora in-process
@pytest.mark.network
def test_distributed_dataset_run_with_lora_through_rlinf_train(tmp_path: Path) -> None:
    """``rlinf train`` on placed workers: the reward worker loads the data set and the user's
    file, the rollout worker receives adapter-only publishes."""
    from click.testing import CliRunner

    from rlinf_core.cli import build_cli
    from rlinf_core.plugins import load_plugins

    files = write_verl(tmp_path)
    cfg = config(files, runner={"scheduler": "ray", "seed": 0, "torch_threads": 1, "worker_timeout": 120})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    cli, host = build_cli(), load_plugins()
    host.register_commands(cli)
    res = CliRunner().invoke(
        cli, ["train", str(tmp_path / "run.yaml"), "--run-dir", str(tmp_path / "run")], obj=host
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["scheduler"] == "ray" and summary["iterations"] == 2
    assert 0 < summary["publish_bytes"] < summary["parameters"]
    assert (tmp_path / "run" / "adapter").is_dir() and (tmp_path / "run" / "policy" / "config.json").is_file()


EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "grpo_verl_format"


@pytest.mark.parametrize("grpo", ["grpo.yaml", "grpo_lora.yaml"])
def test_verl_format_example_smoke(grpo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's two commands with a tiny model and one iteration: ``rlinf sft`` writes the
    folder ``rlinf train`` starts from (the example's paths are relative to the repository root)."""
    from click.testing import CliRunner

    from rlinf_core.cli import build_cli
    from rlinf_core.plugins import load_plugins

    monkeypatch.chdir(EXAMPLE.parents[1])
    cli, host = build_cli(), load_plugins()
    host.register_commands(cli)
    tiny = ["model.init.hidden_size=16", "model.init.num_layers=1", "model.init.num_heads=2"]
    sft = [str(EXAMPLE / "sft.yaml"), "--run-dir", str(tmp_path / "sft"), *tiny, "train.steps=2"]
    sft += ["train.eval_generate=2", "data.max_samples=16"]
    res = CliRunner().invoke(cli, ["sft", *sft], obj=host)
    assert res.exit_code == 0, res.output
    train = [
        str(EXAMPLE / grpo),
        "--run-dir",
        str(tmp_path / "grpo"),
        f"model.path={tmp_path / 'sft' / 'policy'}",
    ]
    train += ["algorithm.iterations=1", "algorithm.prompts_per_iter=2", "algorithm.group_size=2"]
    train += ["data.max_samples=8", "runner.scheduler=local"]
    res = CliRunner().invoke(cli, ["train", *train], obj=host)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "grpo" / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["eval_size"] == 8
    assert summary["lora"] == (grpo == "grpo_lora.yaml")
    assert (tmp_path / "grpo" / "adapter").is_dir() == summary["lora"]


@pytest.mark.slow
@pytest.mark.learning
@pytest.mark.timeout(3600)
@pytest.mark.skipif(
    not os.environ.get("RLINF_LM_LEARNING"),
    reason="10-25 minutes (a 1000-step warm start, then GRPO full and LoRA): set RLINF_LM_LEARNING=1 "
    "(kept out of CI's 45-minute budget; grpo_arith's learning check covers the same GRPO loop there)",
)
def test_verl_format_examples_learn_full_and_lora(tmp_path: Path, rlinf_script: Any) -> None:
    """The example's own commands, ``rlinf sft`` then ``rlinf train grpo.yaml`` and
    ``grpo_lora.yaml`` from that one folder, on the default scheduler (Ray): GRPO removes the
    careless teacher's slip, at least +8 pp of held-out accuracy each (seeds 0-2 measured +13 to
    +23 pp full, +20 to +23 pp LoRA; benchmarks/results/grpo_verl_format_3seeds.json). Through
    this test (seed 0, 2026-11-27, 628 s): 0.656 -> 0.820 full, 0.656 -> 0.914 LoRA."""

    def rlinf(*args: str) -> None:
        proc = rlinf_script(*args, "--quiet", timeout=2400, cwd=EXAMPLE.parents[1])
        assert proc.returncode == 0, proc.stderr[-3000:]

    rlinf("sft", str(EXAMPLE / "sft.yaml"), "runner.torch_threads=2", "--run-dir", str(tmp_path / "sft"))
    gains = {}
    for name in ("grpo.yaml", "grpo_lora.yaml"):
        run_dir = tmp_path / name.removesuffix(".yaml")
        rlinf("train", str(EXAMPLE / name), f"model.path={tmp_path / 'sft' / 'policy'}", "--run-dir", str(run_dir))  # fmt: skip
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["scheduler"] == "ray" and summary["iterations"] == 40, name
        lora = name == "grpo_lora.yaml"
        assert summary["lora"] == lora and (run_dir / "adapter").is_dir() == lora, name
        gains[name] = summary["accuracy_after"] - summary["accuracy_before"]
    assert min(gains.values()) >= 0.08, gains

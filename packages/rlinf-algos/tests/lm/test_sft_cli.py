"""``rlinf sft``: supervised fine-tuning of a model folder on prompt-response pairs
(:mod:`rlinf_algos.lm.finetune`): the loss mask, a run through the command that lowers the
validation loss, ``policy/`` and ``adapter/`` reloaded with transformers and peft, and the errors
a user can make."""

from __future__ import annotations

import csv
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from click.testing import CliRunner

from rlinf_algos.lm.finetune import (
    SFTDataConfig,
    encode_example,
    load_examples,
    load_sft_config,
    lr_at,
    token_nll,
    train_sft,
)
from rlinf_algos.lm.hf import sequence_log_probs
from rlinf_algos.lm.tokens import LMTokenizer, bpe_tokenizer
from rlinf_algos.sft_cli import sft_cmd
from rlinf_core.cli import build_cli
from rlinf_core.errors import ConfigError, RlinfError

TINY_INIT = {
    "architecture": "qwen2",
    "hidden_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "max_position_embeddings": 64,
    "tokenizer": "bpe",
    "vocab_size": 320,
}


def _rows(n: int, seed: int, messages: bool) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 20), rng.randint(1, 9)
        q = f"What is {a} + {b}?"
        out.append(
            {
                "prompt": [{"role": "user", "content": q}] if messages else q + " ",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"index": i},
                "response": f"{a} + {b} = {a + b} #### {a + b}",
            }
        )
    return out


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(train: Path, val: Path | None, **train_cfg: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"train_files": str(train)}
    if val is not None:
        data["val_files"] = str(val)
    return {
        "model": {"init": dict(TINY_INIT)},
        "data": data,
        "train": {
            "steps": 40,
            "batch_size": 8,
            "lr": 1e-2,
            "warmup_steps": 4,
            "eval_batch_size": 16,
            **train_cfg,
        },
        "runner": {"seed": 0, "torch_threads": 1, "log_interval": 10},
    }


def _yaml(path: Path, cfg: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


def invoke(*args: str) -> Any:
    cli = build_cli()
    if "sft" not in cli.commands:
        cli.add_command(sft_cmd)
    return CliRunner().invoke(cli, ["sft", *args], catch_exceptions=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("sft_data")
    return {
        "train": _jsonl(d / "train.jsonl", _rows(64, 0, messages=True)),
        "val": _jsonl(d / "val.jsonl", _rows(16, 1, messages=True)),
        "plain": _jsonl(d / "plain.jsonl", _rows(8, 2, messages=False)),
    }


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory: pytest.TempPathFactory, files: dict[str, Path]) -> Path:
    d = tmp_path_factory.mktemp("tok")
    corpus = [r["response"] for r in _rows(64, 0, messages=True)] + ["What is + ?"]
    bpe_tokenizer(corpus, 300).save_pretrained(str(d))
    return d


# -- the examples --------------------------------------------------------------------------------


def test_loss_mask_covers_the_response_and_eos_only(tokenizer_folder: Path) -> None:
    tok = LMTokenizer.from_folder(tokenizer_folder)
    prompt, response = "What is 2 + 3? ", "2 + 3 = 5 #### 5"
    ids, mask = encode_example(prompt, response, tok)
    p = tok.encode(prompt)
    assert ids[: len(p)] == p and mask[: len(p)] == [0] * len(p)
    assert ids[len(p) :] == [*tok.encode(response), tok.eos_id]
    assert mask[len(p) :] == [1] * (len(ids) - len(p))
    assert tok.decode([t for t, m in zip(ids, mask, strict=True) if m]) == response + "<|im_end|>"
    # a response that already ends with the eos token does not get a second one
    ids2, mask2 = encode_example(prompt, response + "<|im_end|>", tok)
    assert ids2 == ids and mask2 == mask
    # bos first when the tokenizer wants one; nothing predicts position 0
    ids3, mask3 = encode_example("", response, tok)
    assert mask3[0] == 0 and sum(mask3) == len(ids3) - 1
    # data.append_eos: false trains the response exactly as written (a turn ended by a marker)
    ids4, mask4 = encode_example(prompt, response, tok, eos=False)
    assert ids4 == ids[:-1] and mask4 == mask[:-1]


def test_chat_template_prompt_then_the_assistant_turn(tokenizer_folder: Path, files: dict[str, Path]) -> None:
    from transformers import AutoTokenizer

    tok = LMTokenizer.from_folder(tokenizer_folder)
    hf_tok = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    cfg = SFTDataConfig(train_files=[str(files["train"])])
    ds = load_examples(cfg, "train", tok, hf_tok, max_length=64)
    assert len(ds) == 64 and ds.filtered == 0
    row = _rows(64, 0, messages=True)[0]
    ex = ds.examples[0]
    whole = hf_tok.apply_chat_template(
        [*row["prompt"], {"role": "assistant", "content": row["response"]}], tokenize=False
    )
    # the templated prompt (generation prompt included), the response, <|im_end|>: the template's
    # own assistant turn without its trailing newline
    assert tok.decode(ex.ids) == whole.rstrip("\n")
    assert tok.decode(ex.ids[: ex.prompt_len]).endswith("<|im_start|>assistant\n")
    assert sum(ex.mask) == len(ex.ids) - ex.prompt_len
    # response_key null trains on the answer; too long examples are left out and counted
    short = load_examples(
        SFTDataConfig(train_files=[str(files["train"])], response_key=None), "train", tok, hf_tok, 64
    )
    answer = row["reward_model"]["ground_truth"]
    assert tok.decode(short.examples[0].ids[short.examples[0].prompt_len :]) == f"{answer}<|im_end|>"
    lengths = sorted(len(e.ids) for e in ds.examples)
    n = lengths[-1] - 1
    cut = load_examples(cfg, "train", tok, hf_tok, max_length=n)
    assert 0 < len(cut) < 64 and cut.filtered == 64 - len(cut)
    assert all(len(e.ids) <= n for e in cut.examples) and len(cut.filtered_sources) == cut.filtered
    with pytest.raises(ConfigError) as err:
        load_examples(cfg, "train", tok, hf_tok, max_length=lengths[0] - 1)
    assert err.value.problems[0].path == "train.max_length"


def test_learning_rate_schedule() -> None:
    cfg = load_sft_config(
        {"model": {"path": "x"}, "data": {"train_files": "a.jsonl"}, "train": {"lr": 1.0, "warmup_steps": 2}}
    ).train
    lrs = [lr_at(s, 10, cfg) for s in range(10)]
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(cfg.min_lr_ratio)
    assert all(a >= b for a, b in itertools.pairwise(lrs[1:]))


# -- a run through the command ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory: pytest.TempPathFactory, files: dict[str, Path]) -> Path:
    d = tmp_path_factory.mktemp("sft_run")
    cfg = _yaml(d / "sft.yaml", _config(files["train"], files["val"], eval_interval=20, eval_generate=4))
    run_dir = d / "run"
    res = invoke(str(cfg), "--run-dir", str(run_dir), "runner.seed=0", "--quiet")
    assert res.exit_code == 0, (res.output, res.exception)
    assert "val loss" in res.output and str(run_dir) in res.output
    return run_dir


def test_sft_run_lowers_the_validation_loss_and_writes_the_run_dir(cli_run: Path) -> None:
    summary = json.loads((cli_run / "summary.json").read_text())
    assert summary["val_loss_after"] < summary["val_loss_before"] - 0.5, summary
    assert summary["steps"] == 40 and summary["train_examples"] == 64 and summary["val_examples"] == 16
    assert summary["trainable_params"] == summary["total_params"] > 0
    assert summary["seeds"] == {"runner.seed": 0, "data.seed": 0} and summary["seconds"] > 0
    assert summary["command"].startswith("rlinf sft ") and summary["val_generate"] == 4
    assert 0.0 <= summary["val_exact_match_after"] <= 1.0 and summary["adapter"] is None
    assert len(json.loads((cli_run / "val_generations.json").read_text())) == 4
    with (cli_run / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [10, 20, 30, 40]
    assert list(rows[0])[:4] == ["step", "loss", "lr", "tokens"]
    assert float(rows[-1]["loss"]) < float(rows[0]["loss"])
    assert int(rows[-1]["tokens"]) > int(rows[0]["tokens"]) > 0
    assert rows[1]["val_loss"] and not rows[0]["val_loss"]
    config = yaml.safe_load((cli_run / "config.yaml").read_text())
    assert config["model"]["init"]["hidden_size"] == 32 and config["data"]["response_key"] == "response"
    assert not (cli_run / "adapter").exists() and (cli_run / "base_model" / "config.json").is_file()


def test_policy_reloads_with_transformers_and_scores_as_the_trained_model(
    cli_run: Path, files: dict[str, Path]
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(cli_run / "policy"))
    hf_tok = AutoTokenizer.from_pretrained(str(cli_run / "policy"))
    assert hf_tok.chat_template and hf_tok.eos_token == "<|im_end|>"
    tok = LMTokenizer.from_folder(cli_run / "policy")
    val = load_examples(SFTDataConfig(train_files=[str(files["val"])]), "train", tok, hf_tok, 64)
    nll, count = token_nll(model, val.examples, tok.pad_id, 16)
    summary = json.loads((cli_run / "summary.json").read_text())
    # val_loss_after was computed by the model in memory, before it was saved
    assert count == summary["val_tokens"]
    assert nll == pytest.approx(summary["val_loss_after"], abs=1e-5)


def test_same_seed_same_run(cli_run: Path, files: dict[str, Path], tmp_path: Path) -> None:
    run = load_sft_config(_config(files["train"], files["val"], eval_interval=20, eval_generate=4))
    res = train_sft(run, tmp_path / "again", log=None)
    first = json.loads((cli_run / "summary.json").read_text())
    assert res.summary["val_loss_after"] == first["val_loss_after"]
    assert (tmp_path / "again" / "metrics.csv").read_text().count("\n") == 5


# -- LoRA ------------------------------------------------------------------------------------------


def test_lora_writes_a_merged_policy_and_an_adapter_peft_loads(
    files: dict[str, Path], tmp_path: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = _config(files["train"], files["val"], steps=10)
    cfg["model"]["lora"] = {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    res = train_sft(load_sft_config(cfg), tmp_path / "lora", log=None)
    s = res.summary
    assert s["lora"] and s["adapter"] == "adapter" and 0 < s["trainable_params"] < s["total_params"]
    assert s["val_loss_after"] < s["val_loss_before"]
    tok = res.tokenizer
    ids = torch.tensor(
        [tok.encode("<|im_start|>user\nWhat is 4 + 5?<|im_end|>\n<|im_start|>assistant\n4 + 5 = 9")]
    )
    with torch.no_grad():
        want = sequence_log_probs(res.model.eval(), ids)
        merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "lora" / "policy"))
        got = sequence_log_probs(merged, ids)
        base = AutoModelForCausalLM.from_pretrained(str(tmp_path / "lora" / "base_model"))
        before = sequence_log_probs(base, ids)
        peft_model = PeftModel.from_pretrained(base, str(tmp_path / "lora" / "adapter")).eval()
        adapter = sequence_log_probs(peft_model, ids)
    assert torch.allclose(got, want, atol=1e-5) and torch.allclose(adapter, want, atol=1e-5)
    assert not torch.allclose(before, want, atol=1e-3)  # the adapter changed something


# -- user errors -----------------------------------------------------------------------------------


def test_missing_response_names_the_file_row_and_key(files: dict[str, Path], tmp_path: Path) -> None:
    rows = _rows(5, 3, messages=True)
    del rows[2]["response"]
    bad = _jsonl(tmp_path / "bad.jsonl", rows)
    cfg = _yaml(tmp_path / "sft.yaml", _config(bad, None))
    res = invoke(str(cfg), "--run-dir", str(tmp_path / "run"))
    err = res.exception
    assert isinstance(err, ConfigError) and res.exit_code != 0
    assert [p.path for p in err.problems] == ["data.response_key"]
    assert f"{bad}:3" in str(err) and "'response'" in str(err) and "\n" not in str(err)
    assert not (tmp_path / "run").exists()  # checked before the run directory is made


def test_config_errors_name_their_yaml_paths(files: dict[str, Path], tmp_path: Path) -> None:
    cfg = _config(files["train"], None, epochs=2)
    cfg["algorithm"] = {"name": "grpo_lm"}
    cfg["data"]["respons_key"] = "x"
    path = _yaml(tmp_path / "sft.yaml", cfg)
    res = invoke(str(path), "model.init.hidden_size=30")
    assert isinstance(res.exception, ConfigError)
    paths = {p.path for p in res.exception.problems}
    assert {"algorithm", "data.respons_key", "train", "model.init"} <= paths, paths
    with pytest.raises(ConfigError) as err:
        load_sft_config({"model": {"path": "x"}})
    assert [p.path for p in err.value.problems] == ["data"]


def test_an_existing_run_dir_is_refused_unless_overwrite(files: dict[str, Path], tmp_path: Path) -> None:
    cfg = _yaml(tmp_path / "sft.yaml", _config(files["train"], None, steps=2))
    # a mistake found once the model is built leaves no run behind
    res = invoke(str(cfg), "--run-dir", str(tmp_path / "first"), "train.max_length=4", "--quiet")
    assert isinstance(res.exception, ConfigError) and res.exception.problems[0].path == "train.max_length"
    assert "longer than train.max_length=4" in str(res.exception)
    assert not (tmp_path / "first" / "config.yaml").exists()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("old: run\n")
    (run_dir / "metrics.csv").write_text("step,loss\n1,0.5\n")  # the old run saved a row
    res = invoke(str(cfg), "--run-dir", str(run_dir), "--quiet")
    assert isinstance(res.exception, RlinfError) and "--overwrite" in str(res.exception)
    assert (run_dir / "config.yaml").read_text() == "old: run\n"
    res = invoke(str(cfg), "--run-dir", str(run_dir), "--overwrite", "--quiet")
    assert res.exit_code == 0, (res.output, res.exception)
    assert (run_dir / "policy" / "config.json").is_file()
    moved = list(tmp_path.glob("run.replaced-*"))
    assert len(moved) == 1 and (moved[0] / "config.yaml").read_text() == "old: run\n"


def test_stop_at_exact_match_ends_the_run_at_the_first_check_that_reaches_it(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``train.stop_at_exact_match``: checked every ``eval_interval`` steps on the
    ``eval_generate`` prompts (the decoder is replaced by one whose exact match rises by 0.1 per
    call, so the third check, at step 15, reaches 0.25); the summary and metrics say so."""
    from rlinf_algos.lm import sft_flow

    calls: list[int] = []

    def rising(model: Any, tok: Any, examples: Any, max_new: int, batch: int) -> tuple[float, list[str]]:
        calls.append(1)
        return 0.1 * (len(calls) - 1), ["" for _ in examples]  # 0.0 before training, then 0.1, 0.2, 0.3

    monkeypatch.setattr(sft_flow, "exact_match", rising)
    cfg = _config(files["train"], files["val"], eval_interval=5, eval_generate=4, stop_at_exact_match=0.25)
    res = train_sft(load_sft_config(cfg), tmp_path / "run", log=None)
    s = res.summary
    assert s["steps"] == 15 and s["steps_planned"] == 40
    assert s["stopped_at_exact_match"] == pytest.approx(0.3)
    with (tmp_path / "run" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["val_exact_match"] for r in rows if r["val_exact_match"]] == ["0.1", "0.2", "0.3"]
    assert int(rows[-1]["step"]) == 15 and (tmp_path / "run" / "policy" / "config.json").is_file()
    # without the option every step runs, and the option needs its checks
    with pytest.raises(ConfigError) as err:
        load_sft_config(_config(files["train"], files["val"], stop_at_exact_match=0.5))
    assert err.value.problems[0].path == "train" and "eval_generate" in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_sft_config(_config(files["train"], None, adam_betas=[0.9, 1.0]))
    assert "adam_betas" in str(err.value)


# -- under the driver: SIGTERM, resume, plot ---------------------------------------------------------


def _rows_of(run_dir: Path) -> list[dict[str, str]]:
    """``metrics.csv`` without its clock column."""
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def _same_as_uninterrupted(run_dir: Path, first: Path) -> None:
    """``run_dir`` (stopped and resumed) ends where ``first`` (uninterrupted, same seed) ended:
    the same final losses, bit for bit, and the same metrics rows, each once."""
    got, want = (json.loads((d / "summary.json").read_text()) for d in (run_dir, first))
    for key in ("train_loss_last", "val_loss_after", "val_loss_before", "val_exact_match_after", "tokens"):
        assert got[key] == want[key], key
    assert got["steps"] == 40 and not got["interrupted"] and got["resumed_from"].endswith("step_10")
    assert _rows_of(run_dir) == _rows_of(first)
    assert [int(r["step"]) for r in _rows_of(run_dir)] == [10, 20, 30, 40]
    assert (run_dir / "config.yaml").read_text() == (first / "config.yaml").read_text()
    assert json.loads((run_dir / "val_generations.json").read_text()) == json.loads(
        (first / "val_generations.json").read_text()
    )


def test_sigterm_between_steps_then_resume_ends_as_the_uninterrupted_run(
    cli_run: Path, files: dict[str, Path], tmp_path: Path
) -> None:
    """SIGTERM (sent to this process when the row of step 10 is written) stops the run after that
    step: a checkpoint, the metrics, the policy and the summary are written; ``--resume``
    continues it to the uninterrupted run's end (``cli_run``: same config, same seed)."""
    import os
    import signal

    from rlinf_algos.training import TrainingInterrupted

    cfg = _config(files["train"], files["val"], eval_interval=20, eval_generate=4)
    run_dir = tmp_path / "run"

    def stop_at_10(row: dict[str, Any]) -> None:
        if row["step"] == 10:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(TrainingInterrupted) as stop:
        train_sft(load_sft_config(cfg), run_dir, log=None, progress=stop_at_10)
    assert stop.value.checkpoint == run_dir / "checkpoints" / "step_10"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] and summary["steps"] == 10 and summary["val_loss_after"] is None
    assert (run_dir / "policy" / "config.json").is_file() and [r["step"] for r in _rows_of(run_dir)] == ["10"]
    path = _yaml(tmp_path / "sft.yaml", cfg)
    res = invoke(str(path), "--resume", str(run_dir), "--quiet")
    assert res.exit_code == 0, (res.output, res.exception)
    _same_as_uninterrupted(run_dir, cli_run)


def test_resume_errors_name_what_is_wrong(cli_run: Path, files: dict[str, Path], tmp_path: Path) -> None:
    cfg = _yaml(tmp_path / "sft.yaml", _config(files["train"], files["val"]))
    res = invoke(str(cfg), "--resume", str(cli_run))  # a finished run without checkpoints
    assert isinstance(res.exception, RlinfError) and "nothing to resume" in str(res.exception)
    res = invoke(str(cfg), "--resume", str(cli_run), "--run-dir", str(tmp_path / "x"))
    assert res.exit_code == 2 and "not both" in res.output
    res = invoke(str(cfg), "--resume", str(cli_run), "--overwrite")
    assert res.exit_code == 2 and "--overwrite" in res.output


def test_a_resumed_run_keeps_its_model(cli_run: Path, files: dict[str, Path], tmp_path: Path) -> None:
    """Checkpoints every ``runner.checkpoint_interval`` steps and at the end; a run resumed with
    another ``model`` section is refused naming the key, and ``config.yaml`` stays the run's."""
    cfg = _config(files["train"], None, steps=4)
    cfg["model"] = {"path": str(cli_run / "base_model")}  # no tokenizer to train
    cfg["runner"].update(checkpoint_interval=2, log_interval=1)
    run_dir = tmp_path / "run"
    train_sft(load_sft_config(cfg), run_dir, log=None)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_2", "step_4"]
    before = (run_dir / "config.yaml").read_text()
    cfg["model"]["lora"] = {"rank": 4, "alpha": 8, "target_modules": ["q_proj"]}
    with pytest.raises(ConfigError) as err:
        train_sft(load_sft_config(cfg), run_dir, log=None, resume=True)
    assert [p.path for p in err.value.problems] == ["model.lora"]
    assert (run_dir / "config.yaml").read_text() == before


def test_rlinf_plot_draws_an_sft_run(cli_run: Path, tmp_path: Path) -> None:
    from rlinf_algos.cli import plot_cmd

    res = CliRunner().invoke(plot_cmd, [str(cli_run), "--out", str(tmp_path / "plots")])
    assert res.exit_code == 0, (res.output, res.exception)
    assert (tmp_path / "plots" / "metrics.png").stat().st_size > 0


@pytest.mark.slow
def test_rlinf_sft_terminated_by_sigterm_resumes_to_the_same_final_loss(
    cli_run: Path, files: dict[str, Path], tmp_path: Path
) -> None:
    """The console script, stopped with SIGTERM from outside as ``timeout`` stops it (once its
    row of step 10 is written), exits 143 and says how to continue; ``--resume`` ends where
    the uninterrupted run (``cli_run``) ended."""
    import signal
    import subprocess
    import sys
    import time

    cfg = _yaml(
        tmp_path / "sft.yaml", _config(files["train"], files["val"], eval_interval=20, eval_generate=4)
    )
    run_dir = tmp_path / "run"
    exe = Path(sys.executable).parent / "rlinf"
    proc = subprocess.Popen(
        [str(exe), "sft", str(cfg), "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            metrics = run_dir / "metrics.csv"
            if metrics.is_file() and metrics.read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, (out, err)
    assert "terminated (SIGTERM)" in err and "--resume" in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] and 10 <= summary["steps"] < 40
    res = invoke(str(cfg), "--resume", str(run_dir), "--quiet")
    assert res.exit_code == 0, (res.output, res.exception)
    got, want = (json.loads((d / "summary.json").read_text()) for d in (run_dir, cli_run))
    assert (
        got["train_loss_last"] == want["train_loss_last"] and got["val_loss_after"] == want["val_loss_after"]
    )
    assert _rows_of(run_dir) == _rows_of(cli_run)


def test_the_learner_placed_by_a_scheduler_trains_as_in_process(
    cli_run: Path, files: dict[str, Path], tmp_path: Path
) -> None:
    """The ``sft`` flow with its learner on an actor worker a scheduler placed (the ``threads``
    test scheduler, :mod:`threads_scheduler`): the same rows and final loss as in this process."""
    import importlib.util

    from rlinf_algos.lm.sft_flow import run_sft

    spec = importlib.util.spec_from_file_location(
        "threads_scheduler", Path(__file__).parents[1] / "threads_scheduler.py"
    )
    assert spec is not None and spec.loader is not None
    threads = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(threads)
    cfg = _config(files["train"], None, steps=6)
    cfg["model"] = {"path": str(cli_run / "base_model")}
    cfg["runner"].update(log_interval=2)
    run = load_sft_config(cfg)
    here, _ = run_sft(run, tmp_path / "here", say=lambda _m: None, resume=False, command=None, progress=None)
    sched = threads.ThreadScheduler()
    sched.start({})
    try:
        placed, model = run_sft(
            run,
            tmp_path / "placed",
            say=lambda _m: None,
            resume=False,
            command=None,
            progress=None,
            scheduler=sched,
        )
    finally:
        sched.shutdown()
    assert model is None and "launch actor" in threads.CALLS
    assert placed["train_loss_last"] == here["train_loss_last"] and placed["steps"] == 6
    assert _rows_of(tmp_path / "placed") == _rows_of(tmp_path / "here")
    assert (tmp_path / "placed" / "policy" / "config.json").is_file()


def test_rlinf_eval_of_an_sft_run_says_what_to_do(cli_run: Path) -> None:
    from rlinf_algos.cli import eval_cmd

    res = CliRunner().invoke(eval_cmd, [str(cli_run)])
    assert isinstance(res.exception, RlinfError), (res.output, res.exception)
    assert "rlinf sft` run" in str(res.exception) and "\n" not in str(res.exception)


def test_the_resume_hint_keeps_the_command_line_overrides(
    cli_run: Path, files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped by SIGTERM, ``rlinf sft CONFIG key=value`` says how to continue with the same
    overrides: without them the resumed run would take the file's ``train.steps`` (and its
    learning-rate schedule) instead of the run's."""
    import os
    import shlex
    import signal

    import rlinf_algos.progress_bar as progress_bar

    class StopAtTwo:  # the progress callback (the bar): SIGTERM once step 2's row is written
        def __call__(self, row: dict[str, Any]) -> None:
            if row["step"] == 2:
                os.kill(os.getpid(), signal.SIGTERM)

        def close(self) -> None:
            pass

    monkeypatch.setattr(progress_bar, "ProgressBar", StopAtTwo)
    cfg = _config(files["train"], None, steps=40)
    cfg["model"] = {"path": str(cli_run / "base_model")}  # no tokenizer to train
    cfg["runner"].update(log_interval=1)
    path = _yaml(tmp_path / "my sft.yaml", cfg)
    run_dir = tmp_path / "run dir"
    res = invoke(str(path), "train.steps=400", "train.lr=0.005", "--run-dir", str(run_dir))
    assert res.exit_code == 143, (res.output, res.exception)
    hint = res.output.split("continue with `")[1].split("`")[0]
    want = ["rlinf", "sft", str(path), "train.steps=400", "train.lr=0.005", "--resume", str(run_dir)]
    assert shlex.split(hint) == want

"""User code on the language-model side, contained and named: rewards that hang (in Python or in
C), raise, return NaN or text, exit, or print megabytes run in a killable child with
``reward.timeout_s`` and ``reward.on_error``; tokenizers transformers loads are accepted (a
character-level WordLevel one among them); ``rlinf train --dry-run`` finds damaged data files,
model folders and tokenizers as one-line exit-2 errors, through the CLI."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinf_algos.lm.config import RewardConfig
from rlinf_algos.lm.data import Sample
from rlinf_algos.lm.reward_host import LOG_CAP, ContainedReward, contain_reward
from rlinf_algos.lm.rewards import RewardError, load_reward
from rlinf_algos.lm.tokens import LMTokenizer, TokenizerError

HEAD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"


def _sample(i: int) -> Sample:
    return Sample(f"p{i}", None, str(i), {"extra_info": {"index": i}}, f"data/train.jsonl:{i + 1}", str(i))


def _reward(tmp_path: Path, body: str, **cfg: Any) -> ContainedReward:
    (tmp_path / "score.py").write_text(HEAD + body)
    score = load_reward(RewardConfig(path=str(tmp_path / "score.py"), **cfg))
    contained = contain_reward(score, tmp_path / "logs" / "reward-test.log")
    assert isinstance(contained, ContainedReward)
    return contained


# -- rewards ------------------------------------------------------------------------------------

HANG = "    if extra_info['index'] == 1:\n        import time\n        time.sleep(10_000)\n    return 1.0\n"
SPIN_C = (  # catastrophic backtracking: the C regex engine holds the GIL the whole time
    "    import re\n    if extra_info['index'] == 1:\n        re.match(r'(a+)+$', 'a' * 64 + 'b')\n    return 1.0\n"
)


@pytest.mark.parametrize("body", [HANG, SPIN_C], ids=["sleep", "spin-in-c"])
def test_a_reward_that_never_returns_ends_within_its_timeout_naming_the_sample(
    tmp_path: Path, body: str
) -> None:
    reward = _reward(tmp_path, body, timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(RewardError) as err:
        reward(["a", "b", "c"], [_sample(0), _sample(1), _sample(2)])
    assert time.monotonic() - t0 < 20  # the timeout, not 600 s; the child's start-up aside
    msg = str(err.value)
    assert "\n" not in msg
    assert "did not return within reward.timeout_s=1 s" in msg and "data/train.jsonl:2" in msg, msg
    assert f"'compute_score' from {tmp_path / 'score.py'}" in msg and "(after 1." in msg, msg
    # the next call gets a fresh child
    assert reward(["a"], [_sample(0)]) == [1.0]
    reward.close()


def test_on_error_zero_counts_the_hung_sample_and_goes_on(tmp_path: Path, capfd: Any) -> None:
    reward = _reward(tmp_path, HANG, timeout_s=1.0, on_error="zero")
    assert reward(["a", "b", "c"], [_sample(0), _sample(1), _sample(2)]) == [1.0, 0.0, 1.0]
    assert reward.failures == 1
    err = capfd.readouterr().err
    assert "scored 0 (reward.on_error: zero)" in err and len(err.splitlines()) == 1
    reward.close()


@pytest.mark.parametrize(
    ("body", "expected", "line"),
    [
        ("    x = {}\n    return x['missing']\n", "raised KeyError: 'missing'", 3),
        ("    return float('nan')\n", "returned nan, not a finite number", None),
        ("    return 'high'\n", "returned 'high' (str), not a number", None),
        ("    import sys\n    sys.exit(3)\n", "called sys.exit(3)", 3),
        ("    import os\n    os._exit(4)\n", "ended its process (exit code 4", None),
    ],
    ids=["raises", "nan", "text", "sys-exit", "os-exit"],
)
def test_failing_rewards_are_one_line_with_the_users_frame(
    tmp_path: Path, body: str, expected: str, line: int | None
) -> None:
    reward = _reward(tmp_path, body, timeout_s=10.0)
    with pytest.raises(RewardError) as err:
        reward(["a"], [_sample(4)])
    msg = str(err.value)
    assert "\n" not in msg and expected in msg and "data/train.jsonl:5" in msg, msg
    if line is not None:
        assert f"at {tmp_path / 'score.py'}:{line}" in msg, msg
    assert "rlinf_algos" not in msg.replace(str(tmp_path), "")
    zero = _reward(tmp_path, body, timeout_s=10.0, on_error="zero")
    assert zero(["a", "b"], [_sample(4), _sample(5)]) == [0.0, 0.0] and zero.failures == 2
    reward.close()
    zero.close()


def test_a_reward_that_prints_10_mb_leaves_the_console_readable(tmp_path: Path, capfd: Any) -> None:
    body = "    import sys\n    sys.stdout.write('x' * 5_000_000)\n    sys.stderr.write('y' * 5_000_000)\n    return 0.5\n"
    reward = _reward(tmp_path, body)
    assert reward(["a", "b"], [_sample(0), _sample(1)]) == [0.5, 0.5]
    reward.close()
    time.sleep(0.5)  # the drain threads finish the pipes
    out = capfd.readouterr()
    assert len(out.out) + len(out.err) < 2000, (len(out.out), len(out.err))
    assert "the rest is dropped" in out.err and str(tmp_path / "logs" / "reward-test.log") in out.err
    log = tmp_path / "logs" / "reward-test.log"
    assert LOG_CAP <= log.stat().st_size <= LOG_CAP + 200
    assert log.read_bytes().rstrip().endswith(b"output truncated at 1 MiB]")


def test_built_in_rewards_run_in_process() -> None:
    score = load_reward(RewardConfig(name="exact_match"))
    assert contain_reward(score) is score


# -- tokenizers ---------------------------------------------------------------------------------


def _char_tokenizer(folder: Path, chars: str, normalizer: Any = None) -> Path:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {s: i for i, s in enumerate(["<pad>", "<bos>", "<eos>", *chars])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token=None))
    if normalizer is not None:
        tk.normalizer = normalizer
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>"
    )
    tok.save_pretrained(str(folder))
    return folder


def test_a_character_level_wordlevel_tokenizer_is_accepted(tmp_path: Path) -> None:
    from tokenizers import normalizers
    from transformers import AutoTokenizer

    chars = "abcdefghijklmnopqrstuvwxyz0123456789 .,"
    plain = LMTokenizer.from_folder(_char_tokenizer(tmp_path / "plain", chars))
    assert plain.decode(plain.encode("add 12")) == "add 12"
    # a normaliser that merges characters: the offsets skip a 'd' (the old check refused it:
    # "cannot encode 'd'"), transformers encodes it, and so does rlinf
    folder = _char_tokenizer(tmp_path / "merge", chars, normalizers.Replace("dd", "d"))
    tok = LMTokenizer.from_folder(folder)
    hf = AutoTokenizer.from_pretrained(str(folder))
    assert tok.encode("add 12") == hf("add 12", add_special_tokens=False)["input_ids"]
    assert tok.decode(tok.encode("add 12")) == "ad 12"


def test_text_the_vocabulary_drops_is_refused() -> None:
    from tokenizers import Tokenizer, decoders, models

    tok = LMTokenizer.arith()  # digits and signs only, no unknown token: the backend refuses
    with pytest.raises(TokenizerError, match="cannot encode"):
        tok.encode("1+x=2")
    assert tok.decode(tok.encode("1+2=3")) == "1+2=3"
    # a BPE vocabulary without an unknown token drops 'c' silently: the round trip finds it
    tk = Tokenizer(models.BPE(vocab={"<eos>": 0, "a": 1, "b": 2, " ": 3}, merges=[], unk_token=None))
    tk.decoder = decoders.Fuse()
    with pytest.raises(TokenizerError, match="cannot encode 'c'"):
        LMTokenizer(tk, {"eos": "<eos>"}, "bpe").encode("ab c")


# -- rlinf train --dry-run -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlinf_algos.lm import hf
    from rlinf_algos.lm.config import ModelInitConfig

    root = tmp_path_factory.mktemp("lm-model")
    init = ModelInitConfig(tokenizer="bpe", vocab_size=300, hidden_size=16, num_layers=1, num_heads=2)
    return hf.new_model_folder(root / "model", init, corpus=["What is 1 + 2? 3"] * 20)


def _run_files(tmp_path: Path, model: Path) -> dict[str, Any]:
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "score.py").write_text(HEAD + "    return 1.0\n")
    return {
        "algorithm": {"name": "grpo_lm", "group_size": 2, "prompts_per_iter": 2, "iterations": 1},
        "model": {"path": str(model)},
        "data": {"train_files": str(tmp_path / "train.jsonl")},
        "reward": {"path": str(tmp_path / "score.py")},
        "runner": {"scheduler": "local"},
    }


def _dry_run(rlinf_main: Any, tmp_path: Path, cfg: dict[str, Any]) -> tuple[int, str]:
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    return rlinf_main("train", str(tmp_path / "run.yaml"), "--dry-run")


def _copy(model: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(model, dst)
    return dst


def _break_parquet(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    (tmp / "train.parquet").write_bytes(b"PAR1" + b"\x00garbage" * 50)
    cfg["data"]["train_files"] = str(tmp / "train.parquet")
    return f"{tmp / 'train.parquet'}: cannot read parquet"


def _break_jsonl(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    with (tmp / "train.jsonl").open("a") as f:
        f.write('{"prompt": "What is 9 + 1?", "answer": "10"\n')
    return f"{tmp / 'train.jsonl'}:9: invalid JSON"


def _missing_key(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    (tmp / "train.jsonl").write_text(json.dumps({"question": "What is 1 + 1?", "answer": "2"}) + "\n")
    return f"{tmp / 'train.jsonl'}:1"


def _no_weights(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    folder = _copy(model, tmp)
    (folder / "model.safetensors").unlink()
    cfg["model"]["path"] = str(folder)
    return f"{folder} has no weights file"


def _cut_weights(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    folder = _copy(model, tmp)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    cfg["model"]["path"] = str(folder)
    return f"{folder}: the weights file model.safetensors is damaged"


def _bad_header(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    folder = _copy(model, tmp)
    (folder / "model.safetensors").write_bytes(b"\xff" * 64)
    cfg["model"]["path"] = str(folder)
    return f"{folder}: the weights file model.safetensors is damaged"


def _bad_tokenizer(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    folder = _copy(model, tmp)
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "nonsense"')
    cfg["model"]["path"] = str(folder)
    return f"{folder}: its tokenizer"


def _no_function(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    cfg["reward"]["name"] = "score_it"
    return "has no 'score_it'"


def _import_error(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    (tmp / "score.py").write_text("import no_such_module_here\n" + HEAD + "    return 1.0\n")
    return "import failed at line 1: ModuleNotFoundError"


def _bad_device(tmp: Path, cfg: dict[str, Any], model: Path) -> str:
    cfg["runner"]["device"] = "gpu0"
    return "runner.device: 'gpu0' is not a torch device"


@pytest.mark.parametrize(
    "damage",
    [
        _bad_device,
        _break_parquet,
        _break_jsonl,
        _missing_key,
        _no_weights,
        _cut_weights,
        _bad_header,
        _bad_tokenizer,
        _no_function,
        _import_error,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_dry_run_finds_what_a_worker_would(
    rlinf_main: Any, tmp_path: Path, model_folder: Path, damage: Any
) -> None:
    cfg = _run_files(tmp_path, model_folder)
    expected = damage(tmp_path, cfg, model_folder)
    code, output = _dry_run(rlinf_main, tmp_path, cfg)
    assert code == 2, output
    assert expected in output, output
    assert "Traceback" not in output
    problem_lines = [ln for ln in output.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(problem_lines) <= 2, output  # a header and the one problem


def test_dry_run_passes_a_sound_run(rlinf_main: Any, tmp_path: Path, model_folder: Path) -> None:
    code, output = _dry_run(rlinf_main, tmp_path, _run_files(tmp_path, model_folder))
    assert code == 0, output


# -- a whole run, in process ------------------------------------------------------------------


def test_a_local_run_counts_a_hung_reward_with_on_error_zero(
    rlinf_main: Any, tmp_path: Path, model_folder: Path
) -> None:
    cfg = _run_files(tmp_path, model_folder)
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": "What is 2 + 1?", "answer": "3"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "score.py").write_text(
        HEAD + "    if ground_truth == '3':\n        import time\n        time.sleep(10_000)\n"
        "    print('scored', ground_truth)\n    return 1.0\n"
    )
    cfg["reward"].update(timeout_s=1, on_error="zero")
    cfg["algorithm"].update(max_new_tokens=2, iterations=1)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    code, output = rlinf_main(
        "train", str(tmp_path / "run.yaml"), "--run-dir", str(tmp_path / "run"), "--quiet"
    )
    assert code == 0, output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["reward_failures"] == 2  # the two episodes of row 2
    assert "scored 2" in (tmp_path / "run" / "logs" / "reward-r0.log").read_text()
    assert "scored 2" not in output  # the reward's prints go to the log
    cfg["reward"]["on_error"] = "stop"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    code, output = rlinf_main(
        "train", str(tmp_path / "run.yaml"), "--run-dir", str(tmp_path / "run2"), "--quiet"
    )
    assert code != 0
    assert f"{tmp_path / 'train.jsonl'}:2" in output and "reward.timeout_s=1 s" in output, output
    assert "Traceback" not in output
    said = [ln for ln in output.splitlines() if not ln.startswith("workers: ")]  # the roles it started
    assert sum("reward" in ln for ln in said) == 1, output


# -- the same on the Ray runner ------------------------------------------------------------------


@pytest.mark.slow
# 80 s each on CI's 2 cores: CI runs `stop` on Ray; the fast suite runs the local runner's
@pytest.mark.parametrize("on_error", ["stop", pytest.param("zero", marks=pytest.mark.extended)])
def test_on_the_ray_runner_a_hung_and_loud_reward_is_contained(
    rlinf_script: Any, tmp_path: Path, model_folder: Path, on_error: str
) -> None:
    """The reward worker's child is stopped within the timeout and named in one line (no remote
    traceback of rlinf's internals); with ``zero`` the run completes and counts it; the reward's
    megabytes of output go to ``logs/reward-r0.log``, capped, not to the console."""
    cfg = _run_files(tmp_path, model_folder)
    (tmp_path / "score.py").write_text(
        HEAD + "    if '3' in str(ground_truth):\n        import time\n        time.sleep(10_000)\n"
        "    print('x' * 2_000_000)\n    return 1.0\n"
    )
    cfg["reward"].update(timeout_s=2, on_error=on_error)
    cfg["algorithm"].update(max_new_tokens=4, iterations=1, kl_coef=0)
    cfg["data"]["val_files"] = str(tmp_path / "train.jsonl")
    cfg["runner"] = {"scheduler": "ray", "worker_timeout": 120}
    cfg["cluster"] = {
        "num_nodes": 1,
        "component_placement": {
            c: {"node_group": "node", "placement": "0"} for c in ("actor", "rollout", "reward")
        },
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    proc = rlinf_script(
        "train",
        str(tmp_path / "run.yaml"),
        "--run-dir",
        str(tmp_path / "run"),
        "--quiet",
        timeout=600,
        cwd=tmp_path,
    )
    output = proc.stdout + proc.stderr
    assert len(output) < 20_000, len(output)  # 2 MB per sample went to the log, not here
    assert "Traceback" not in output and "remote traceback" not in output, output
    log = tmp_path / "run" / "logs" / "reward-r0.log"
    assert LOG_CAP <= log.stat().st_size <= LOG_CAP + 200
    if on_error == "stop":
        assert proc.returncode != 0
        errors = [ln for ln in output.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1, output
        assert f"{tmp_path / 'train.jsonl'}:3" in errors[0] and "reward.timeout_s=2 s" in errors[0], output
    else:
        assert proc.returncode == 0, output
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["reward_failures"] >= 1 and summary["scheduler"] == "ray"


def test_a_folder_transformers_cannot_load_is_one_line_naming_it(model_folder: Path, tmp_path: Path) -> None:
    from rlinf_algos.lm import hf
    from rlinf_algos.lm.config import LMModelConfig
    from rlinf_core.errors import ConfigError

    bad = tmp_path / "model"
    shutil.copytree(model_folder, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["num_attention_heads"] = 5  # hidden 16: the projections no longer match the weights
    (bad / "config.json").write_text(json.dumps(cfg))
    spec = LMModelConfig(path=str(bad))
    for load in (
        lambda: hf.load_causal_lm(spec),
        lambda: hf.add_tokens_folder(spec, tmp_path / "out", ["<x>"]),
    ):
        with pytest.raises(ConfigError) as info:
            load()
        (problem,) = info.value.problems
        assert problem.path == "model.path" and str(bad) in problem.message
        assert "do not match config.json" in problem.message and "\n" not in str(info.value)

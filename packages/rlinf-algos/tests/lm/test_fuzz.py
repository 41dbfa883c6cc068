"""Fuzzing the language-model side: a ``grpo_lm`` / ``ppo_lm`` run on a data set with a reward
file, and an ``rlinf sft`` run on prompt-response rows, mutated (a key deleted, renamed or added, a value replaced by another type, a huge or
non-finite number, a nested structure, a dotted override), and hostile data files (empty, a
huge row, wrong types per row, non-UTF-8, binary, a broken parquet), through
``rlinf train --dry-run`` / ``rlinf sft --dry-run`` in process. Whatever the input, the CLI ends with success or one of
rlinf's own errors, never a traceback.

Fixed seed (derandomized), bounded (``RLINF_LM_FUZZ_EXAMPLES``, default 60); ``-s`` prints the
counts."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlinf_core.cli import build_cli
from rlinf_core.errors import RlinfError
from rlinf_core.plugins import load_plugins

MAX_EXAMPLES = int(os.environ.get("RLINF_LM_FUZZ_EXAMPLES", "60"))
COUNTS: Counter[str] = Counter()

_HOST = load_plugins()
_CLI = build_cli()
_HOST.register_commands(_CLI)
_DIR = Path(tempfile.mkdtemp(prefix="rlinf-lm-fuzz-"))

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-10, 10)
    | st.sampled_from([2**63, 10**30, -(10**30), 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["", " ", "auto", "cuda:99", "cpu", "x" * 300, "../..", "/dev/null", "\x00"])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=5,
)
KEYS = st.text(max_size=8) | st.sampled_from(["path", "timeout_s", "on_error", "lora", "init", "foo"])
OPS = ["replace"] * 4 + ["delete"] * 2 + ["override"] * 2 + ["rename", "add"]
SECTIONS = ("algorithm", "model", "data", "reward", "runner", "rollout", "critic", "train")


def _model_folder() -> Path:
    from rlinf_algos.lm import hf
    from rlinf_algos.lm.config import ModelInitConfig

    init = ModelInitConfig(tokenizer="bpe", vocab_size=300, hidden_size=16, num_layers=1, num_heads=2)
    return hf.new_model_folder(_DIR / "model", init, corpus=["What is 1 + 2? 3"] * 20)


_MODEL: Path | None = None


def _base(algo: str) -> dict[str, Any]:
    global _MODEL
    if _MODEL is None:
        _MODEL = _model_folder()
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]
    (_DIR / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (_DIR / "score.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
    )
    cfg: dict[str, Any] = {
        "algorithm": {"name": algo, "group_size": 2, "prompts_per_iter": 2, "iterations": 1},
        "model": {"path": str(_MODEL)},
        "data": {"train_files": str(_DIR / "train.jsonl"), "prompt_key": "prompt", "answer_key": "answer"},
        "reward": {"path": str(_DIR / "score.py"), "timeout_s": 5, "on_error": "stop"},
        "runner": {"scheduler": "local", "seed": 0},
        "rollout": {"engine": "hf"},
    }
    if algo == "ppo_lm":
        cfg["critic"] = {}
    return cfg


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    return out


def _mutate(data: dict[str, Any], draw: Any) -> list[str]:
    overrides: list[str] = []
    for _ in range(draw(st.integers(1, 2))):
        op = draw(st.sampled_from(OPS))
        COUNTS[f"op:{op}"] += 1
        paths = [p for p in _paths(data) if p[0] in SECTIONS]
        path = draw(st.sampled_from(paths))
        if op == "override":
            value = yaml.safe_dump(draw(VALUES), default_flow_style=True, width=10**6).strip()
            overrides.append(f"{'.'.join(map(str, path))}={value.removesuffix(chr(10) + '...').strip()}")
            continue
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        key = path[-1]
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(VALUES)
        elif op == "rename":
            parent[f"{key}x"] = parent.pop(key)
        elif isinstance(parent.get(key), dict):
            parent[key][draw(KEYS)] = draw(VALUES)
    return overrides


def _hostile_file(draw: Any) -> Path:
    kind = draw(st.sampled_from(["empty", "huge", "types", "latin1", "binary", "parquet", "array", "blank"]))
    COUNTS[f"file:{kind}"] += 1
    suffix = ".parquet" if kind == "parquet" else draw(st.sampled_from([".jsonl", ".json"]))
    path = _DIR / f"hostile{suffix}"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "huge":
        path.write_text(json.dumps({"prompt": "x" * 2_000_000, "answer": "1"}) + "\n")
    elif kind == "types":
        rows = draw(st.lists(st.dictionaries(st.sampled_from(["prompt", "answer", "q"]), VALUES), max_size=3))
        path.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows) or "\n")
    elif kind == "latin1":
        path.write_bytes('{"prompt": "caf\xe9", "answer": "1"}\n'.encode("latin-1"))
    elif kind == "binary":
        path.write_bytes(draw(st.binary(min_size=1, max_size=200)))
    elif kind == "parquet":
        path.write_bytes(b"PAR1" + draw(st.binary(max_size=100)) + b"PAR1")
    elif kind == "array":
        path.write_text(json.dumps(draw(st.lists(VALUES, max_size=3)), default=str))
    else:
        path.write_text("\n\n   \n")
    return path


@st.composite
def case(draw: Any) -> tuple[Path, list[str]]:
    cfg = _base(draw(st.sampled_from(["grpo_lm", "ppo_lm"])))
    overrides: list[str] = []
    if draw(st.booleans()):
        cfg["data"]["train_files"] = str(_hostile_file(draw))
    if draw(st.integers(0, 3)):
        overrides = _mutate(cfg, draw)
    path = _DIR / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path, overrides


@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case())
def test_fuzz_lm_train_dry_run(c: tuple[Path, list[str]]) -> None:
    path, overrides = c
    result = CliRunner().invoke(_CLI, ["train", str(path), *overrides, "--dry-run"], obj=_HOST)
    exc = result.exception
    COUNTS[f"train:{'ok' if result.exit_code == 0 else 'refused'}"] += 1
    assert exc is None or isinstance(exc, RlinfError | SystemExit), (
        f"{type(exc).__name__}: {exc}\n{path.read_text()[:2000]}\n{overrides}"
    )
    assert "Traceback" not in result.output, result.output


def _sft_base() -> dict[str, Any]:
    cfg = _base("grpo_lm")  # builds the model folder once
    rows = [{"prompt": f"What is {i} + 1?", "response": str(i + 1)} for i in range(6)]
    (_DIR / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {
        "model": cfg["model"],
        "data": {"train_files": str(_DIR / "sft.jsonl"), "prompt_key": "prompt", "response_key": "response"},
        "train": {"steps": 2, "batch_size": 2},
        "runner": {"seed": 0},
    }


@st.composite
def sft_case(draw: Any) -> tuple[Path, list[str]]:
    cfg = _sft_base()
    overrides: list[str] = []
    if draw(st.booleans()):
        cfg["data"]["train_files"] = str(_hostile_file(draw))
    if draw(st.integers(0, 3)):
        overrides = _mutate(cfg, draw)
    path = _DIR / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path, overrides


@settings(
    max_examples=MAX_EXAMPLES // 2,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(sft_case())
def test_fuzz_sft_dry_run(c: tuple[Path, list[str]]) -> None:
    path, overrides = c
    result = CliRunner().invoke(_CLI, ["sft", str(path), *overrides, "--dry-run"], obj=_HOST)
    exc = result.exception
    COUNTS[f"sft:{'ok' if result.exit_code == 0 else 'refused'}"] += 1
    assert exc is None or isinstance(exc, RlinfError | SystemExit), (
        f"{type(exc).__name__}: {exc}\n{path.read_text()[:2000]}\n{overrides}"
    )
    assert "Traceback" not in result.output, result.output


def test_sft_dry_run_checks_what_a_run_would_and_writes_nothing(tmp_path: Path) -> None:
    cfg = _sft_base()
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    ok = CliRunner().invoke(
        _CLI, ["sft", str(path), "--dry-run", "--run-dir", str(tmp_path / "run")], obj=_HOST
    )
    assert ok.exit_code == 0, ok.output
    assert "6 training examples; dry run" in ok.output and not (tmp_path / "run").exists()
    assert yaml.safe_load(ok.output.split("# 6 training")[0])["data"]["response_key"] == "response"
    bad = CliRunner().invoke(_CLI, ["sft", str(path), "--dry-run", "data.response_key=nope"], obj=_HOST)
    assert bad.exit_code != 0 and isinstance(bad.exception, RlinfError)
    assert "data.response_key" in str(bad.exception) and "sft.jsonl:1" in str(bad.exception)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    print("\nlm fuzz counts:", dict(sorted(COUNTS.items())))

"""Fuzzing: every example config (seed 003's worker-pool ones too), mutated (a key deleted, renamed or added, a value replaced by
another type, a string, a huge or non-finite number or a nested structure, a section given
twice, a dotted override), through `rlinf train --dry-run` and `rlinf cluster plan` in-process.
Whatever the input, the CLI ends with success or one of rlinf's own errors, never a traceback.

Bounded (max_examples below, about 20 s in all); run with `-s` to see the counts."""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = sorted(
    p
    for p in (ROOT / "examples").glob("*.yaml")
    if isinstance(yaml.safe_load(p.read_text()), dict) and "cluster" in yaml.safe_load(p.read_text())
) + sorted((ROOT / "examples" / "seed003").glob("ppo_*.yaml"))  # the worker-pool form (seed 003)
MAX_EXAMPLES = int(os.environ.get("RLINF_FUZZ_EXAMPLES", "250"))
COUNTS: Counter[str] = Counter()

_HOST = load_plugins()
_CLI = build_cli()
_HOST.register_commands(_CLI)
_DIR = Path(tempfile.mkdtemp(prefix="rlinf-fuzz-"))

TEXTS = st.sampled_from(
    [
        "",
        " ",
        ",",
        "0-",
        "-1",
        "0-1,",
        "1-0",
        "all",
        "0:0-1",
        "0-3:0",
        "a,b",
        "actor,",
        "node",
        "cluster",
        "x" * 300,
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-10, 10)
    | st.integers(min_value=2**31, max_value=2**80)
    | st.sampled_from([10**30, -(10**30), 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | TEXTS
)
KEYS = (
    st.text(max_size=8)
    | TEXTS
    | st.sampled_from(["actor", "rollout", "env", "reward", "agent", "foo", "tracer"])
)
OPS = ["replace"] * 3 + ["delete"] * 2 + ["override"] * 2 + ["rename", "add", "duplicate"]
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8) | TEXTS, inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _parent(data: Any, path: tuple[Any, ...]) -> Any:
    node = data
    for part in path[:-1]:
        node = node[part]
    return node


def _mutate(data: dict[str, Any], draw: Any) -> tuple[dict[str, Any], str, list[str]]:
    """One or two mutations of ``data``; returns the data, extra YAML text and overrides."""
    extra, overrides = "", []
    for _ in range(draw(st.integers(1, 2))):
        op = draw(st.sampled_from(OPS))
        COUNTS[f"op:{op}"] += 1
        paths = _paths(data)
        if draw(st.booleans()) and isinstance(data.get("cluster"), dict | list):
            paths = [p for p in paths if p[0] == "cluster"] or paths
        if op == "duplicate":
            if data:
                key = draw(st.sampled_from(sorted(data, key=str)))
                extra += "\n" + yaml.safe_dump({key: data[key]}, sort_keys=False)
            continue
        if op == "override":
            target = draw(st.sampled_from(paths)) if paths else ("runner",)
            dotted = ".".join(str(p) for p in target)
            value = yaml.safe_dump(draw(VALUES), default_flow_style=True, width=10**6).strip()
            value = value.removesuffix("\n...").strip()
            overrides.append(f"{dotted}={value}")
            continue
        if not paths:
            continue
        path = draw(st.sampled_from(paths))
        parent = _parent(data, path)
        key = path[-1]
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(VALUES)
        elif op == "rename" and isinstance(parent, dict):
            new = draw(st.sampled_from([f"{key}x", str(key)[:-1], str(key).upper(), "profiling", "tracer"]))
            parent[new] = parent.pop(key)
        elif op == "add":
            target = parent[key] if isinstance(parent[key], dict) else parent
            if isinstance(target, dict):
                target[draw(KEYS)] = draw(VALUES)
    return data, extra, overrides


def _check(result: Any, what: str) -> None:
    exc = result.exception
    ok = exc is None or isinstance(exc, RlinfError | SystemExit)
    COUNTS[f"{what}:{'ok' if result.exit_code == 0 else 'refused'}"] += 1
    assert ok, f"{what}: {type(exc).__name__}: {exc}\n{result.output}"
    assert "Traceback" not in result.output, result.output


def _text_mutation(text: str, draw: Any) -> bytes:
    """Damage at the level of the file: nesting deeper than a parser recurses, an alias bomb,
    bytes that are not UTF-8, a section cut short."""
    op = draw(st.sampled_from(["none"] * 6 + ["deep", "bomb", "bytes", "truncate"]))
    COUNTS[f"text:{op}"] += 1
    lines = text.splitlines()
    if op == "deep":
        n = draw(st.sampled_from([10, 70, 5000]))
        i = draw(st.integers(0, len(lines) - 1))
        head, sep, _ = lines[i].partition(": ")
        lines[i] = f"{head}: {'[' * n}{']' * n}" if sep else lines[i]
    elif op == "bomb":
        anchors = ['b0: &b0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
        anchors += [f"b{k}: &b{k} [{', '.join([f'*b{k - 1}'] * 9)}]" for k in range(1, 7)]
        lines = anchors + lines
    elif op == "truncate":
        lines = lines[: draw(st.integers(0, len(lines)))]
    data = ("\n".join(lines) + "\n").encode()
    if op == "bytes":
        i = draw(st.integers(0, len(data)))
        data = data[:i] + b"\xff\xfe" + data[i:]
    return data


@st.composite
def mutated(draw: Any) -> tuple[Path, bytes, list[str]]:
    source = draw(st.sampled_from(EXAMPLES))
    data = yaml.safe_load(source.read_text())
    data, extra, overrides = _mutate(data, draw)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True) + extra
    return source, _text_mutation(text, draw), overrides


FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("RLINF_FUZZ_RANDOM", "") == "",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.slow
@FUZZ
@given(mutated(), st.sampled_from([None, "0", "8"]))
def test_fuzz_train_dry_run(case: tuple[Path, bytes, list[str]], gpus: str | None) -> None:
    source, text, overrides = case
    path = _DIR / source.name
    path.write_bytes(text)
    args = ["train", str(path), *overrides, "--dry-run"]
    if gpus is not None:
        args += ["--gpus-per-node", gpus]
    result = CliRunner().invoke(_CLI, args, obj=_HOST)
    _check(result, "train")


@pytest.mark.slow
@FUZZ
@given(mutated(), st.sampled_from([None, "0", "8"]))
def test_fuzz_cluster_plan(case: tuple[Path, bytes, list[str]], gpus: str | None) -> None:
    source, text, _ = case
    path = _DIR / source.name
    path.write_bytes(text)
    args = ["cluster", "plan", str(path)]
    if gpus is not None:
        args += ["--gpus-per-node", gpus]
    result = CliRunner().invoke(_CLI, args, obj=_HOST)
    _check(result, "plan")


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    print("\nfuzz counts:", dict(sorted(COUNTS.items())))

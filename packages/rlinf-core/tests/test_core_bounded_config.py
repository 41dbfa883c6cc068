"""Configs are bounded (issue 53, item 7): an interpolation bomb, a node-copying bomb, a huge
``-m`` sweep or ``range()`` bound and a NUL byte are each one :class:`ConfigError` line, found
before anything large is built."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from rlinf_core.compose import MAX_SWEEP_RUNS, compose, load_config, sweep
from rlinf_core.errors import ConfigError


def _bomb(n: int = 34) -> str:
    """The 35-line interpolation bomb: every key is the previous one twice (2**34 * 10 characters)."""
    lines = ["a: xxxxxxxxxx"]
    prev = "a"
    for i in range(n):
        lines.append(f"k{i}: ${{{prev}}}${{{prev}}}")
        prev = f"k{i}"
    return "\n".join(lines) + "\n"


def test_an_interpolation_bomb_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb())
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert len(text.splitlines()) == 1
    assert str(path) in text and "k16" in text and "characters" in text


def test_the_bomb_through_the_console_script_stays_small(tmp_path: Path) -> None:
    """``rlinf train BOMB --print-config`` under a 2 GiB address-space limit: exit 2 and one line
    (it went past 4 GB before). ``rlinf train`` is rlinf-algos' command: skipped where rlinf-core
    is installed alone (CI's isolation run)."""
    pytest.importorskip("rlinf_algos", reason="rlinf train comes with rlinf-algos")
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb())

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    exe = Path(sys.executable).parent / "rlinf"
    proc = subprocess.run(
        [str(exe), "train", str(path), "--print-config"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "k16" in proc.stderr and "characters" in proc.stderr  # (2 GiB later, it blamed k26)


def test_node_copies_and_selects_are_counted_too() -> None:
    nodes = {"n0": {"a": 1, "b": 2}}
    for i in range(1, 35):
        nodes[f"n{i}"] = {"x": f"${{n{i - 1}}}", "y": f"${{n{i - 1}}}"}
    with pytest.raises(ConfigError, match="characters"):
        compose(nodes)
    selects: dict[str, object] = {"a": "xxxxxxxxxx"}
    for i in range(1, 40):
        prev = "a" if i == 1 else f"s{i - 1}"
        selects[f"s{i}"] = f"${{oc.select:{prev},0}}${{oc.select:{prev},0}}"
    with pytest.raises(ConfigError, match="characters"):
        compose(selects)
    relative = {"g": {"a": "xxxxxxxxxx", **{f"k{i}": f"${{.k{i - 1}}}${{.k{i - 1}}}" for i in range(1, 40)}}}
    relative["g"]["k0"] = "${.a}"
    with pytest.raises(ConfigError, match=r"g\.k1[0-9]"):
        compose(relative)


def test_ordinary_interpolations_still_resolve() -> None:
    data = {"a": {"b": 2}, "c": "${a.b}", "d": "${a}", "e": {"f": "${..c}-${.g}", "g": "x"}}
    assert compose(data) == {"a": {"b": 2}, "c": 2, "d": {"b": 2}, "e": {"f": "2-x", "g": "x"}}


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("runner.seed=range(0,1000000000000)", "1,000,000,000,000 values"),
        ("runner.seed=range(0,10**12)", "whole numbers written out"),
        ("runner.seed=range(0," + "9" * 5000 + ")", "at most 18 digits"),
    ],
)
def test_huge_sweep_ranges_are_one_line(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        sweep([override])
    assert len(str(err.value).splitlines()) == 1 and len(str(err.value)) < 400


def test_the_product_of_sweeps_is_bounded() -> None:
    assert len(sweep(["a=range(0,100)", "b=range(0,100)"])) == MAX_SWEEP_RUNS
    with pytest.raises(ConfigError, match=r"100 x 101 = 10,100 runs"):
        sweep(["a=range(0,100)", "b=range(0,101)"])


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"algorithm:\n  name: ppo\x00\n", "a NUL byte at line 2, column 12"),
        (b"a: 1\x07\n", "control character U[+]0007 at line 1"),
        (b"\xff\xfea\x00:\x00 \x001\x00\n\x00", "not UTF-8"),
    ],
)
def test_unreadable_yaml_is_one_line(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=match) as err:
        load_config(path)
    assert len(str(err.value).splitlines()) == 1 and str(path) in str(err.value)

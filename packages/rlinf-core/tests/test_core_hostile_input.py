"""Damaged and hostile input files: every one is one ConfigError line naming the file, never a
traceback, a hang or a huge message; strict numbers in configuration sections; RLinf's cluster
keys accepted with a warning, typos refused with a suggestion."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import Field

from rlinf_core.compat import split_rlinf_cluster_keys
from rlinf_core.config import ConfigSection, apply_overrides, load_yaml, parse_yaml, validate_model
from rlinf_core.errors import ConfigError, RlinfError
from rlinf_core.io import read_user_text

BOMB = "\n".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 9)]
    + ["env: {kwargs: {x: *a8}}"]
)


def one_line(err: pytest.ExceptionInfo[ConfigError]) -> str:
    text = str(err.value)
    assert "\n" not in text and len(text) < 400, text
    return text


def test_a_config_that_is_not_utf8_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"runner:\n  seed: \xff\xfe\n")
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    text = one_line(err)
    assert str(path) in text and "not UTF-8" in text and "line 2, column 9" in text


def test_a_utf8_byte_order_mark_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xef\xbb\xbfrunner: {seed: 1}\n")
    assert load_yaml(path) == {"runner": {"seed": 1}}


@pytest.mark.timeout(20)
def test_devices_fifos_and_folders_are_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    result: list[Any] = []

    def read() -> None:
        try:
            load_yaml(fifo)
        except ConfigError as e:
            result.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "reading a FIFO hung"
    assert "not a regular file" in str(result[0]) and str(fifo) in str(result[0])
    for path in ("/dev/zero", str(tmp_path)):
        with pytest.raises(ConfigError) as err:
            load_yaml(path)
        assert path in one_line(err)


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as f:
        f.truncate(17 * 2**20)  # sparse: no disk used
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    assert "17.0 MiB" in one_line(err) and "16.0 MiB" in str(err.value)
    with pytest.raises(RlinfError, match="over the 10 bytes"):
        read_user_text(path, what="metrics file", max_bytes=10)


def test_deep_nesting_is_a_config_error_not_a_recursion_error(tmp_path: Path) -> None:
    for n in (100, 5000):
        path = tmp_path / f"deep{n}.yaml"
        path.write_text("a: " + "[" * n + "]" * n + "\n")
        with pytest.raises(ConfigError) as err:
            load_yaml(path)
        assert "nested" in one_line(err) and str(path) in str(err.value)
    assert parse_yaml("a: " + "[" * 30 + "]" * 30) is not None  # deep enough for real configs


def test_an_alias_bomb_is_refused_before_it_is_built_and_not_quoted(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    assert "alias" in one_line(err) and "lol" not in str(err.value)
    with pytest.raises(ConfigError, match="contains it"):
        parse_yaml("a: &x [1, *x]")
    # ordinary anchors and merge keys still work
    data = parse_yaml("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\nd: *b\n")
    assert data["c"] == {"x": 3, "y": 2} and data["d"] == {"x": 1, "y": 2}


def test_duplicate_keys_at_any_level_name_the_path_and_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(
        "runner:\n  total_steps: 5\n"
        "cluster:\n  component_placement:\n    actor: 0\n    env: 0\n    actor: 1\n"
        "runner:\n  seed: 1\n"
        "list:\n  - {a: 1, a: 2}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    problems = {p.path: p.message for p in err.value.problems}
    assert "(lines 1 and 8)" in problems["runner"] and str(path) in problems["runner"]
    assert "(lines 5 and 7)" in problems["cluster.component_placement.actor"]
    assert "(lines 11 and 11)" in problems["list[0].a"]


def test_huge_integers_and_overrides_are_guarded_too() -> None:
    with pytest.raises(ConfigError, match="cannot read a value"):
        parse_yaml("a: " + "9" * 5000)
    with pytest.raises(ConfigError, match=r"override 'env\.kwargs="):
        apply_overrides({}, ["env.kwargs=" + "[" * 5000])
    with pytest.raises(ConfigError, match="alias"):
        apply_overrides({}, ["env.kwargs=" + BOMB.replace("\n", ", ").join("{}")])


class Section(ConfigSection):
    steps: int = Field(10, ge=1)
    lr: float | None = Field(None, gt=0)
    sizes: list[int] | None = None
    flag: bool = True
    mode: Literal["a", "b"] = "a"
    extra: dict[str, Any] = Field(default_factory=dict)


@pytest.mark.parametrize(
    ("data", "path", "expect"),
    [
        ({"steps": True}, "s.steps", "expected a number, not a boolean (got True)"),
        ({"lr": float("inf")}, "s.lr", "expected a finite number (got inf)"),
        ({"lr": float("nan")}, "s.lr", "expected a finite number (got nan)"),
        ({"lr": "-inf"}, "s.lr", "finite number"),
        ({"steps": 2**70}, "s.steps", "must fit in 64 bits"),
        ({"sizes": [64, False]}, "s.sizes", "[1]: expected a number, not a boolean (got False)"),
    ],
)
def test_config_sections_refuse_booleans_and_non_finite_numbers(data: Any, path: str, expect: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_model(Section, data, "s")
    (problem,) = err.value.problems
    assert problem.path == path and expect in problem.message


def test_config_sections_keep_what_is_fine() -> None:
    s = validate_model(
        Section, {"steps": 3, "lr": "3e-4", "flag": False, "extra": {"x": True, "y": float("inf")}}
    )
    assert s.lr == 3e-4 and s.flag is False and s.extra["x"] is True
    with pytest.raises(ConfigError, match="unknown key"):
        validate_model(Section, {"stepz": 1})


def test_rlinf_cluster_keys_are_accepted_and_typos_are_not() -> None:
    cluster = {
        "num_nodes": 2,
        "component_placement": {"actor": 0},
        "profiling": {"backend": "torch"},
        "tracer": {"enable": True},
        "net_emulation": {"enabled": False},
        "auto_scheduler": True,
        "node_groups": [{"label": "cpu", "node_ranks": "0-1", "ignore_hardware": True}],
        "component_placment": {},
    }
    cleaned, ignored, problems = split_rlinf_cluster_keys(cluster)
    assert ignored == [
        "cluster.profiling",
        "cluster.tracer",
        "cluster.net_emulation",
        "cluster.auto_scheduler",
        "cluster.node_groups[0].ignore_hardware",
    ]
    assert set(cleaned) == {"num_nodes", "component_placement", "node_groups"}
    assert cleaned["node_groups"] == [{"label": "cpu", "node_ranks": "0-1"}]
    (typo,) = problems
    assert typo.path == "cluster.component_placment" and "did you mean 'component_placement'?" in typo.message
    kept, _, _ = split_rlinf_cluster_keys(cluster, keep_unknown=True)
    assert "component_placment" in kept and "tracer" not in kept

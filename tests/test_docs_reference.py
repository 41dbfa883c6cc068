"""The generated parts of the docs are current: every package README's configuration reference
(tools/config_reference.py, from the pydantic field descriptions) and benchmarks/RESULTS.md
(benchmarks/results_table.py, from benchmarks/results/*.json).

A changed field description, a renamed config class or a new result file without regenerating
fails here with the command that fixes it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG_REFERENCE = ROOT / "tools" / "config_reference.py"
RESULTS_TABLE = ROOT / "benchmarks" / "results_table.py"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cref = _load(CONFIG_REFERENCE, "rlinf_docs_config_reference")
rtable = _load(RESULTS_TABLE, "rlinf_docs_results_table")


def _readmes_with_markers() -> list[Path]:
    readmes = sorted([*ROOT.glob("packages/*/README.md"), *ROOT.glob("packages/*/docs/*.md")])
    return [p for p in readmes if cref.has_markers(p.read_text(encoding="utf-8"))]


READMES = _readmes_with_markers()


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


# -- the repository's docs are current ------------------------------------------------------------


def test_package_readmes_carry_a_generated_reference() -> None:
    names = {p.parent.name for p in READMES}
    assert {"rlinf-core", "rlinf-hw-franka", "rlinf-net-easytier"} <= names, names


@pytest.mark.parametrize("readme", READMES, ids=[str(p.relative_to(ROOT / "packages")) for p in READMES])
def test_config_reference_is_current(readme: Path) -> None:
    rel = readme.relative_to(ROOT).as_posix()
    result = _run(str(CONFIG_REFERENCE.relative_to(ROOT)), "--check", rel)
    assert result.returncode == 0, (
        f"{rel}: its configuration reference does not match the models (or a class path in a marker "
        f"is wrong). Run `uv run python tools/config_reference.py --write {rel}`.\n{result.stderr}"
    )


def test_results_md_is_current() -> None:
    result = _run(str(RESULTS_TABLE.relative_to(ROOT)), "--check")
    assert result.returncode == 0, (
        "benchmarks/RESULTS.md does not match benchmarks/results/*.json. "
        f"Run `uv run python benchmarks/results_table.py`.\n{result.stderr}"
    )


def test_core_readme_documents_every_hook() -> None:
    """Every ``@hookspec`` of rlinf_core.hookspecs has a row in rlinf-core's hook table."""
    import ast

    source = (ROOT / "packages/rlinf-core/src/rlinf_core/hookspecs.py").read_text(encoding="utf-8")
    hooks = [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(d, ast.Name) and d.id == "hookspec" for d in node.decorator_list)
    ]
    assert hooks, "no @hookspec functions found in rlinf_core/hookspecs.py"
    readme = (ROOT / "packages/rlinf-core/README.md").read_text(encoding="utf-8")
    missing = [h for h in hooks if f"| `{h}(" not in readme]
    assert not missing, f"packages/rlinf-core/README.md: add a row to the hook table for {missing}"


def test_result_files_name_their_source() -> None:
    """Every figure moved out of a README says where from and how it was produced (null for what
    its source did not say); ``title`` is optional (the file name stands in)."""
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if "figures" not in data:
            continue  # a benchmark report written by the benchmark itself
        missing = [k for k in ("date", "machine", "command", "figures", "source") if k not in data]
        assert not missing, f"{path.name}: missing {missing} (use null for what the source did not say)"


# -- the config reference generator ---------------------------------------------------------------

MODELS = '''
from typing import Literal
from pydantic import BaseModel, ConfigDict, Field


def guess_host() -> str:
    raise AssertionError("the generator must not call default factories")


class Inner(BaseModel):
    """An inner block."""

    model_config = ConfigDict(extra="forbid")
    size: int = Field(default=3, ge=1, description="How many.")


class Outer(BaseModel):
    """The outer section."""

    name: str = Field(description="The name.")
    mode: Literal["fast", "safe"] = Field(default="safe", description="How to run.")
    host: str = Field(default_factory=guess_host, description="Where.")
    inner: Inner = Field(default_factory=Inner)
    items: list[Inner] = Field(default_factory=list, description="A list | of blocks.")
    by_name: dict[str, Inner] = Field(default_factory=dict, description="Named blocks.")
    timeout: float | None = Field(default=None, gt=0, description="Seconds.")
    kind: Literal["outer"] = "outer"
    tags: list[Literal["a", "b"]] = Field(default_factory=lambda: ["a"], description="Tags.")
'''


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "docsref_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "docsref_models", raising=False)
    return tmp_path / "docsref_models.py"


README = """# pkg

intro

<!-- config-reference:begin outer=docsref_models:Outer -->
<!-- config-reference:end outer -->

after
"""


def test_renders_rows_for_every_field(models: Path, tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert cref.main(["--write", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# pkg\n\nintro\n\n<!-- config-reference:begin outer=docsref_models:Outer -->\n")
    assert text.endswith("<!-- config-reference:end outer -->\n\nafter\n")
    assert "### `outer`" in text
    assert "The outer section." in text
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `")}
    assert "**required**" in rows["outer.name"]
    assert "one of `fast`, `safe`" in rows["outer.mode"] and "`safe`" in rows["outer.mode"]
    assert "from `guess_host()`" in rows["outer.host"]
    assert "An inner block." in rows["outer.inner"]  # no description: the nested model's docstring
    assert "int (>= 1)" in rows["outer.inner.size"] and "`3`" in rows["outer.inner.size"]
    assert "list of mappings" in rows["outer.items"] and "A list \\| of blocks." in rows["outer.items"]
    assert "outer.items[].size" in rows
    assert "outer.by_name.<name>.size" in rows
    assert "float or null (> 0)" in rows["outer.timeout"] and "`null`" in rows["outer.timeout"]
    assert "| `outer` | `outer` |" in rows["outer.kind"]
    assert "list of (one of `a`, `b`)" in rows["outer.tags"] and '`["a"]`' in rows["outer.tags"]
    assert cref.main(["--check", str(readme)]) == 0
    assert cref.main(["--write", str(readme)]) == 0 and readme.read_text() == text  # idempotent


def test_check_names_the_stale_readme_and_section(
    models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README)
    cref.main(["--write", str(readme)])
    models.write_text(MODELS.replace('description="How many."', 'description="How many, at least one."'))
    sys.modules.pop("docsref_models", None)
    assert cref.main(["--check", str(readme)]) == 1
    err = capsys.readouterr().err
    assert f"{readme}:5: config reference 'outer' is stale" in err
    assert "tools/config_reference.py --write" in err


def test_a_stale_class_path_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README.replace("docsref_models:Outer", "docsref_nowhere:Outer"))
    assert cref.main(["--check", str(readme)]) == 1
    err = capsys.readouterr().err
    assert "config reference 'outer'" in err and "cannot import module 'docsref_nowhere'" in err


def test_unmatched_markers_fail(models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("<!-- config-reference:begin outer=docsref_models:Outer -->\nno end\n")
    assert cref.main(["--check", str(readme)]) == 1
    assert "has no matching config-reference:end" in capsys.readouterr().err


# -- the results table generator ------------------------------------------------------------------


def test_results_table_marks_what_is_not_recorded(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "exp_readme.json").write_text(
        json.dumps(
            {
                "title": "An experiment",
                "date": None,
                "machine": None,
                "command": "uv run python benchmarks/x.py",
                "seeds": [1, 2],
                "figures": [{"peer": "a", "steps/s": 1234.5}, {"peer": "b", "steps/s": 7}],
                "source": "moved from packages/x/README.md",
                "notes": "one note",
                "reproduced": False,
                "reproduction": "a re-run gave 3.",
            }
        )
    )
    (results / "bench_run1.json").write_text(
        json.dumps({"machine": {"cpus": 2, "python": "3.11"}, "x": {"y": 2}})
    )
    (results / "bench_run2.json").write_text(
        json.dumps({"machine": {"cpus": 2, "python": "3.11"}, "x": {"y": 3}})
    )
    out = tmp_path / "RESULTS.md"
    assert rtable.main(["--results", str(results), "--output", str(out), "--check"]) == 1  # missing
    assert rtable.main(["--results", str(results), "--output", str(out)]) == 0
    text = out.read_text()
    assert "## An experiment" in text
    assert "- Date: not recorded" in text and "- Machine: not recorded" in text
    assert "- Command: `uv run python benchmarks/x.py`" in text and "- Seeds: 1, 2" in text
    assert "- Reproduced: **no**: a re-run gave 3." in text and "(not reproduced)" in text
    assert "| a | 1,234.5 |" in text
    assert "`results/bench_run1.json`, `results/bench_run2.json`" in text  # one section for the runs
    assert "| bench_run1 | x.y | 2 |" in text
    assert rtable.main(["--results", str(results), "--output", str(out), "--check"]) == 0
    (results / "bench_run2.json").write_text(json.dumps({"machine": {"cpus": 2}, "x": {"y": 4}}))
    assert rtable.main(["--results", str(results), "--output", str(out), "--check"]) == 1


def test_a_reports_own_rows_are_its_table(tmp_path: Path) -> None:
    """A benchmark report that keeps its figures as a ``rows`` list (a row per setting) shows them
    as its table; objects in a row become dotted columns, the report's other figures lines."""
    results = tmp_path / "results"
    results.mkdir()
    rows = [
        {"load": 0, "start_s": 4.951983, "sb3": {"rate": 0.5}, "errors": []},
        {"load": 8, "start_s": 21.51196, "sb3": {"rate": 0.75}, "errors": ["slow"]},
    ]
    (results / "starts.json").write_text(json.dumps({"title": "Starts", "repeats": 3, "rows": rows}))
    out = tmp_path / "RESULTS.md"
    assert rtable.main(["--results", str(results), "--output", str(out)]) == 0
    text = out.read_text()
    assert "| load | start_s | sb3.rate | errors |" in text
    assert "| 0 | 4.952 | 0.5 | [] |" in text and '| 8 | 21.51 | 0.75 | ["slow"] |' in text
    assert "- repeats: 3" in text and "No figures." not in text


def test_results_table_names_a_broken_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    assert rtable.main(["--results", str(tmp_path), "--output", str(tmp_path / "R.md"), "--check"]) == 1
    assert "bad.json: cannot read it as JSON" in capsys.readouterr().err


def test_generators_need_only_the_standard_library_and_pydantic() -> None:
    code = textwrap.dedent(
        f"""
        import sys, runpy
        before = set(sys.modules)
        runpy.run_path({str(CONFIG_REFERENCE)!r}, run_name="not_main")
        runpy.run_path({str(RESULTS_TABLE)!r}, run_name="not_main")
        heavy = {{"rlinf_algos", "torch", "ray", "numpy", "yaml"}} & {{m.split(".")[0] for m in sys.modules}}
        assert not heavy, heavy
        """
    )
    result = _run("-c", code)
    assert result.returncode == 0, result.stderr

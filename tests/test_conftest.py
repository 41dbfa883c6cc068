"""The root conftest.py, run by a real pytest in a scratch project that holds a copy of it.

A whole-suite run (no test paths named) gets two pytest-xdist workers with ``--dist loadgroup``;
a run naming a path, or asking for ``-n 0``, stays in one process; a test marked ``extended``
but not ``slow`` is a usage error; under workers the learning checks are dealt to one group per
worker by the seconds they declare.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TWO_TESTS = """\
import os


def test_one():
    print("worker", os.environ.get("PYTEST_XDIST_WORKER", "none"))


def test_two():
    pass
"""


def _project(tmp_path: Path, body: str = TWO_TESTS) -> Path:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["t"]\nmarkers = ["slow: s", "extended: e", "learning: l"]\n'
    )
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_a.py").write_text(body)
    return tmp_path


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RLINF_FAULT_LOG"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: a whole-suite run stays in one process")
def test_a_whole_suite_run_gets_two_workers_grouped_by_module(tmp_path: Path) -> None:
    run = _pytest(_project(tmp_path), "-v")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "created: 2/2 workers" in run.stdout, run.stdout
    assert "LoadGroupScheduling" in run.stdout, run.stdout
    # the workers group too: both tests carry their module's group and ran on one worker
    done = [line.split()[0] for line in run.stdout.splitlines() if "PASSED t/test_a.py::" in line]
    assert len(done) == 2 and done[0] == done[1], run.stdout
    assert run.stdout.count("PASSED t/test_a.py::test_one@t/test_a.py") == 1, run.stdout


def test_a_named_path_stays_in_one_process(tmp_path: Path) -> None:
    run = _pytest(_project(tmp_path), "t/test_a.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "workers" not in run.stdout and "2 passed" in run.stdout, run.stdout


def test_extended_without_slow_is_a_usage_error(tmp_path: Path) -> None:
    body = "import pytest\n\n\n@pytest.mark.extended\ndef test_long():\n    pass\n"
    run = _pytest(_project(tmp_path, body), "-n", "0")  # -n 0: one process, no workers
    assert run.returncode == 4, run.stdout + run.stderr
    assert "workers" not in run.stdout
    assert "marked extended but not slow; mark it slow as well" in run.stdout + run.stderr


LEARNING = """\
import pytest


@pytest.mark.learning(seconds=100)
def test_long():
    pass


@pytest.mark.learning(seconds=60)
def test_mid():
    pass


@pytest.mark.learning(seconds=45)
def test_short():
    pass


@pytest.mark.learning(seconds=500)
@pytest.mark.skipif(True, reason="opt-in")
def test_skipped():
    pass
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: pytest-xdist would start one worker")
def test_learning_checks_are_dealt_by_their_seconds_one_group_per_worker(tmp_path: Path) -> None:
    # longest first onto the least loaded: long alone (100), mid and short together (105); the
    # skipped check costs nothing. Module by module all three would share one worker.
    run = _pytest(_project(tmp_path, LEARNING), "-n", "2", "--dist", "loadgroup", "-v")
    assert run.returncode == 0, run.stdout + run.stderr
    where = {}  # "[gw1] [ 50%] PASSED t/test_a.py::test_mid@learning-1"
    for line in run.stdout.splitlines():
        if "PASSED t/test_a.py::" in line:
            name, group = line.split("::", 1)[1].strip().split("@")
            where[name] = (line.split()[0], group)
    assert where["test_long"][1] == "learning-0", run.stdout
    assert where["test_mid"] == where["test_short"] and where["test_mid"][1] == "learning-1", run.stdout
    assert where["test_mid"][0] != where["test_long"][0], run.stdout


def test_a_run_in_one_process_leaves_the_learning_checks_in_their_modules(tmp_path: Path) -> None:
    run = _pytest(_project(tmp_path, LEARNING), "-v", "t/test_a.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "learning-" not in run.stdout and "3 passed, 1 skipped" in run.stdout, run.stdout

"""``tools/gpu_check.py --cpu``: every step of the device check passes on the CPU and the report
says so (the same steps run on a GPU without ``--cpu``), without Ray, and, through
``tools/gpu_check.sh``, on an interpreter where only the eight packages the check's machine has
are installed, with the wheels the script brings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEPS = 12
MACHINE_PACKAGES = ("torch", "transformers", "peft", "pyarrow", "pluggy", "click", "rich", "pyyaml")
"""What the check's machine has installed (with what they depend on), as issue 39 states it."""

NO_RAY = '''
import sys


class NoRay:
    """Refuse (and record) every import of ray: the device check's machine has no Ray."""

    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            sys.stderr.write(f"IMPORTED RAY: {name}\\n")
            raise ImportError(f"no ray on the device check's machine ({name})")
        return None


sys.meta_path.insert(0, NoRay())
'''


def _check_report(report: Path, out: str) -> None:
    data = json.loads(report.read_text())
    assert data["device"] == "cpu" and len(data["steps"]) == STEPS, out
    assert all(s["ok"] for s in data["steps"]) and "torch_cuda" in data, out
    assert "PASS  cpu vs device" in out and "PASS  fsdp learner of one" in out
    assert "gloo, fsdp" in out and "PASS  sft bf16" in out and "PASS  learner group of one" in out


@pytest.mark.slow  # 45 s: the whole check, every step's processes
def test_gpu_check_cpu_mode_passes_without_ray_and_writes_its_report(tmp_path: Path) -> None:
    """The whole check in a process where any import of ray fails and is recorded (a
    ``sitecustomize`` import hook): it passes and nothing asked for ray."""
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(NO_RAY)
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(guard), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--cpu", "--report", str(report)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "IMPORTED RAY" not in out, out
    _check_report(report, res.stdout)


RUN_STEPS = ("grpo_arith local", "quickstart ppo local", "two ranks on one device", "pytest -m gpu")


@pytest.mark.slow
@pytest.mark.extended  # 65 s on CI's 2 cores; CI runs the check's steps (--cpu) here and through gpu_check.sh
def test_gpu_check_end_to_end_steps_pass_on_the_cpu_without_ray(tmp_path: Path) -> None:
    """``--cpu --runs``: the end-to-end steps a GPU always runs (``rlinf train`` of grpo_arith
    and of the quickstart with the local scheduler, the two-rank probe, ``pytest -m gpu``) pass
    on the CPU, and neither the check nor the runs it starts import ray."""
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(NO_RAY)
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(guard), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--cpu", "--runs", "--report", str(report)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "IMPORTED RAY" not in out, out
    steps = json.loads(report.read_text())["steps"]
    assert len(steps) == STEPS + len(RUN_STEPS) and all(s["ok"] for s in steps), out
    assert [s["step"] for s in steps[STEPS:]] == list(RUN_STEPS)
    assert "gloo, two ranks on the CPU: broadcast ok; auto for members on one CPU: object_store" in res.stdout


def test_the_ray_guard_refuses_ray(tmp_path: Path) -> None:
    """The contrast: the same guard makes ``import ray`` fail (ray is installed here)."""
    (tmp_path / "sitecustomize.py").write_text(NO_RAY)
    res = subprocess.run(
        [sys.executable, "-c", "import ray"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=120,
        check=False,
    )
    assert res.returncode != 0 and "IMPORTED RAY: ray" in res.stderr


def locked_closure(names: tuple[str, ...]) -> list[str]:
    """``name==version`` of ``names`` and everything they depend on (extras included) as
    ``uv.lock`` pins it for this interpreter and platform."""
    from packaging.markers import Marker

    packages: dict[str, list[dict]] = {}
    for p in tomllib.loads((ROOT / "uv.lock").read_text())["package"]:
        packages.setdefault(p["name"], []).append(p)

    def applies(dep: dict) -> bool:
        return "marker" not in dep or Marker(dep["marker"]).evaluate({"extra": ""})

    seen: dict[str, str] = {}
    todo: list[dict] = [{"name": n} for n in names]
    while todo:
        dep = todo.pop()
        pkg = next(p for p in packages[dep["name"]] if dep.get("version", p["version"]) == p["version"])
        more = list(pkg.get("dependencies", [])) if pkg["name"] not in seen else []
        for extra in dep.get("extra", []):
            more += pkg.get("optional-dependencies", {}).get(extra, [])
        seen[pkg["name"]] = pkg["version"]
        todo += [d for d in more if applies(d)]
    return [f"{n}=={v}" for n, v in sorted(seen.items())]


@pytest.mark.slow
@pytest.mark.network
def test_gpu_check_sh_runs_on_the_eight_packages_with_its_wheels(tmp_path: Path) -> None:
    """``tools/gpu_check.sh --prepare`` writes the wheelhouse (workspace wheels built, the others
    downloaded at uv.lock's versions); then, in a fresh venv holding only the eight packages the
    check's machine has (and their dependencies, at uv.lock's versions), ``gpu_check.sh
    --cpu`` installs the wheelhouse into a ``--target`` folder and every step passes."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("needs uv")
    wheels, bare = tmp_path / "whl", tmp_path / "bare"
    env = {**os.environ, "RLINF_WHEELHOUSE": str(wheels)}
    env.pop("VIRTUAL_ENV", None)
    res = subprocess.run(
        [str(ROOT / "tools" / "gpu_check.sh"), "--prepare"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (wheels / "requirements.txt").is_file() and list(wheels.glob("rlinf_algos-*.whl"))
    offline = {**env, "UV_OFFLINE": "1"}
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(bare)], env=offline, check=True)
    python = bare / "bin" / "python"
    reqs = tmp_path / "machine.txt"
    reqs.write_text("\n".join(locked_closure(MACHINE_PACKAGES)) + "\n")
    # Not offline: ``uv sync`` installs from uv.lock's URLs and leaves no index pages in uv's
    # cache, and a pinned ``uv pip install`` reads the index even when the wheel is cached (the
    # wheels themselves come from the cache). The check below runs offline, as on its machine.
    res = subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), "--no-deps", "-r", str(reqs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    probe = "import importlib.util as u; print([m for m in ('ray', 'rlinf_algos', 'gymnasium', 'mujoco') if u.find_spec(m)])"
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.strip() == "[]"
    report = tmp_path / "report.json"
    # the venv has no pip (uv's venvs do not); uv's pip unpacks for that interpreter alike
    run_env = {**offline, "PYTHON": str(python), "PIP": f"{uv} pip", "UV_PYTHON": str(python)}
    res = subprocess.run(
        [str(ROOT / "tools" / "gpu_check.sh"), "--cpu", "--report", str(report)],
        capture_output=True,
        text=True,
        env=run_env,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    _check_report(report, res.stdout)

"""No code runs from a run directory: crafted pickles placed as a policy, a checkpoint and a
warm start are refused by every reader (``rlinf eval``, ``--resume``, the learner's restart,
``load_policy``, ``rlinf eval --warm-start``) with one line naming the file and ``rlinf convert``;
an earlier version's tensors-only ``.pt`` still loads; ``rlinf convert RUN --trust`` converts."""

from __future__ import annotations

import shutil
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from rlinf_algos import load_policy
from rlinf_algos.run_files import UnsafeStateFile, read_state
from rlinf_algos.rundir import load_checkpoint
from rlinf_algos.training import run_training

ROOT_CONFIG = {
    "algorithm": {"name": "ppo", "rollout_steps": 32, "update_epochs": 1, "minibatch_size": 64},
    "env": {"id": "InvertedPendulum-v5", "num_envs": 2},
    "model": {"hidden_sizes": [8, 8]},
    "runner": {
        "total_steps": 128,
        "log_interval": 64,
        "checkpoint_interval": 64,
        "scheduler": "local",
        "loggers": ["csv"],
    },
}


class Payload:
    """What a hostile file carries: unpickling it writes ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("no_pickle") / "run"
    run_training(ROOT_CONFIG, run_dir=run)
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst


def _crafted(tree: dict[str, Any], marker: Path, path: Path) -> None:
    torch.save({**tree, "extra": Payload(marker)}, path)


def _exit_code(res: Any) -> int:
    """The status the ``rlinf`` console script exits with (it maps an RlinfError to its code)."""
    return getattr(res.exception, "exit_code", res.exit_code) if res.exception else res.exit_code


def _one_line_refusal(res: Any, path: Path, marker: Path) -> None:
    assert _exit_code(res) == 2, (res.output, res.exception)
    text = str(res.exception)
    assert "\n" not in text and str(path) in text and "rlinf convert" in text and "--trust" in text, text
    assert "Traceback" not in res.output
    assert not marker.exists(), "the pickle's code ran"


def test_a_run_writes_no_pickle(trained: Path) -> None:
    files = [p for p in trained.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix == ".pt"]
    state_files = [p for p in files if p.suffix == ".safetensors"]
    assert {p.name for p in state_files} >= {"policy.safetensors", "step_0000000128.safetensors"}
    for p in state_files:  # no pickle protocol opcode at the start of any of them
        assert p.read_bytes()[:2] not in (b"\x80\x02", b"\x80\x04", b"PK")


def test_eval_refuses_a_crafted_policy(trained: Path, tmp_path: Path, host: Any, invoke: Any) -> None:
    run, marker = _copy(trained, tmp_path), tmp_path / "marker"
    tree = read_state(run / "policy.safetensors")
    (run / "policy.safetensors").unlink()
    _crafted(tree, marker, run / "policy.pt")
    _one_line_refusal(invoke(host, "eval", str(run), "-n", "1"), run / "policy.pt", marker)
    with pytest.raises(UnsafeStateFile):
        load_policy(run)
    assert not marker.exists()


@pytest.mark.slow
def test_the_console_script_exits_2_on_a_crafted_policy(
    trained: Path, tmp_path: Path, rlinf_script: Any
) -> None:
    run, marker = _copy(trained, tmp_path), tmp_path / "marker"
    _crafted(read_state(run / "policy.safetensors"), marker, run / "policy.pt")
    (run / "policy.safetensors").unlink()
    proc = rlinf_script("eval", str(run), timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "rlinf convert" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not marker.exists()


def test_resume_refuses_a_crafted_checkpoint(trained: Path, tmp_path: Path, host: Any, invoke: Any) -> None:
    run, marker = _copy(trained, tmp_path), tmp_path / "marker"
    newest = run / "checkpoints" / "step_0000000128.safetensors"
    tree = read_state(newest)
    newest.unlink()
    crafted = run / "checkpoints" / "step_0000000192.pt"  # the newest: tried first
    _crafted(tree, marker, crafted)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**ROOT_CONFIG, "runner": {**ROOT_CONFIG["runner"], "total_steps": 256}}))
    res = invoke(host, "train", str(cfg), "--resume", str(run), "--quiet")
    _one_line_refusal(res, crafted, marker)
    # the learner's restart reads checkpoints with the same function, and refuses the same way
    with pytest.raises(UnsafeStateFile, match="rlinf convert"):
        load_checkpoint(run, "ppo")
    assert not marker.exists()


def test_a_crafted_warm_start_is_refused(trained: Path, tmp_path: Path, host: Any, invoke: Any) -> None:
    run, marker = _copy(trained, tmp_path), tmp_path / "marker"
    _crafted(read_state(run / "policy.safetensors"), marker, run / "warm_start.pt")
    _one_line_refusal(
        invoke(host, "eval", str(run), "--warm-start", "-n", "1"), run / "warm_start.pt", marker
    )
    with pytest.raises(UnsafeStateFile):
        load_policy(run, warm_start=True)
    assert not marker.exists()


def test_legacy_tensors_only_files_still_load(trained: Path, tmp_path: Path, host: Any, invoke: Any) -> None:
    """An earlier version's run: the same trees as torch.save pickles (tensors, numpy arrays,
    tuples, plain data) load with weights_only=True: eval, resume and load_policy work."""
    run = _copy(trained, tmp_path)
    for p in [run / "policy.safetensors", *sorted((run / "checkpoints").glob("*.safetensors"))]:
        torch.save(read_state(p), p.with_suffix(".pt"))
        p.unlink()
    res = invoke(host, "eval", str(run), "-n", "1")
    assert res.exit_code == 0, (res.output, res.exception)
    assert load_policy(run).path == run / "policy.pt"
    path, state = load_checkpoint(run, "ppo")
    assert path.name == "step_0000000128.pt" and state["run"]["steps"] == 128
    summary = run_training(
        {**ROOT_CONFIG, "runner": {**ROOT_CONFIG["runner"], "total_steps": 192}}, run_dir=run, resume=True
    )
    assert summary["total_env_steps"] == 192
    assert (run / "checkpoints" / "step_0000000192.safetensors").is_file()  # new ones: safetensors


def test_convert_needs_trust_then_converts(trained: Path, tmp_path: Path, host: Any, invoke: Any) -> None:
    run, marker = _copy(trained, tmp_path), tmp_path / "marker"
    for p in [run / "policy.safetensors", *(run / "checkpoints").glob("*.safetensors")]:
        tree = read_state(p)
        tree["run"] = {**tree.get("run", {}), "window": deque([1.0, 2.0])}  # weights_only refuses a deque
        torch.save(tree, p.with_suffix(".pt"))
        p.unlink()
    res = invoke(host, "eval", str(run), "-n", "1")
    assert _exit_code(res) == 2 and "collections.deque" in str(res.exception), res.exception
    res = invoke(host, "convert", str(run))
    assert _exit_code(res) == 2 and "--trust" in str(res.exception) and "\n" not in str(res.exception)
    assert not list(run.rglob("*.safetensors"))
    res = invoke(host, "convert", str(run), "--trust")
    assert res.exit_code == 0, (res.output, res.exception)
    assert "converted" in res.output and "policy.safetensors" in res.output
    assert (run / "policy.safetensors").is_file() and (run / "policy.pt").is_file()  # the pickle is kept
    assert read_state(run / "policy.safetensors")["run"]["window"] == [1.0, 2.0]
    assert invoke(host, "eval", str(run), "-n", "1").exit_code == 0
    path, _ = load_checkpoint(run, "ppo")
    assert path.name == "step_0000000128.safetensors"
    res = invoke(host, "convert", str(run), "--trust")
    assert res.exit_code == 0 and "nothing to convert" in res.output
    assert not marker.exists()

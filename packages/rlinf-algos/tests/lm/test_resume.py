"""Language-model runs (``grpo_lm``, ``ppo_lm``) stop, checkpoint and resume like embodied runs:

- in process (``runner.scheduler: local``): a run stopped by SIGTERM after iteration k (sent from
  its metrics callback, a point the loop reports) and resumed with ``resume=True`` ends at the
  same iteration with each metrics row once and the same values as an uninterrupted run;
- a damaged newest checkpoint is skipped with a warning;
- through the ``rlinf`` console script: SIGTERM mid-run writes a checkpoint, ``metrics.csv``,
  ``summary.json`` and ``policy/`` and exits 143 within 20 s; ``rlinf plot`` and ``rlinf eval``
  work on the run directory and ``--resume`` finishes it (``slow``);
- ``--dry-run`` prints a configuration that runs as it is, and ``kl_coef: 0`` needs no reference.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinf_algos.config.prepare import dry_run
from rlinf_algos.config.validate import validate_run_config
from rlinf_algos.rundir import find_checkpoints, load_checkpoint, write_checkpoint
from rlinf_algos.training import TrainingInterrupted, run_training
from rlinf_core.config import load_yaml

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

TINY = (  # beside conftest's tiny_lm
    "algorithm.iterations=3",
    "algorithm.kl_coef=0.05",
    "runner.eval_interval=2",
    "runner.scheduler=local",
)

TIMING = {"wall_s", "tokens_per_s", "generate_s", "reward_s", "reference_s", "update_s", "sync_s"}
"""Columns that measure time: they differ between any two runs."""


def _config(tiny_lm: Any, extra: list[str] = ()) -> dict[str, Any]:
    return tiny_lm.config(*TINY, *extra)


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def _values(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def _stop_after(k: int) -> Any:
    """A metrics callback sending SIGTERM to this process once iteration ``k``'s row is out."""

    def progress(row: dict[str, Any]) -> None:
        if int(row["step"]) == k:
            os.kill(os.getpid(), signal.SIGTERM)

    return progress


@pytest.mark.slow  # three short runs: about 40 s of CPU
@pytest.mark.parametrize("extra", [[], ["model.lora.rank=4", "algorithm.lr=1e-3"]], ids=["full", "lora"])
def test_stopped_and_resumed_run_equals_an_uninterrupted_one(
    extra: list[str], tmp_path: Path, tiny_lm: Any
) -> None:
    data = _config(tiny_lm, extra)
    whole = run_training(data, run_dir=tmp_path / "whole")
    with pytest.raises(TrainingInterrupted) as stop:
        run_training(data, run_dir=tmp_path / "split", progress=_stop_after(1))
    split = tmp_path / "split"
    assert stop.value.checkpoint == split / "checkpoints" / "step_1"
    # what a stop writes: the checkpoint, the metrics so far, the policy and the summary
    assert [int(r["step"]) for r in _rows(split)] == [1]
    assert (split / "policy" / "config.json").is_file()
    stopped = json.loads((split / "summary.json").read_text())
    assert stopped["interrupted"] is True and stopped["iterations"] == 1

    resumed = run_training(data, run_dir=split, resume=True)
    assert resumed["iterations"] == whole["iterations"] == 3 and resumed["resumed_from_iteration"] == 1
    rows = _rows(split)
    assert [int(r["step"]) for r in rows] == [1, 2, 3]  # each iteration's row exactly once
    assert _values(rows) == _values(_rows(tmp_path / "whole"))
    jsonl = [json.loads(x)["iteration"] for x in (split / "metrics.jsonl").read_text().splitlines()]
    assert jsonl == [1, 2, 3]
    for key in ("accuracy_before", "accuracy_after", "val_score_after", "evals"):
        assert resumed[key] == whole[key], key
    assert [p.name for p in find_checkpoints(split)] == ["step_3", "step_1"]


@pytest.mark.slow
def test_ppo_lm_resumes_with_its_critic(tmp_path: Path, tiny_lm: Any) -> None:
    data = _config(tiny_lm, ["algorithm.name=ppo_lm", "algorithm.iterations=2", "runner.eval_interval=0"])
    whole = run_training(data, run_dir=tmp_path / "whole")
    with pytest.raises(TrainingInterrupted):
        run_training(data, run_dir=tmp_path / "split", progress=_stop_after(1))
    resumed = run_training(data, run_dir=tmp_path / "split", resume=True)
    assert resumed["iterations"] == 2
    assert _values(_rows(tmp_path / "split")) == _values(_rows(tmp_path / "whole"))
    assert resumed["accuracy_after"] == whole["accuracy_after"]


@pytest.mark.slow  # three short runs: about 40 s of CPU
def test_a_checkpoint_of_the_earlier_lm_runtime_still_resumes(tmp_path: Path, tiny_lm: Any) -> None:
    """A run stopped by the language-model runtime before the one driver kept its checkpoint in
    that runtime's shape: no ``run`` record, every metrics row in ``loop.rows``, the counters in
    ``faults``, and (killed before its end) no ``metrics.csv``. ``--resume`` continues it: each
    iteration's row once, with the values of an uninterrupted run."""
    data = _config(tiny_lm)
    whole = run_training(data, run_dir=tmp_path / "whole")
    split = tmp_path / "split"
    with pytest.raises(TrainingInterrupted):
        run_training(data, run_dir=split, progress=_stop_after(1))
    _, state = load_checkpoint(split, "grpo_lm")
    run = state.pop("run")
    state.pop("skipped_checkpoints")
    rows = [json.loads(x) for x in (split / "metrics.jsonl").read_text().splitlines()]
    loop = state["loop"]
    loop.pop("totals")
    loop["rows"] = [{k: v for k, v in r.items() if k != "step"} for r in rows]
    loop["wall_s"] = run["wall_s"]
    state["faults"] = {"restarts": 0, "dropped_batches": 0, "events": []}
    write_checkpoint(split, 1, state, layout="folder", keep=2)
    (split / "metrics.csv").unlink()
    (split / "metrics.jsonl").unlink()

    resumed = run_training(data, run_dir=split, resume=True)
    assert resumed["iterations"] == 3 and resumed["resumed_from_iteration"] == 1
    assert [int(r["step"]) for r in _rows(split)] == [1, 2, 3]
    assert _values(_rows(split)) == _values(_rows(tmp_path / "whole"))
    jsonl = [json.loads(x)["iteration"] for x in (split / "metrics.jsonl").read_text().splitlines()]
    assert jsonl == [1, 2, 3]
    assert resumed["accuracy_after"] == whole["accuracy_after"]


def test_a_damaged_newest_checkpoint_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import torch

    for step in (1, 2):
        write_checkpoint(
            tmp_path,
            step,
            {
                "algorithm": "grpo_lm",
                "actor": {"w": torch.full((3,), float(step))},
                "loop": {"iteration": step},
            },
            layout="folder",
            keep=2,
        )
    newest = tmp_path / "checkpoints" / "step_2" / "state.safetensors"
    newest.write_bytes(newest.read_bytes()[:40])  # cut short, as by a crash mid-copy
    (tmp_path / "checkpoints" / "step_3").mkdir()  # a folder whose state was never written
    with caplog.at_level(logging.WARNING, logger="rlinf.train"):
        folder, state = load_checkpoint(tmp_path, "grpo_lm")
    assert folder.name == "step_1" and state["loop"]["iteration"] == 1
    assert torch.equal(state["actor"]["w"], torch.full((3,), 1.0))
    assert [s.split(" ")[0] for s in state["skipped_checkpoints"]] == ["step_3", "step_2"]
    assert "step_2" in caplog.text and "step_3" in caplog.text
    with pytest.raises(Exception, match="'grpo_lm' checkpoint, not 'ppo_lm'"):
        load_checkpoint(tmp_path, "ppo_lm")


def test_dry_run_config_runs_as_it_is_and_kl_zero_needs_no_reference(host: Any, tmp_path: Path) -> None:
    out = dry_run(load_yaml(EXAMPLES / "grpo_arith.yaml"), host=host)
    text = yaml.safe_dump(out["config"], sort_keys=False)
    again = yaml.safe_load(text)
    assert "rollout" in again and set(again["rollout"]) == {
        "engine",
        "options",
        "weight_sync",
        "max_staleness",  # the one key both families bound their staleness with
    }  # no other embodied keys
    validate_run_config(again, host)  # accepted as it is
    assert dry_run(again, host=host)["config"] == out["config"]  # a fixed point

    data = load_yaml(EXAMPLES / "grpo_arith.yaml")
    data["cluster"]["component_placement"].pop("reference")
    data["algorithm"]["kl_coef"] = 0.0
    validate_run_config(data, host)  # no KL term: no reference needed
    data["algorithm"]["kl_coef"] = 0.05
    with pytest.raises(Exception, match="reference"):
        validate_run_config(data, host)


# -- through the console script --------------------------------------------------------------------


def _rlinf(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "rlinf"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
# on Ray: 5 minutes on CI's 2 cores (CI stops the local run; test_e2e_train stops a Ray run)
@pytest.mark.parametrize("scheduler", ["local", pytest.param("ray", marks=pytest.mark.extended)])
def test_sigterm_writes_everything_then_plot_eval_and_resume_work(
    scheduler: str, tmp_path: Path, tiny_lm: Any
) -> None:
    """SIGTERM once iteration 2's log line is out (a point the run reports): exit 143 within 20 s
    with a checkpoint, metrics.csv, summary.json and policy/; then plot, eval and --resume."""
    run_dir = tmp_path / "run"
    config = EXAMPLES / "grpo_arith.yaml"
    extra = [
        *tiny_lm(*TINY[:-1]),
        "runner.log_interval=1",
        "algorithm.iterations=40",
        f"runner.scheduler={scheduler}",
    ]
    exe = Path(sys.executable).parent / "rlinf"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(
        [str(exe), "train", str(config), "--run-dir", str(run_dir), "--quiet", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("iter    2"):
            break
    else:
        pytest.fail("the run ended before iteration 2:\n" + "".join(lines))
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    took = time.monotonic() - t0
    output = "".join(lines) + rest
    assert proc.returncode == 143, output
    assert took < 20.0, f"took {took:.1f} s to stop"
    assert "terminated (SIGTERM): wrote" in output and "before training started" not in output
    hint = shlex.join(["rlinf", "train", str(config), *extra, "--resume", str(run_dir)])
    assert f"continue with `{hint}`" in output  # with the overrides, which the resumed run needs
    summary = json.loads((run_dir / "summary.json").read_text())
    done = summary["iterations"]
    assert summary["interrupted"] is True and 2 <= done < 40
    assert (run_dir / "checkpoints" / f"step_{done}" / "state.safetensors").is_file()
    assert [int(r["step"]) for r in _rows(run_dir)] == list(range(1, done + 1))
    assert (run_dir / "policy" / "config.json").is_file()

    plot = _rlinf("plot", str(run_dir), cwd=tmp_path)
    assert plot.returncode == 0, plot.stderr
    assert (run_dir / "plots" / "reward.png").read_bytes()[:4] == b"\x89PNG"

    ev = _rlinf("eval", str(run_dir), "--json", "--samples", "2", "--seed", "3", cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr
    res = json.loads(ev.stdout)
    assert res["problems"] == 4 and res["samples"] == 2 and 0.0 <= res["pass_at_k"] <= 1.0
    assert res["accuracy"] <= res["pass_at_k"] and set(res["per_data_source"]) == {"arith"}
    again = _rlinf("eval", str(run_dir), "--json", "--samples", "2", "--seed", "3", cwd=tmp_path)
    assert json.loads(again.stdout) == res  # reproducible with --seed

    short = [*extra[:-1], "algorithm.iterations=" + str(done + 1), f"runner.scheduler={scheduler}"]
    resumed = _rlinf("train", str(config), *short, "--resume", str(run_dir), "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert [int(r["step"]) for r in _rows(run_dir)] == list(range(1, done + 2))
    assert json.loads((run_dir / "summary.json").read_text())["interrupted"] is False


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.extended  # 90 s on CI's 2 cores; CI stops and resumes the run itself
def test_a_warm_start_stopped_by_sigterm_continues_on_resume(tmp_path: Path, tiny_lm: Any) -> None:
    """SIGTERM during the warm start (once its step-100 line is out): the warm start writes its
    checkpoint and the run says how to continue; ``--resume`` (the run has no checkpoint of its
    own yet) starts the run again in place and the warm start goes on from its checkpoint, not
    from step 0, to its last step; the run then finishes."""
    run_dir = tmp_path / "run"
    config = EXAMPLES / "grpo_arith.yaml"
    extra = [*tiny_lm(*TINY), "sft.steps=400", "algorithm.iterations=1"]
    exe = Path(sys.executable).parent / "rlinf"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(
        [str(exe), "train", str(config), "--run-dir", str(run_dir), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("sft step 100/400"):
            break
    else:
        pytest.fail("the warm start ended before step 100:\n" + "".join(lines))
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=60)
    output = "".join(lines) + rest
    assert proc.returncode == 143, output
    hint = shlex.join(["rlinf", "train", str(config), *extra, "--resume", str(run_dir)])
    assert f"before training started (run directory {run_dir}); `{hint}` starts it again" in output
    (kept,) = (run_dir / "warm_start" / "checkpoints").iterdir()
    stopped_at = int(kept.name.split("_")[1])
    assert 100 <= stopped_at < 400

    resumed = _rlinf("train", str(config), *extra, "--resume", str(run_dir), cwd=tmp_path, timeout=600)
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out
    assert f"resuming from {run_dir / 'warm_start'} (step {stopped_at} of 400)" in out, out
    warm = json.loads((run_dir / "warm_start" / "summary.json").read_text())
    assert warm["steps"] == 400 and warm["interrupted"] is False
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] == 1 and summary["interrupted"] is False
    assert [int(r["step"]) for r in _rows(run_dir)] == [1]


def test_a_deferred_stop_ignores_a_handler_ray_left_behind() -> None:
    """ray.init installs a SIGTERM handler that exits at once and leaves it after ray.shutdown; a
    run in the same process (a notebook, a test session) must still stop cleanly on SIGTERM."""
    from rlinf_algos.runtime.stop import DeferredStop

    def rays_handler(signum: int, frame: Any) -> None:
        raise SystemExit(1)

    before = signal.signal(signal.SIGTERM, rays_handler)
    try:
        with DeferredStop() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # let the interpreter run the handler
            assert stop.requested and stop.reason == "SIGTERM"
        assert signal.getsignal(signal.SIGTERM) is rays_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_time_limit_counts_grpo_seconds_not_the_warm_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_lm: Any
) -> None:
    """``runner.time_limit_s`` bounds GRPO's iterations: a warm start that took longer than the
    limit (here made to look 10,000 s long by moving the run's clock while it prepares the models)
    still leaves the run its iterations. Before, the limit counted from the start of the run, so
    the arithmetic example under load stopped after 0 iterations."""
    import rlinf_algos.lm.run as lm_run

    real_clock = time.perf_counter
    jump = {"s": 0.0}

    class Clock:
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        @staticmethod
        def perf_counter() -> float:
            return real_clock() + jump["s"]

    import rlinf_algos.lm.trainer as trainer  # run.py imports prepare_models from it when it runs

    original = trainer.prepare_models

    def slow_prepare(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        jump["s"] += 10_000.0
        return out

    monkeypatch.setattr(lm_run, "time", Clock())
    monkeypatch.setattr(trainer, "prepare_models", slow_prepare)
    summary = run_training(_config(tiny_lm, ["runner.time_limit_s=1000"]), run_dir=tmp_path / "run")
    assert summary["iterations"] == 3 and not summary["stopped_early"]

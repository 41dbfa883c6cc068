"""Killed workers of the distributed language-model runner on a real embedded Ray: a killed
rollout worker and a killed reward worker are restarted and their partial batches dropped (the
counters in summary.json, each iteration's metrics row once); so is a killed reference worker,
which freezes the same weights again from the model folder.

Faults are injected where the runner reports (``on_generating``: a rollout rank took a request
of iteration k, with its pid), never after a sleep: at that point the reward and reference ranks
wait for their inputs of iteration k, so a kill of either lands inside the iteration."""

from __future__ import annotations

import csv
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.training import run_training

pytestmark = [pytest.mark.slow, pytest.mark.network]

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

TINY = (  # beside conftest's tiny_lm
    "algorithm.kl_coef=0.05",
    "runner.checkpoint_interval=0",
    "runner.scheduler=ray",
)


def config(tiny_lm: Any, *extra: str) -> dict[str, Any]:
    return tiny_lm.config(*TINY, *extra)


def test_killed_rollout_and_reward_workers_are_restarted_and_their_batches_dropped(
    ray_cluster: Any, tmp_path: Path, tiny_lm: Any
) -> None:
    victims = {2: "rollout", 3: "reward"}  # iteration -> the component killed in it
    killed: list[tuple[int, str, int]] = []
    seen: dict[str, Any] = {}

    def on_generating(comps: Any, it: int, report: dict[str, Any]) -> None:
        seen["comps"] = comps
        component = victims.get(it)
        if component is None or any(k == it for k, _, _ in killed):
            return
        pid = int(report["pid"]) if component == "rollout" else comps.pids["reward"][0]
        killed.append((it, component, pid))
        os.kill(pid, signal.SIGKILL)

    summary = run_training(
        config(tiny_lm, "algorithm.iterations=4", "runner.worker_timeout=300"),
        run_dir=tmp_path,
        callbacks={"on_generating": on_generating},
    )
    assert [(k, c) for k, c, _ in killed] == [(2, "rollout"), (3, "reward")]
    assert summary["restarts"] == 2 and summary["dropped_batches"] == 2, summary["events"]
    assert summary["learner_restarts"] == [] and summary["iterations"] == 4
    events = "\n".join(summary["events"])
    assert "restarted rollout rank(s) [0]" in events and "restarted reward rank(s) [0]" in events
    assert events.count("dropped its partial batch") == 2
    for _, component, pid in killed:  # the new processes replaced the killed ones
        assert f"{component} rank 0, pid {pid} failed" in events
        assert seen["comps"].pids[component][0] not in (0, pid)
    with (tmp_path / "metrics.csv").open() as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [1, 2, 3, 4]  # each row once


@pytest.mark.extended  # a Ray run with a fault: 1-2 minutes on CI's 2 cores; CI kills rollout and reward
def test_killed_reference_worker_is_restarted_with_the_frozen_weights(
    ray_cluster: Any, tmp_path: Path, tiny_lm: Any
) -> None:
    """SIGKILL on the reference in iteration 1: it is named (role, rank, pid), restarted in place
    from the model folder the actor loaded version 0 from, the partial batch is dropped, and the
    run finishes with every row once. Iteration 1 trains the version-0 policy against the
    restarted reference: their KL is 0 only if it froze the same weights again."""
    killed: list[int] = []

    def on_generating(comps: Any, it: int, report: dict[str, Any]) -> None:
        if it == 1 and not killed:
            killed.append(comps.pids["reference"][0])
            os.kill(killed[0], signal.SIGKILL)

    summary = run_training(
        config(tiny_lm, "algorithm.iterations=3", "runner.worker_timeout=300"),
        run_dir=tmp_path,
        callbacks={"on_generating": on_generating},
    )
    events = "\n".join(summary["events"])
    assert killed and f"reference rank 0, pid {killed[0]} failed in log_probs()" in events, events
    assert "its process died" in events and "restarted reference rank(s) [0]" in events, events
    assert summary["restarts"] == 1 and summary["dropped_batches"] == 1 and summary["iterations"] == 3
    with (tmp_path / "metrics.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [int(r["step"]) for r in table] == [1, 2, 3]  # each row once
    assert abs(float(table[0]["kl"])) < 1e-6, table[0]

"""Peers that die in the middle of a wait of an asynchronous language-model run
(``rollout.max_staleness: 1``, issue 51), on a real embedded Ray with the tiny ``grpo_arith``:

- a rollout worker killed while the learner broadcasts the new weights to it
  (``rollout.weight_sync: collective``, Gloo): the rollout rank is restarted, the partial batch
  dropped, the run goes on to its end with each metrics row once, and the first event naming the
  killed pid says the root cause first (the role, rank and pid, then what it was doing);
- a learner rank killed while the other rank waits for it in a collective (the actor on 2
  processes, ``actor.strategy: ddp``, Gloo): the death of the actor ends a language-model run (it
  is not restarted in place), within ``runner.worker_timeout``, with the killed rank (its pid)
  as the error's first line, and with each metrics row of the iterations before it once.

Both faults are staged as :mod:`tests.runtime.test_wait_faults` stages them for embodied PPO:
the victim is stopped (SIGSTOP) at a point the run reports, and killed (SIGKILL) a few seconds
later, while a peer waits for it. The rollout worker is stopped once the reward rank took the
episodes of iteration ``k`` (``on_scoring``): the actor then trains on them (an update of about a
second) and broadcasts the new weights, a broadcast that waits for the stopped worker until it
is killed (``sync_s`` of the rows shows it). The learner's rank 1 is stopped once a rollout rank
took a request of iteration ``k`` (``on_generating``): rank 0 waits for it in the next update's
collective."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.runtime.recovery import RunFailed
from rlinf_algos.training import run_training

pytestmark = [pytest.mark.slow, pytest.mark.extended, pytest.mark.network]  # 3-4 minutes each on 2 cores

TIMEOUT = 120.0  # runner.worker_timeout: the bound of every wait
SLACK_S = 60.0  # a restart starts a process that imports torch: slow on a loaded 2-core machine


SLOW_UPDATE = (  # an update of about a second: the rollout is stopped before its publish
    "model.init.hidden_size=64", "model.init.num_layers=2", "algorithm.prompts_per_iter=4",
    "algorithm.minibatch_size=2", "algorithm.update_epochs=8",
)  # fmt: skip


def rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_an_async_rollout_killed_mid_weight_sync_is_restarted_naming_it_first(
    ray_cluster: Any, tmp_path: Path, tiny_lm: Any, stop_then_kill: Any
) -> None:
    config = tiny_lm.config(
        "algorithm.iterations=6", "runner.scheduler=ray", "runner.checkpoint_interval=0",
        "rollout.max_staleness=1", "rollout.weight_sync=collective", f"runner.worker_timeout={TIMEOUT:g}",
        *SLOW_UPDATE,
    )  # fmt: skip
    # the reward took iteration 3's episodes: the actor trains on them next and then broadcasts
    # version 3, to a rollout worker that is stopped by then
    fault = stop_then_kill(3, lambda run: run.pids["rollout"][0])
    t0 = time.monotonic()
    summary = run_training(config, run_dir=tmp_path, callbacks={"on_scoring": fault.hook})
    ended = time.monotonic()
    fault.join()
    assert fault.killed_at is not None and t0 < fault.killed_at < ended
    assert summary["max_staleness"] == 1 and summary["weight_sync"]["mode"] == "collective"
    events = summary["events"]
    # restarted once, though each iteration in flight (at most max_staleness + 1 = 2) saw it die:
    # the one being generated dropped its partial batch; the one whose update waited in the
    # broadcast kept it (the actor had its whole batch) or dropped it too
    assert summary["restarts"] == 1 and 1 <= summary["dropped_batches"] <= 2, events
    assert events.count("restarted rollout rank(s) [0]") == 1, events
    assert len([e for e in events if "already restarted" in e]) <= 1, events
    assert summary["iterations"] == 6 and summary["learner_restarts"] == []
    # the root cause first, on one line: the killed worker, its pid, the call, that it died
    first = next(e for e in events if f"pid {fault.pid}" in e)
    assert first.startswith(f"rollout rank 0, pid {fault.pid} failed in serve() in iteration "), first
    assert first.endswith(": its process died") and "\n" not in first, first
    table = rows(tmp_path)
    assert [int(r["step"]) for r in table] == [1, 2, 3, 4, 5, 6]  # each row once
    # the broadcast of an update waited for the stopped worker (a publish of this model over
    # loopback takes milliseconds), until it was killed, not until the timeout
    assert 1.0 < max(float(r["sync_s"]) for r in table) < fault.stopped_s + 10.0, table
    assert ended - fault.killed_at < TIMEOUT + SLACK_S


def test_an_async_learner_rank_killed_mid_collective_ends_the_run_naming_it_first(
    ray_cluster: Any, tmp_path: Path, tiny_lm: Any, stop_then_kill: Any
) -> None:
    config = tiny_lm.config(
        "algorithm.iterations=8", "runner.scheduler=ray", "runner.checkpoint_interval=2",
        "rollout.max_staleness=1", "cluster.component_placement.actor.placement=0:0-1",
        "actor.strategy=ddp", f"runner.worker_timeout={TIMEOUT:g}",
    )  # fmt: skip
    fault = stop_then_kill(4, lambda run: run.pids["actor"][1])
    with pytest.raises(RunFailed) as info:
        run_training(config, run_dir=tmp_path, callbacks={"on_generating": fault.hook})
    ended = time.monotonic()
    fault.join()
    assert fault.killed_at is not None
    # the root cause first: the killed rank and its pid, not rank 0 (which exits because its peer
    # is gone) nor a later iteration that found the actor group shut down
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"actor rank 1, pid {fault.pid} failed in train() in iteration "), first
    assert ": its process died; it holds the policy" in first, first
    assert ended - fault.killed_at < TIMEOUT + SLACK_S
    steps = [int(r["step"]) for r in rows(tmp_path)]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 8  # each row once
    # the policy died with its rank, but summary.json still says how the run ended
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert summary["error"].startswith(f"actor rank 1, pid {fault.pid} failed in train() "), summary
    assert ". Writing policy/ failed too: " in first and first.endswith("; summary.json is written."), first

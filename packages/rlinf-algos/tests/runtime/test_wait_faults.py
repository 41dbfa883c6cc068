"""Peers that die in the middle of a wait, on a real embedded Ray with real MuJoCo envs: a rollout
worker killed while the learner broadcasts weights to it (``rollout.weight_sync: collective``,
Gloo), and a learner rank killed while the other rank waits for it in a collective (the actor on
2 processes, ``actor.strategy: ddp``, Gloo). Each run recovers as the runtime does (a restarted
rollout worker and a dropped batch; the learner group back from its newest checkpoint) within
``runner.worker_timeout``, and the event says the root cause first: the killed worker, its pid.

Both runs are asynchronous (``rollout.max_staleness: 1``, embodied PPO's default: the rollout of
iteration ``k + 1`` overlaps the update on ``k``); :mod:`tests.lm.test_async_faults` stages the
same two faults in an asynchronous language-model run. Both faults are staged the same way: the victim is stopped (SIGSTOP) where the runtime reports
that rollout rank 0 collects iteration ``k`` (``on_collecting``); while it is stopped the learner
finishes its update on ``k - 1`` and then waits for the victim (in the weight broadcast, or in the
collective that hands the other rank its batch), a wait that would last until the timeout; then
the victim is killed (SIGKILL). The publish's duration (``publish_s`` of the update) shows the
broadcast did wait for the stopped rollout worker."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.training import run_training

pytestmark = [pytest.mark.slow, pytest.mark.network]

TIMEOUT = 120.0  # runner.worker_timeout: the bound of every wait
SLACK_S = 60.0  # a restart starts a process that imports torch: slow on a loaded 2-core machine


@pytest.mark.extended  # 65 s on CI's 2 cores; CI kills a learner rank mid-collective
def test_a_rollout_worker_killed_mid_weight_sync_is_restarted_and_its_batch_dropped(
    placed_ppo: Any, ray_cluster: Any, tmp_path: Path, stop_then_kill: Any
) -> None:
    config = placed_ppo.config(6, worker_timeout=TIMEOUT, checkpoint_interval=0)
    config["rollout"]["weight_sync"] = "collective"  # a Gloo broadcast group: the publish waits for it
    config["rollout"]["max_staleness"] = 1  # asynchronous (the default, said here): k + 1 collects meanwhile
    fault = stop_then_kill(2, lambda run: run.pids["rollout"][0])
    summary = run_training(config, run_dir=tmp_path, callbacks=fault.callbacks())
    assert fault.killed_at is not None
    # the broadcast of the update on iteration 1 waited for the stopped worker until it was killed
    # (a broadcast of this MLP over loopback takes milliseconds), not until the timeout
    assert 1.0 < max(fault.publish_s) < fault.stopped_s + 10.0, fault.publish_s
    assert summary["restarts"] == 1 and summary["dropped_batches"] == 1, summary["events"]
    assert summary["total_env_steps"] == 6 * placed_ppo.batch and summary["learner_restarts"] == []
    # the first event of the fault says the root cause first, on one line: the killed worker
    first = next(e for e in summary["events"] if str(fault.pid) in e)
    assert first.startswith(f"rollout rank 0, pid {fault.pid}: collect(): the worker's process died; "), first
    assert "iteration 2: dropped its partial batch" in first and "\n" not in first, first
    assert (
        f"rollout rank 0, pid {fault.pid} failed in collect() in iteration 2: its process died"
        in summary["events"]
    )
    assert "restarted rollout rank(s) [0]" in "\n".join(summary["events"])
    assert fault.recovered_after() < TIMEOUT + SLACK_S
    assert placed_ppo.rows(tmp_path) == [placed_ppo.batch * i for i in range(1, 7)]  # each row once


def test_a_learner_rank_killed_mid_collective_restarts_the_group_naming_it(
    placed_ppo: Any, ray_cluster: Any, tmp_path: Path, stop_then_kill: Any
) -> None:
    config = placed_ppo.config(6, worker_timeout=TIMEOUT)
    config["cluster"]["component_placement"]["actor"]["placement"] = "0:0-1"
    config["actor"] = {"strategy": "ddp"}
    config["rollout"]["max_staleness"] = 1  # asynchronous (the default, said here)
    fault = stop_then_kill(4, lambda run: run.pids["actor"][1])
    pids: list[list[int]] = []
    callbacks = fault.callbacks()
    on_iteration = callbacks["on_iteration"]

    def record(run: Any, k: int) -> None:
        pids.append(list(run.pids["actor"]))
        on_iteration(run, k)

    summary = run_training(config, run_dir=tmp_path, callbacks={**callbacks, "on_iteration": record})
    assert fault.killed_at is not None and summary["learner_world_size"] == 2
    (event,) = summary["learner_restarts"]
    # the root cause first: the killed rank, not rank 0 that exited because its peer was gone
    assert event["reason"].startswith(f"actor rank 1, pid {fault.pid}: train(): "), event
    # back to the newest checkpoint (the steps since it are lost, and collected again)
    assert event["checkpoint"].endswith(f"step_{event['step'] - event['steps_lost']:010d}.safetensors"), event
    died = next(e for e in summary["events"] if e.startswith("the learner (actor worker) died"))
    assert f": actor rank 1, pid {fault.pid}: " in died.splitlines()[0], died
    assert fault.recovered_after() < TIMEOUT + SLACK_S
    assert not set(pids[0]) & set(pids[-1])  # both ranks are new processes
    assert summary["total_env_steps"] == 6 * placed_ppo.batch
    assert placed_ppo.rows(tmp_path) == [placed_ppo.batch * i for i in range(1, 7)]  # each row once


@pytest.mark.extended  # a Ray run with a fault: 1-2 minutes on CI's 2 cores; CI kills one mid-collective
def test_a_stopped_rollout_worker_is_named_and_replaced_within_its_bound(
    placed_ppo: Any, ray_cluster: Any, tmp_path: Path
) -> None:
    """A rollout worker that stops answering (SIGSTOP, never killed): the env worker's wait for
    its actions ends after ``runner.worker_timeout``, and the driver, once it ended the
    iteration, waits for the stopped call ``runner.worker_timeout`` more, then names it and
    restarts it (its process killed): a bounded wait, never a hang."""
    timeout = 25.0  # every call of the run is bounded by it: a quiet machine needs a few seconds
    config = placed_ppo.config(6, checkpoint_interval=0, worker_timeout=timeout)
    stopped: dict[str, Any] = {}

    def on_collecting(run: Any, k: int) -> None:
        if k == 2 and not stopped:
            stopped["pid"] = run.pids["rollout"][0]
            stopped["at"] = time.monotonic()
            os.kill(stopped["pid"], signal.SIGSTOP)

    iterations: list[tuple[float, int]] = []
    summary = run_training(
        config,
        run_dir=tmp_path,
        callbacks={
            "on_collecting": on_collecting,
            "on_iteration": lambda run, k: iterations.append((time.monotonic(), k)),
        },
    )
    pid = stopped["pid"]
    first = next(e for e in summary["events"] if str(pid) in e)
    assert first.startswith(
        f"rollout rank 0, pid {pid}: collect(): it did not return within {timeout:g} s (runner.worker_timeout)"
    ), first
    assert summary["restarts"] == 1 and summary["dropped_batches"] == 1, summary["events"]
    recovered = next(t for t, _ in iterations if t > stopped["at"]) - stopped["at"]
    assert timeout < recovered < 2 * timeout + SLACK_S  # the env worker's wait, then the driver's
    assert placed_ppo.rows(tmp_path) == [placed_ppo.batch * i for i in range(1, 7)]

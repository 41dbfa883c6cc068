"""The driver's wait on an iteration's calls (``Recovery.gather``) is bounded once the iteration
is ended: a call that does not return within ``runner.worker_timeout`` after that is named (role,
rank, pid, the call, the seconds) and handled as a dead worker, never waited for without end."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from rlinf_algos.runtime.recovery import Recovery, WorkerHung, failure_reason, worker_died


class Call:
    """A worker call as the driver awaits it (a group call's ``method`` and ``__await__``)."""

    def __init__(self, method: str, result: Any = None, after: float = 0.0) -> None:
        self.method, self.result, self.after = method, result, after

    def __await__(self) -> Any:
        return self._run().__await__()

    async def _run(self) -> list[Any]:
        if self.result is None:
            await asyncio.Event().wait()  # a worker that never answers (stopped, stuck)
        await asyncio.sleep(self.after)
        return [self.result]


class Driver(Recovery):
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.pids = {"rollout": [4242], "env": [4243]}
        self.aborts = 0


def test_a_call_that_does_not_return_after_the_iteration_ended_is_named_within_the_timeout() -> None:
    driver = Driver(timeout=0.5)
    calls = {
        ("env", 0): Call("run", {"aborted": True, "error": "waited for the actions"}, after=0.1),
        ("rollout", 0): Call("collect"),  # never returns
    }

    def abort() -> None:
        driver.aborts += 1

    t0 = time.monotonic()
    results, dead, fatal, learner = asyncio.run(driver.gather(calls, abort=abort))
    took = time.monotonic() - t0
    assert driver.aborts == 1 and not fatal and learner is None
    assert results == {("env", 0): {"aborted": True, "error": "waited for the actions"}}
    err = dead[("rollout", 0)]
    assert isinstance(err, WorkerHung) and worker_died(err, "rollout")
    assert 0.5 <= took < 5.0  # the bound after the abort, not forever
    assert str(err).startswith(
        "rollout rank 0, pid 4242: collect(): it did not return within 0.5 s (runner.worker_timeout)"
    )
    assert failure_reason(err) == str(err)


def test_calls_that_return_in_time_are_not_bounded_before_an_abort() -> None:
    driver = Driver(timeout=0.2)
    calls = {("env", 0): Call("run", {"steps": 4}, after=0.4), ("rollout", 0): Call("collect", {"steps": 4})}
    results, dead, fatal, _ = asyncio.run(driver.gather(calls, abort=lambda: None))
    assert results == {("env", 0): {"steps": 4}, ("rollout", 0): {"steps": 4}} and not dead and not fatal


class Group:
    """A role's workers as ``Recovery.replace`` restarts them: each restart takes ``seconds``
    and gives the rank a new process id."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.restarts, self.next_pid = seconds, 0, 5000

    def restart(self, ranks: list[int], timeout: float) -> None:
        time.sleep(self.seconds)
        self.restarts += 1
        self.next_pid += 1


class Flow:
    roles = {"rollout": "in_place", "actor": "never"}
    holds = {"actor": "the policy and its optimiser state"}
    final_checkpoint = False

    def after_restart(self, role: str, ranks: list[int], configure: bool) -> None:
        return None


class Restarting(Driver):
    def __init__(self) -> None:
        super().__init__(timeout=5.0)
        self.groups = {"rollout": Group(0.3)}
        self.flow_run, self.events, self.restarts = Flow(), [], 0
        self.runner = type("Runner", (), {"max_restarts": 10, "checkpoint_interval": 0})()
        self.flow, self.run_dir = Flow(), Path("no-such-run-dir")

    def note_pids(self, role: str, ranks: list[int] | None = None) -> None:
        self.pids[role][0] = self.groups[role].next_pid

    def log(self, message: str) -> None:
        self.events.append(message)


def test_a_death_two_iterations_in_flight_report_restarts_the_rank_once() -> None:
    """An asynchronous run has two iterations in flight; both watched the rollout rank that died
    and both hand its death to ``replace_dead`` at once: the rank is restarted once (a second
    restart killed the first's new process in its start and ended the run), counted once, and
    the second report says it was restarted already, naming the dead process, not the new one."""
    import threading

    from rlinf_scheduler.runtime.worker_group import WorkerError

    driver = Restarting()
    err = WorkerError(component="rollout", rank=0, node_rank=0, node_ip="127.0.0.1", method="serve",
                      error_type="WorkerDied", summary="the worker's process died", pid=4242)  # fmt: skip
    threads = [
        threading.Thread(target=driver.replace_dead, args=({("rollout", 0): err}, f"in iteration {k}"))
        for k in (3, 4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10.0)
    assert driver.groups["rollout"].restarts == 1 and driver.restarts == 1, driver.events
    assert driver.pids["rollout"] == [5001]
    dead = [e for e in driver.events if "failed in serve()" in e]
    assert len(dead) == 2 and all(
        e.startswith("rollout rank 0, pid 4242 failed in serve() in iteration") for e in dead
    )
    assert dead[1].endswith("its process died; already restarted (now pid 5001)"), dead
    assert driver.events.count("restarted rollout rank(s) [0]") == 1


def test_a_learner_rank_that_died_in_a_group_call_is_named_not_rank_0() -> None:
    """The language-model actor's ``train`` is one call on its group (keyed by rank 0); its error
    names the rank that died (rank 1). The run ends naming rank 1 and its pid first, not rank 0
    (alive, another pid), and is not taken for a rank restarted already."""
    import pytest

    from rlinf_algos.runtime.recovery import RunFailed
    from rlinf_scheduler.runtime.worker_group import WorkerError

    driver = Restarting()
    driver.pids["actor"] = [6085, 6179]
    err = WorkerError(component="actor", rank=1, node_rank=0, node_ip="127.0.0.1", method="train",
                      error_type="WorkerDied", summary="the worker's process died", pid=6179)  # fmt: skip
    with pytest.raises(RunFailed) as info:
        driver.replace_dead({("actor", 0): err}, "in iteration 4")
    assert str(info.value).startswith(
        "actor rank 1, pid 6179 failed in train() in iteration 4: its process died; it holds the policy"
    ), str(info.value)


def test_a_rank_found_dead_between_iterations_is_named_before_its_restart() -> None:
    """A call between iterations (a checkpoint's ``rng_state``) finds a rollout rank dead: the
    first event names it (rank, pid, the call), then its restart; the call is made again."""
    from rlinf_scheduler.runtime.worker_group import WorkerError

    driver = Restarting()
    tries: list[int] = []

    def call() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise WorkerError(component="rollout", rank=0, node_rank=0, node_ip="127.0.0.1", method="rng_state",
                              error_type="WorkerDied", summary="the worker's process died", pid=4242)  # fmt: skip
        return "state"

    assert driver.with_restarts("rollout", call) == "state" and len(tries) == 2
    assert driver.events == [
        "rollout rank 0, pid 4242 failed in rng_state() between iterations: its process died",
        "restarted rollout rank(s) [0]",
    ]
    assert driver.restarts == 1 and driver.pids["rollout"] == [5001]

"""The driver's wait on an iteration's calls (``Recovery.gather``) is bounded once the iteration
is ended: a call that does not return within ``runner.worker_timeout`` after that is named (role,
rank, pid, the call, the seconds) and handled as a dead worker, never waited for without end."""

from __future__ import annotations

import asyncio
import time
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

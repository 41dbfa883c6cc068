"""RateKeeper: fixed rate, deadline accounting, never a negative sleep."""

from __future__ import annotations

import pytest

from rlinf_hw_franka.control import RateKeeper


class FakeClock:
    """A manual clock: time moves only when the test (work) or sleep() moves it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_sleeps_to_the_deadline_and_counts_overruns() -> None:
    clk = FakeClock()
    rk = RateKeeper(10, clock=clk, sleep=clk.sleep)
    clk.now += 0.03  # 30 ms of work in a 100 ms period
    assert rk.wait() is False
    assert clk.sleeps == [pytest.approx(0.07)]
    assert rk.stats.last_period_s == pytest.approx(0.1)
    assert rk.stats.last_error_s == pytest.approx(0.0)
    clk.now += 0.25  # overrun by 150 ms
    assert rk.wait() is True
    assert len(clk.sleeps) == 1  # no negative (or zero) sleep
    assert rk.stats.overruns == 1
    assert rk.stats.max_overrun_s == pytest.approx(0.15)
    assert rk.stats.last_error_s == pytest.approx(0.15)
    # re-anchored: the next period is a full one from the end of the late one, no catch-up burst
    clk.now += 0.01
    assert rk.wait() is False
    assert clk.sleeps[-1] == pytest.approx(0.09)
    assert rk.stats.periods == 3
    rk.reset()
    assert rk.stats.overruns == 0 and rk.stats.periods == 0


def test_schedule_does_not_drift() -> None:
    clk = FakeClock()
    rk = RateKeeper(
        50, clock=clk, sleep=lambda s: (clk.sleeps.append(s), setattr(clk, "now", clk.now + s + 0.001))
    )
    start = clk.now
    for _ in range(10):
        clk.now += 0.005
        rk.wait()
    # Each sleep overshoots by 1 ms, yet deadlines stay on the 20 ms grid (the next sleep is shorter).
    assert clk.now == pytest.approx(start + 10 * 0.02 + 0.001)
    assert rk.stats.overruns == 0


def test_without_realtime_nothing_sleeps_but_work_is_accounted() -> None:
    clk = FakeClock()
    rk = RateKeeper(10, realtime=False, clock=clk, sleep=clk.sleep)
    clk.now += 0.02
    assert rk.wait() is False
    clk.now += 0.5  # slower than real time
    assert rk.wait() is True
    assert clk.sleeps == []
    assert rk.stats.last_work_s == pytest.approx(0.5) and rk.stats.overruns == 1


def test_real_clock_never_sleeps_negative(monkeypatch) -> None:
    import time

    seen: list[float] = []
    real_sleep = time.sleep

    def spy(s: float) -> None:
        seen.append(s)
        real_sleep(s)

    rk = RateKeeper(200, sleep=spy)
    for i in range(20):
        if i % 5 == 0:
            real_sleep(0.01)  # a slow step (2x the period)
        rk.wait()
    assert all(s > 0 for s in seen)
    assert rk.stats.overruns >= 4


def test_invalid_rate() -> None:
    with pytest.raises(ValueError, match="positive"):
        RateKeeper(0)

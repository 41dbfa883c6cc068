"""A fixed control rate with deadline accounting.

:class:`RateKeeper` holds a loop to ``hz``: :meth:`RateKeeper.wait` sleeps until the next
deadline (never a negative time) and records how late each period ended. A period whose work
ran past its deadline is an *overrun*: it is counted, the schedule is re-anchored at "now" (the
loop does not try to catch up with a burst of short periods, which would jerk a robot), and the
next deadline is one period later.

With ``realtime=False`` (simulation during training) nothing sleeps; the keeper still measures
how long each step's work took against the period, so an overrun there means "slower than real
time".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RateKeeper", "RateStats"]


@dataclass
class RateStats:
    """Counters of a :class:`RateKeeper` since its last :meth:`RateKeeper.reset`."""

    periods: int = 0
    overruns: int = 0
    last_period_s: float = 0.0
    last_work_s: float = 0.0
    last_error_s: float = 0.0  # actual period minus nominal period (realtime) or 0
    max_overrun_s: float = 0.0


class RateKeeper:
    """Pace a loop at ``hz``.

    Parameters:
        hz: the control rate.
        realtime: sleep to hold the rate (``True``) or only account (``False``).
        clock, sleep: injectable for tests; default ``time.perf_counter`` / ``time.sleep``.
    """

    def __init__(
        self,
        hz: float,
        *,
        realtime: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not hz > 0:
            raise ValueError(f"control rate must be positive, got {hz!r} Hz")
        self.hz = float(hz)
        self.period = 1.0 / self.hz
        self.realtime = realtime
        self._clock = clock
        self._sleep = sleep
        self.stats = RateStats()
        self._start = self._clock()
        self._deadline = self._start + self.period

    def reset(self) -> None:
        """Start a new schedule now (after a reset of the env, a pause...) and zero the stats."""
        self.stats = RateStats()
        self._start = self._clock()
        self._deadline = self._start + self.period

    def wait(self) -> bool:
        """End the current period: sleep until its deadline (if ``realtime``) and start the next.

        Returns ``True`` if the period overran (its work ended after the deadline).
        """
        now = self._clock()
        work = now - self._start
        st = self.stats
        st.periods += 1
        st.last_work_s = work
        overran = now > self._deadline
        if overran:
            st.overruns += 1
            st.max_overrun_s = max(st.max_overrun_s, now - self._deadline)
        if self.realtime:
            remaining = self._deadline - now
            if remaining > 0:  # never a negative sleep
                self._sleep(remaining)
            end = self._clock()
            st.last_period_s = end - self._start
            st.last_error_s = st.last_period_s - self.period
            # Keep the drift-free schedule (deadline + period), except after an overrun, which
            # re-anchors it at the end of the late period instead of catching up.
            self._start = end
            self._deadline = (end if overran else self._deadline) + self.period
        else:
            st.last_period_s = work
            st.last_error_s = 0.0
            self._start = now
            self._deadline = now + self.period
        return overran

"""The engine's step clock: when its current step started and how long its steps take, for the
dispatcher's realtime placement (scheduler/policies/rt_start.py picks the worker whose step in
flight ends first).

The engine calls ``tick(now, busy)`` at the end of every step (vLLM: each time its stat logger
receives a step's SchedulerStats). Between ticks the dispatcher extrapolates whole steps from
the last published clock, so a new clock is published only when that extrapolation has drifted
more than ``tolerance_s`` from the real step ends, the period changed by over 10%, or the
engine went idle or woke: a steady decode run costs a handful of Redis writes, not one a step.
"""

from __future__ import annotations

from collections.abc import Callable


class StepClock:
    def __init__(
        self, tolerance_s: float = 0.002, smoothing: float = 0.2, max_gap_s: float = 2.0
    ) -> None:
        self.tolerance_s = tolerance_s
        self.smoothing = smoothing  # weight of the newest step in the period's running mean
        self.max_gap_s = max_gap_s  # a longer gap between ticks was idle time, not a step
        self.period_s = 0.0
        self.published: tuple[float | None, float] = (None, 0.0)  # (started_at, step_s)
        self.on_change: Callable[[], None] | None = None
        self._last: float | None = None

    def tick(self, now: float, busy: bool) -> None:
        """A step ended at ``now``; ``busy``: the engine still has requests (another step
        starts now)."""
        last, self._last = self._last, (now if busy else None)
        if not busy:
            if self.published[0] is not None:
                self._publish(None, 0.0)
            return
        if last is not None and now - last <= self.max_gap_s:
            gap = now - last
            self.period_s = gap if self.period_s <= 0 else (
                (1 - self.smoothing) * self.period_s + self.smoothing * gap
            )
        if self.period_s <= 0:
            return
        started, step = self.published
        if started is None or abs(self.period_s - step) > 0.1 * step:
            self._publish(now, self.period_s)
            return
        phase = (now - started) % step
        if min(phase, step - phase) > self.tolerance_s:
            self._publish(now, self.period_s)

    def _publish(self, started: float | None, step_s: float) -> None:
        self.published = (started, step_s)
        if self.on_change is not None:
            self.on_change()

"""How long a realtime request arriving now will spend in this API process before its job
exists: part of its wait that the dispatcher's outlook cannot see.

In a burst of hundreds of simultaneous streams the API's own event loop is the first queue:
each request waits its turn to be parsed, authenticated, judged and inserted, and that time
counts in its time to first token at the client. Two parts, added up:

- before the app sees it: the event loop's lag (``LoopLag``: how late a 10 ms tick wakes),
  the time a request that has arrived waits for the loop to start its handling;
- from then until its job is stored: the door (service.api.door) reports each stored
  request's arrival -> stored time, a time-decayed moving average of which follows a burst
  within a few requests.

Both fall back to nothing once the API has been quiet for a few half-lives (an old burst must
not refuse requests on a calm API).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator

# Weight of each new observation: a burst of a few dozen requests moves the estimate most of
# the way; one slow request does not.
ALPHA = 0.2
# With no new observation the estimate halves every HALF_LIFE_S.
HALF_LIFE_S = 1.0


TICK_S = 0.01
# Requests in the door at once that make a burst: a refusal may then be judged on an aged
# outlook (service.api.slo_gate) rather than wait on a read behind the whole burst.
BURST_JUDGING = 8


class LoopLag:
    """How late the event loop runs a callback that is due now: a ticker task measures its
    own lateness every TICK_S (a moving average; the latest reading counts at once when it
    is larger, so the onset of a burst shows in one tick)."""

    def __init__(self, tick_s: float = TICK_S, alpha: float = ALPHA) -> None:
        self.tick_s = tick_s
        self._alpha = alpha
        self._lag_s = 0.0
        self._task: asyncio.Task[None] | None = None

    def lag_s(self) -> float:
        return self._lag_s

    def observe(self, late_s: float) -> None:
        late_s = max(0.0, late_s)
        self._lag_s = max(late_s, (1 - self._alpha) * self._lag_s + self._alpha * late_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._tick(),
                                                                name="fairway-loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _tick(self) -> None:
        while True:
            due = time.perf_counter() + self.tick_s
            await asyncio.sleep(self.tick_s)
            self.observe(time.perf_counter() - due)


class ApiBacklog:
    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 alpha: float = ALPHA, half_life_s: float = HALF_LIFE_S,
                 loop_lag: LoopLag | None = None) -> None:
        self._clock = clock
        self._alpha = alpha
        self._half_life_s = half_life_s
        self._estimate_s = 0.0
        self._at = clock()
        # Unstarted (reads 0) unless the app starts it: a gate without a running loop, in a
        # test or a bench, sees only the stored requests' times.
        self.loop_lag = loop_lag or LoopLag()
        self.judging = 0  # requests in the door now (``in_door``)

    @contextlib.contextmanager
    def in_door(self) -> Iterator[None]:
        """Count a request while the door judges it (``judging``)."""
        self.judging += 1
        try:
            yield
        finally:
            self.judging -= 1

    def bursting(self) -> bool:
        """Whether this process is in a burst: BURST_JUDGING requests in the door at once."""
        return self.judging >= BURST_JUDGING

    def stored(self, arrived_at: float | None) -> None:
        """A request that arrived at ``arrived_at`` (a ``time.perf_counter()`` reading) has
        its job stored now."""
        if arrived_at is None:
            return
        now = self._clock()
        observed = max(0.0, now - arrived_at)
        self._estimate_s = (1 - self._alpha) * self._decayed(now) + self._alpha * observed
        self._at = now

    def delay_s(self) -> float:
        """The expected time before a request arriving now has its job stored: the loop's
        lag before its handling starts, and its handling up to the insert."""
        return self.loop_lag.lag_s() + self._decayed(self._clock())

    def _decayed(self, now: float) -> float:
        quiet = max(0.0, now - self._at)
        return self._estimate_s * float(0.5 ** (quiet / self._half_life_s))

"""How long a realtime request arriving now will spend in this API process before its job
exists: part of its wait that the dispatcher's outlook cannot see.

In a burst of hundreds of simultaneous streams the API's own event loop is the first queue:
each request waits its turn to be parsed, authenticated, judged and inserted, and that time
counts in its time to first token at the client. The door (service.api.door) reports each
stored request's arrival -> stored time here; the estimate is a time-decayed moving average
of them, so it follows a burst within a few requests and falls back to nothing once the API
has been quiet for a few half-lives (an old burst must not refuse requests on a calm API).
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Weight of each new observation: a burst of a few dozen requests moves the estimate most of
# the way; one slow request does not.
ALPHA = 0.2
# With no new observation the estimate halves every HALF_LIFE_S.
HALF_LIFE_S = 1.0


class ApiBacklog:
    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 alpha: float = ALPHA, half_life_s: float = HALF_LIFE_S) -> None:
        self._clock = clock
        self._alpha = alpha
        self._half_life_s = half_life_s
        self._estimate_s = 0.0
        self._at = clock()

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
        """The expected arrival -> stored time of a request arriving now."""
        return self._decayed(self._clock())

    def _decayed(self, now: float) -> float:
        quiet = max(0.0, now - self._at)
        return self._estimate_s * float(0.5 ** (quiet / self._half_life_s))

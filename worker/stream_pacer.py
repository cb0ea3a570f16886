"""How often a job's text goes to its stream: every token for realtime, merged for batch class.

A batch-class stream (flex) has no latency goal past its first token, and every entry costs
a Redis write here, a wake-up and an SSE write in the API that relays it: CPU taken from an
engine that shares the host. So its first text goes at once (its TTFT), and later text waits
until ``interval_s`` has passed since the last entry sent, merged into one entry. Nothing is
held past the attempt: its end (a finish or a park) sends what is held first. An attempt
that fails ends its stream with the error, and the text held then is not sent.
"""

from __future__ import annotations

from service.store.job_stream import Delta, followed_by


class StreamPacer:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s  # 0: every delta at once
        self._held: Delta | None = None
        self._sent_at: float | None = None

    def add(self, delta: Delta, now: float) -> Delta | None:
        """The entry to send now (``delta``, with what was held before it), or None: held."""
        if self._held is not None:
            delta = followed_by(self._held, delta)
        if self._sent_at is not None and now - self._sent_at < self.interval_s:
            self._held = delta
            return None
        self._held, self._sent_at = None, now
        return delta

    def flush(self) -> Delta | None:
        """What is held, to send before the attempt's end; None if nothing is."""
        held, self._held = self._held, None
        return held

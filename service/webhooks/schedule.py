"""When a failed delivery is tried again: capped exponential backoff with jitter, within the
retry window that starts at the event. Pure: the clock and the random draw are arguments."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable

from service.store.settings import WebhookSettings

JITTER = 0.2  # each wait is drawn from +-20% of the nominal one, so retries do not stampede


def retry_delay(failures: int, *, base_s: float, max_s: float,
                draw: Callable[[], float] = random.random) -> float:
    """Seconds to wait after the ``failures``-th failed attempt (1, 2, ...): ``base * 2**(n-1)``
    capped at ``max_s``, times a factor in [1 - JITTER, 1 + JITTER), never above ``max_s``."""
    if failures < 1:
        raise ValueError("failures counts from 1")
    nominal = min(max_s, base_s * 2.0 ** min(failures - 1, 60))
    return min(max_s, nominal * (1 - JITTER + 2 * JITTER * draw()))


def next_attempt_at(*, failures: int, now: dt.datetime, event_at: dt.datetime,
                    settings: WebhookSettings,
                    draw: Callable[[], float] = random.random) -> dt.datetime | None:
    """When to try again after ``failures`` failed attempts, or None: the retry window (from
    the event) would be over by then, and the delivery has failed."""
    wait = retry_delay(failures, base_s=settings.backoff_base_seconds,
                       max_s=settings.backoff_max_seconds, draw=draw)
    at = now + dt.timedelta(seconds=wait)
    if at > event_at + dt.timedelta(seconds=settings.retry_window_seconds):
        return None
    return at


def nominal_schedule(settings: WebhookSettings) -> list[float]:
    """The attempts' nominal times (seconds after the event, no jitter) within the window:
    what docs/webhooks.md tabulates."""
    times, at, failures = [0.0], 0.0, 1
    while True:
        at += min(settings.backoff_max_seconds,
                  settings.backoff_base_seconds * 2.0 ** min(failures - 1, 60))
        if at > settings.retry_window_seconds:
            return times
        times.append(at)
        failures += 1

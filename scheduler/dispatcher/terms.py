"""The dispatcher process's outer loop: terms as leader, one after another, with a backoff
after each that ended in an error. A Postgres or Redis outage ends a term, never the process;
the next term starts by itself when the dependency is back."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from tenacity import RetryCallState, RetryError, Retrying, stop_when_event_set

from service.store.outages import Dependencies, is_outage, outage_backoff


def run_terms(lead: Callable[[threading.Event], None], stop: threading.Event,
              deps: Dependencies, log: logging.Logger) -> None:
    """Call ``lead(stop)`` until ``stop`` is set. A term that returns (stood down) is followed
    at once by the next; one that raised is followed after a backoff (0.2 s doubling to 5 s)."""

    def note(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is None:
            return
        if is_outage(exc):
            deps.failed(exc)  # logged once per outage, not per try
        else:
            log.error("dispatcher term failed; starting another", exc_info=exc)

    def pause(seconds: float) -> None:
        stop.wait(seconds)  # wakes at once on stop

    while not stop.is_set():
        try:
            for attempt in Retrying(wait=outage_backoff, stop=stop_when_event_set(stop),
                                    sleep=pause, before_sleep=note):
                with attempt:
                    lead(stop)
        except RetryError:
            return  # stopped while backing off

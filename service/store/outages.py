"""Telling a dependency's outage from a bug, and living through it.

Postgres or Redis being away (refused, reset, timed out, restarting) is an outage: every
long-running loop catches it, backs off, and carries on by itself once the dependency is back.
Anything else is a bug and is logged as one. ``DependencyState`` logs an outage once when it
starts and once when it ends (never per retry) and exports ``fairway_dependency_up``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

from service.store.telemetry import metrics as m

POSTGRES, REDIS = "postgres", "redis"
T = TypeVar("T")

# The delay before the next try, by try number: 0.2 s, 0.4 s, ... capped at 5 s, with jitter.
outage_backoff = wait_exponential_jitter(initial=0.2, max=5.0, jitter=0.2)


def dependency_of(exc: BaseException) -> str | None:
    """"postgres" or "redis" when ``exc`` says that dependency is unreachable, else None."""
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated or isinstance(exc.orig, psycopg.OperationalError
                                                     | psycopg.InterfaceError):
            return POSTGRES
        return None
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return POSTGRES
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | KombuOperationalError):
        return REDIS  # kombu's errors here are the Redis broker's connection failing
    return None


def is_outage(exc: BaseException) -> bool:
    return dependency_of(exc) is not None


class DependencyState:
    """One process's view of one dependency: up, or down since when."""

    def __init__(self, name: str, log: logging.Logger) -> None:
        self.name = name
        self.log = log
        self.down_since: float | None = None
        m.DEPENDENCY_UP.labels(name).set(1)

    @property
    def up(self) -> bool:
        return self.down_since is None

    def failed(self, exc: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            m.DEPENDENCY_UP.labels(self.name).set(0)
            self.log.warning("%s unavailable (%s); retrying until it is back", self.name,
                             _short(exc))

    def ok(self) -> None:
        if self.down_since is not None:
            self.log.warning("%s back after %.1f s", self.name,
                             time.monotonic() - self.down_since)
            self.down_since = None
            m.DEPENDENCY_UP.labels(self.name).set(1)


class Dependencies:
    """Postgres and Redis as one process sees them."""

    def __init__(self, log: logging.Logger) -> None:
        self.states = {POSTGRES: DependencyState(POSTGRES, log), REDIS: DependencyState(REDIS, log)}

    def failed(self, exc: BaseException) -> None:
        name = dependency_of(exc)
        if name is not None:
            self.states[name].failed(exc)

    def ok(self, *names: str) -> None:
        for name in names or tuple(self.states):
            self.states[name].ok()

    @property
    def all_up(self) -> bool:
        return all(s.up for s in self.states.values())


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160] if text else ''}"


async def through_outages(call: Callable[[], Awaitable[T]], deps: Dependencies, *,
                          give_up_after_s: float) -> T:
    """Await ``call()``, trying again through an outage (backing off) for up to
    ``give_up_after_s``; then the last outage error is raised. Other errors raise at once."""
    started = time.monotonic()
    # The first try runs bare: a retry loop costs ~85 us to set up on two cores, twice
    # per realtime job in a worker. After an outage error the loop takes over, its first try
    # at once (a pool's stale connection is replaced by then), then backing off.
    try:
        return await call()
    except Exception as exc:
        if not is_outage(exc):
            raise
        deps.failed(exc)

    def note(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is not None:
            deps.failed(exc)

    left_s = max(0.0, give_up_after_s - (time.monotonic() - started))
    async for attempt in AsyncRetrying(retry=retry_if_exception(is_outage), wait=outage_backoff,
                                       stop=stop_after_delay(left_s),
                                       before_sleep=note, reraise=True):
        with attempt:
            result = await call()
    return result

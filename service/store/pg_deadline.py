"""A deadline on every round trip of a Postgres connection, for processes that must answer
even when Postgres does not (the API).

A Postgres that hangs (stopped, wedged, a network path that drops packets) is not down: the
kernel completes connections, nothing is refused or reset, and libpq has no client-side query
timeout. An API request waited for it as long as the client would (over a minute), and
``asyncio.wait_for`` around a call does not bound it either: psycopg, cancelled, tries to
cancel the query on the server and waits up to 10 s more for that.

Here every wait of a connection for the server (a statement, a commit, a rollback) has a
deadline; one that passes closes the connection (its protocol state is unknown, so it must
never be reused: the pool sees it closed and replaces it) and raises ``OperationalError``,
which the API answers as an outage, 503 + Retry-After. Connecting has libpq's
``connect_timeout``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import psycopg
from psycopg import errors as pg_errors

# psycopg's wait functions raise this when their timeout passes (internal, hence looked up).
_WAIT_TIMEOUT: type[Exception] | None = getattr(pg_errors, "_WaitTimeout", None)


_PATIENCE: ContextVar[float] = ContextVar("pg_deadline_patience", default=0.0)


@contextmanager
def waiting_for_locks(seconds: float) -> Iterator[None]:
    """Round trips inside (in this task) may take up to ``seconds``: for a statement that can
    wait on another transaction's row lock by design (cancelling a batch while it is being
    validated), where a busy Postgres and a hung one look alike."""
    token = _PATIENCE.set(seconds)
    try:
        yield
    finally:
        _PATIENCE.reset(token)


class DeadlineConnection(psycopg.AsyncConnection[Any]):
    """A connection whose every wait for the server ends after ``deadline_s``."""

    deadline_s = 3.0

    async def wait(self, gen: Any, interval: float = 0.1,
                   timeout: float | None = None) -> Any:
        if timeout is not None:  # psycopg's own bounded waits keep their meaning
            return await super().wait(gen, interval, timeout)
        deadline_s = max(self.deadline_s, _PATIENCE.get())
        try:
            return await super().wait(gen, interval, deadline_s)
        except psycopg.OperationalError as exc:
            if _WAIT_TIMEOUT is None or not isinstance(exc, _WAIT_TIMEOUT):
                raise
            self.pgconn.finish()  # mid-protocol: never to be used again
            raise psycopg.OperationalError(
                f"Postgres did not answer within {deadline_s:g} s") from None


@functools.lru_cache(maxsize=8)
def _connection_class(deadline_s: float) -> type[DeadlineConnection]:
    return type("DeadlineConnection", (DeadlineConnection,), {"deadline_s": deadline_s})


def connect_args(deadline_s: float) -> dict[str, Any]:
    """``connect_args`` for SQLAlchemy's async psycopg engine: its connections with this
    deadline, and a connect timeout (libpq's, whole seconds, at least 2)."""
    return {"async_creator_fn": _connection_class(deadline_s).connect,
            "connect_timeout": max(2, math.ceil(deadline_s))}

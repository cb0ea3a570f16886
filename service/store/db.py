"""The database floor: the declarative base (with a naming convention, so Alembic names
constraints predictably), and engines and sessions. The API uses the async engine; the
dispatcher and the workers the sync one."""

from __future__ import annotations

import datetime as dt
import functools
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import DateTime, Engine, MetaData, create_engine, event, exc, func
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from service.store import pg_deadline
from service.store.settings import to_sqlalchemy_url

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def utcnow_column() -> Mapped[dt.datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


# A pooled connection idle this long is pinged before use even when its socket is quiet: a
# peer that vanished without closing it (a dropped NAT entry, a crashed host) says nothing.
PING_IF_IDLE_S = 30.0


def check_on_checkout(engine: Engine, idle_s: float = PING_IF_IDLE_S) -> Engine:
    """Check a pooled connection before use with a zero-timeout poll of its socket, and ping
    it only if that shows something (a dead backend's EOF or its FATAL message, a notice) or
    it sat idle ``idle_s`` or longer.

    ``pool_pre_ping`` pings on every checkout: a round trip, and a transaction in Postgres'
    counters, for each transaction the code runs (half of all commits per realtime job).
    Pinging only after a second idle still put that round trip in front of every request of
    a service that is idle between them (bench/idle_ttft_pairs.py). A backend that exits (a
    restart, ``pg_terminate_backend``) closes its socket, so the poll sees it at any age, as
    redis-py checks a pooled connection for unread data before use."""
    @event.listens_for(engine, "checkin")
    def _returned(dbapi_connection: object, record: Any) -> None:
        record.info["fairway_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: object, record: Any, proxy: object) -> None:
        since = record.info.get("fairway_idle_since")
        if since is None:
            return  # new
        if time.monotonic() - since < idle_s and not _socket_has_news(dbapi_connection):
            return
        try:
            engine.dialect.do_ping(dbapi_connection)  # type: ignore[arg-type]
        except Exception as error:  # the pool drops this one and checks out another
            raise exc.DisconnectionError() from error

    return engine


def _socket_has_news(dbapi_connection: object) -> bool:
    """True if the connection's socket is readable, hung up or gone: an idle Postgres
    connection is sent nothing unless its backend is going away (or a rare notice)."""
    driver: Any = getattr(dbapi_connection, "driver_connection", dbapi_connection)  # async
    try:
        fd = driver.fileno()
    except Exception:  # closed, or no socket to look at: let the ping decide
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


# The dispatcher's and the workers' connections notice a link that stopped carrying packets
# (a network cut, a host gone) within seconds instead of TCP's minutes of retries: keepalives
# for an idle connection, a user timeout for one with data unacknowledged. A dispatcher cut
# from Postgres once sat ~9 s past the heal on such a connection, believing it still led.
NETWORK_FAULT_ARGS = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 5,
                      "keepalives_interval": 2, "keepalives_count": 3,
                      "tcp_user_timeout": 15_000}


@functools.lru_cache(maxsize=8)
def sync_engine(url: str) -> Engine:
    # LIFO: a quiet service reuses its warmest connection, not the one idle longest.
    return check_on_checkout(create_engine(to_sqlalchemy_url(url), pool_size=5,
                                           pool_use_lifo=True,
                                           connect_args=dict(NETWORK_FAULT_ARGS)))


@functools.lru_cache(maxsize=8)
def async_engine(url: str, deadline_s: float | None = None) -> AsyncEngine:
    """``deadline_s``: each round trip to Postgres ends by then (service.store.pg_deadline),
    for the API, which must answer a request even while Postgres hangs."""
    # One stack opens an API, a dispatcher and a worker pool per worker: keep each modest so a
    # default Postgres (100 connections) holds several stacks.
    engine = create_async_engine(
        to_sqlalchemy_url(url), pool_size=10, max_overflow=10, pool_use_lifo=True,
        connect_args=pg_deadline.connect_args(deadline_s) if deadline_s is not None else {})
    check_on_checkout(engine.sync_engine)
    return engine


async def without_transaction(session: AsyncSession) -> None:
    """Run ``session``'s statements from here on each as its own transaction (autocommit):
    for a request whose work is single statements (the door's reads, then the job's insert
    with its NOTIFY), a transaction around them costs a BEGIN and a COMMIT round trip, and
    holds a snapshot open across the quota and SLO checks in between.

    The connection is checked out at the next statement, not here: a request whose policy is
    cached reads nothing at the door, and a connection held across its quota and SLO Redis
    calls made the pool overflow under load (a new Postgres backend for ~1 job in 7 at 16
    clients, bench/hop_latency.py)."""
    if session.in_transaction():  # e.g. the key lookup's read (a cache miss)
        await session.commit()
    bind = session.sync_session.get_bind()
    assert isinstance(bind, Engine), bind  # sessions here are bound to one engine
    session.sync_session.bind = _autocommit(bind)


@functools.lru_cache(maxsize=16)
def _autocommit(engine: Engine) -> Engine:
    """``engine`` with autocommit (a view sharing its pool and its event listeners)."""
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def async_sessionmaker_for(url: str, deadline_s: float | None = None
                           ) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(async_engine(url, deadline_s), expire_on_commit=False)


@contextmanager
def sync_session(url: str) -> Iterator[Session]:
    factory = sessionmaker(sync_engine(url), expire_on_commit=False)
    with factory() as session:
        yield session


@contextmanager
def sync_autocommit_session(url: str) -> Iterator[Session]:
    """A session whose statements each commit by themselves, for work that is one statement
    (or several independent ones): one round trip each, where a transaction adds a BEGIN and
    a COMMIT or ROLLBACK (1.0 ms -> 0.35 ms a statement here, most of it Python)."""
    with Session(_sync_autocommit_engine(url), expire_on_commit=False) as session:
        yield session


@functools.lru_cache(maxsize=8)
def _sync_autocommit_engine(url: str) -> Engine:
    """``sync_engine``'s pool, its connections in autocommit (made once, not every pass)."""
    return sync_engine(url).execution_options(isolation_level="AUTOCOMMIT")

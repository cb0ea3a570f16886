"""One active dispatcher: whoever holds a Postgres advisory lock. Standbys wait for it.

The lock lives as long as the holder's session does, so a dispatcher that dies (or loses its
connection) releases it and a standby takes over within its poll interval. A holder that stops
without dying (a deadlock, a paused VM, SIGSTOP) keeps its process and its socket, so the
session alone would keep the lock forever: the holder therefore sets ``idle_session_timeout``
on it, and pings it from its loop (``Leadership.ping``), so the server ends the session of a
leader that went silent, which frees the lock for a standby.

Fencing: the leader's placement writes (its claims) go through that same session
(``Leadership.writes``), never through the pool. A session the server ended writes nothing,
so a leader that resumes after a standby took over cannot place a job: its claim fails, and it
stands down (``LostLeadership``). While the session lives, nobody else holds the lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

import psycopg
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from service.store import wakeups
from service.store.outages import DependencyState
from service.store.settings import to_libpq_url, to_sqlalchemy_url

log = logging.getLogger("fairway.scheduler")

LOCK_KEY = 0x4641495257415901  # "FAIRWAY" + 1; any constant shared by all dispatchers
IDLE_TIMEOUT_SINCE = 140000  # idle_session_timeout came with Postgres 14


class LostLeadership(Exception):
    """The lock's session is gone: another dispatcher may lead now; this one stands down."""


def connect(libpq_url: str) -> psycopg.Connection:
    """An autocommit connection that notices a vanished server within seconds (TCP keepalives),
    instead of waiting on a dead socket."""
    return psycopg.connect(libpq_url, autocommit=True, connect_timeout=5, keepalives=1,
                           keepalives_idle=5, keepalives_interval=2, keepalives_count=3)


class Leadership:
    """One term's hold on the lock: its session, pinged by the leader's loop, and the
    SQLAlchemy engine over that one session for the term's fenced writes."""

    def __init__(self, conn: psycopg.Connection, database_url: str) -> None:
        self.conn = conn
        handed = False

        def creator() -> psycopg.Connection:
            # Once only: after the session is lost, SQLAlchemy would quietly open a new one,
            # which holds no lock, and the write would pass unfenced.
            nonlocal handed
            if handed:
                raise LostLeadership("the lock's session was lost")
            handed = True
            return conn

        self.engine: Engine = create_engine(to_sqlalchemy_url(database_url), creator=creator,
                                            poolclass=StaticPool, isolation_level="AUTOCOMMIT")

    def ping(self) -> None:
        """Proves the loop alive to the server (the idle timeout); raises ``LostLeadership``
        once the session is gone."""
        try:
            self.conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise LostLeadership(f"the lock's session ended: {exc}") from exc

    @contextmanager
    def writes(self) -> Iterator[Session]:
        """An autocommit session on the lock's own connection: what it writes is written only
        while this process still leads."""
        try:
            with Session(self.engine, expire_on_commit=False) as session:
                yield session
        except LostLeadership:
            raise
        except Exception as exc:
            if self.conn.closed or self.conn.broken:
                raise LostLeadership(f"the lock's session ended: {exc}") from exc
            raise

    def close(self) -> None:
        self.engine.dispose()
        self.conn.close()

    def __enter__(self) -> Leadership:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def acquire_leadership(database_url: str, stop: threading.Event, postgres: DependencyState, *,
                       idle_timeout_s: float, poll_s: float = 0.5) -> Leadership | None:
    """Blocks until this process holds the lock (returns the term's ``Leadership``) or stop is
    set. An unreachable database is waited out (``postgres`` logs it once). The lock's session
    is ended by the server after ``idle_timeout_s`` without a ping."""
    libpq_url = to_libpq_url(database_url)
    announced = False
    conn: psycopg.Connection | None = None
    while not stop.is_set():
        try:
            if conn is None or conn.closed:  # one connection for all the waits, not one each
                conn = connect(libpq_url)
                _set(conn, "lock_timeout", poll_s)
            # Waits on the lock itself, so a standby takes it the moment the leader lets it go
            # (a stopping leader closes its session at once: a rolling restart's takeover),
            # rather than at its next poll; at most ``poll_s`` at a time, to hear ``stop``.
            conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
            got = True
        except psycopg.errors.LockNotAvailable:
            got = False
        except psycopg.OperationalError as exc:
            postgres.failed(exc)
            if conn is not None:
                conn.close()
            conn = None
            stop.wait(poll_s)
            continue
        postgres.ok()
        if got and conn is not None:
            _set(conn, "lock_timeout", 0)  # the term's claims wait on row locks as before
            _expire_when_silent(conn, idle_timeout_s)
            log.info("acquired the dispatcher lock: active")
            return Leadership(conn, database_url)
        if not announced:
            log.info("another dispatcher is active: standing by")
            announced = True
    if conn is not None:
        conn.close()
    return None


def _set(conn: psycopg.Connection, setting: str, seconds: float) -> None:
    """A session setting in milliseconds (0: off)."""
    millis = max(1, round(seconds * 1000)) if seconds > 0 else 0
    conn.execute("SELECT set_config(%s, %s, false)", (setting, str(millis)))


def _expire_when_silent(conn: psycopg.Connection, idle_timeout_s: float) -> None:
    if conn.info.server_version < IDLE_TIMEOUT_SINCE:
        log.warning("Postgres %d has no idle_session_timeout: a frozen active dispatcher "
                    "will not be replaced", conn.info.server_version)
        return
    conn.execute("SELECT set_config('idle_session_timeout', %s, false)",
                 (str(max(1, round(idle_timeout_s * 1000))),))


def wake_when_stopped(database_url: str, stop: threading.Event,
                      leading: Callable[[], bool]) -> threading.Thread:
    """A leader told to stop (SIGTERM) lets its lock go at once: its loop may be waiting up to
    half a second for a wake-up, so a NOTIFY wakes it, it sees ``stop`` and closes the lock's
    session as it leaves its term, and a standby (waiting on the lock) leads."""
    def wake() -> None:
        stop.wait()
        if not leading():
            return
        try:
            with connect(to_libpq_url(database_url)) as conn:
                conn.execute("SELECT pg_notify(%s, %s)",
                             (wakeups.CHANNEL, wakeups.encode(wakeups.Rescan())))
        except psycopg.Error:  # the loop's own wait ends the term a little later
            pass

    thread = threading.Thread(target=wake, name="wake-on-stop", daemon=True)
    thread.start()
    return thread

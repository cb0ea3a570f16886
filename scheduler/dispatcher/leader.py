"""One active dispatcher: whoever holds a Postgres advisory lock. Standbys wait for it.

The lock lives as long as the holder's session does, so a dispatcher that dies (or loses its
connection) releases it and a standby takes over within its poll interval.
"""

from __future__ import annotations

import logging
import threading

import psycopg

from service.store.outages import DependencyState

log = logging.getLogger("fairway.scheduler")

LOCK_KEY = 0x4641495257415901  # "FAIRWAY" + 1; any constant shared by all dispatchers


def connect(libpq_url: str) -> psycopg.Connection:
    """An autocommit connection that notices a vanished server within seconds (TCP keepalives),
    instead of waiting on a dead socket."""
    return psycopg.connect(libpq_url, autocommit=True, connect_timeout=5, keepalives=1,
                           keepalives_idle=5, keepalives_interval=2, keepalives_count=3)


def acquire_leadership(libpq_url: str, stop: threading.Event, postgres: DependencyState,
                       poll_s: float = 1.0) -> psycopg.Connection | None:
    """Blocks until this process holds the lock (returns its connection) or stop is set. An
    unreachable database is waited out (``postgres`` logs it once)."""
    announced = False
    while not stop.is_set():
        try:
            conn = connect(libpq_url)
        except psycopg.OperationalError as exc:
            postgres.failed(exc)
            stop.wait(poll_s)
            continue
        postgres.ok()
        got = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
        if got and got[0]:
            log.info("acquired the dispatcher lock: active")
            return conn
        conn.close()
        if not announced:
            log.info("another dispatcher is active: standing by")
            announced = True
        stop.wait(poll_s)
    return None


def still_leader(conn: psycopg.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False

"""One active dispatcher: whoever holds a Postgres advisory lock. Standbys wait for it.

The lock lives as long as the holder's session does, so a dispatcher that dies (or loses its
connection) releases it and a standby takes over within its poll interval.
"""

from __future__ import annotations

import logging
import threading

import psycopg

log = logging.getLogger("fairway.scheduler")

LOCK_KEY = 0x4641495257415901  # "FAIRWAY" + 1; any constant shared by all dispatchers


def acquire_leadership(libpq_url: str, stop: threading.Event,
                       poll_s: float = 1.0) -> psycopg.Connection | None:
    """Blocks until this process holds the lock (returns its connection) or stop is set."""
    announced = False
    while not stop.is_set():
        try:
            conn = psycopg.connect(libpq_url, autocommit=True)
        except psycopg.OperationalError:
            log.warning("database unreachable; retrying")
            stop.wait(poll_s)
            continue
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

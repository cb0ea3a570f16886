"""Usage accounting's write: `usage_daily` rolled up from the job rows.

A worker's final write (``lifecycle.end``) stamps the job with its own transaction id,
``usage_xid``, in the transaction that ends it, so a job is stamped exactly once, with its
usage columns. ``roll_up`` (the dispatcher's upkeep, once a second) adds every stamped
job whose transaction id lies in ``[last_xid, xmin)`` to its day's row and moves ``last_xid``
to ``xmin``, in one transaction: ``xmin`` is the oldest transaction still running, so every
stamp below it is committed (and visible) or rolled back (and absent) — none can appear later.
Nothing is held in memory: a worker or a dispatcher killed at any moment loses nothing, and a
job is never counted twice (the cursor row is locked while a roll-up runs). The cost: usage
lags by up to a tick, and a transaction left open anywhere in the cluster holds the roll-up
back (never loses it). Reads for the admin API and quotas live in service.usage.

An adapter's jobs count under its ``ft:`` name (``jobs.adapter_model``), as the usage API
groups them (service.usage.completions); days rolled up before that kept the base model.
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, literal_column, text
from sqlalchemy.orm import Session

from service.store.db import sync_session

log = logging.getLogger("fairway.usage")

# How often the dispatcher rolls usage up: usage_daily lags the job rows by about this much.
ROLLUP_EVERY_S = 1.0

# The current transaction's id as a number (xid8 is 64-bit and never wraps around).
CURRENT_XID: ColumnElement[int] = literal_column("pg_current_xact_id()::text::bigint")

_CURSOR = text("SELECT last_xid FROM usage_rollup WHERE id = 1 FOR UPDATE SKIP LOCKED")
_XMIN = text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
_ADD = text("""
INSERT INTO usage_daily AS u (tenant_id, day, model, job_class, requests, failed_requests,
                              prompt_tokens, completion_tokens, cached_tokens)
SELECT tenant_id, (finished_at AT TIME ZONE 'UTC')::date, coalesce(adapter_model, model), kind,
       count(*),
       count(*) FILTER (WHERE status <> 'succeeded'), coalesce(sum(prompt_tokens), 0),
       coalesce(sum(completion_tokens), 0), coalesce(sum(cached_tokens), 0)
FROM jobs
WHERE usage_xid >= :last AND usage_xid < :upto
GROUP BY 1, 2, 3, 4
ON CONFLICT (tenant_id, day, model, job_class) DO UPDATE SET
  requests = u.requests + excluded.requests,
  failed_requests = u.failed_requests + excluded.failed_requests,
  prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
  completion_tokens = u.completion_tokens + excluded.completion_tokens,
  cached_tokens = u.cached_tokens + excluded.cached_tokens
""")
_ADVANCE = text("UPDATE usage_rollup SET last_xid = :upto, updated_at = now() WHERE id = 1")


def roll_up(session: Session) -> int | None:
    """Count every job ended since the last roll-up into ``usage_daily``, and commit. Returns
    the number of (tenant, day, model, class) rows touched; None if another roll-up holds the
    cursor or nothing ended."""
    last: int | None = session.scalar(_CURSOR)
    if last is None:  # another process is rolling up right now
        session.rollback()
        return None
    upto: int | None = session.scalar(_XMIN)  # this transaction holds an xid now: upto <= it
    if upto is None or upto <= last:
        session.rollback()
        return None
    added = session.execute(_ADD, {"last": last, "upto": upto})
    touched = int(cast(CursorResult[Any], added).rowcount)
    session.execute(_ADVANCE, {"upto": upto})
    session.commit()
    return touched


class UsageRollup:
    """The dispatcher's upkeep step (`fairway scheduler` hands it in): ``roll_up`` at most every
    ``every_s``. Any process may run one; the cursor row keeps them from counting twice."""

    def __init__(self, database_url: str, every_s: float = ROLLUP_EVERY_S) -> None:
        self.database_url = database_url
        self.every_s = every_s
        self._next_at = 0.0

    def tick(self) -> None:
        if time.monotonic() < self._next_at:
            return
        self._next_at = time.monotonic() + self.every_s
        try:
            with sync_session(self.database_url) as session:
                roll_up(session)
        except Exception:  # never take the dispatcher down; the next tick catches up
            log.exception("usage roll-up failed")

"""Where tenant labels get their names (service.store.telemetry.labels): a name lookup for
a tenant seen for the first time, and a re-rank, every ``RANK_EVERY_S``, of which tenants
deserve one of the ``max_tenants`` named places (most requests over ``RANK_DAYS`` days, from
usage_daily, so every process ranks alike).

The lookup is one indexed primary-key read, once per tenant and process; it is synchronous
(the API runs it on its event loop, once per new tenant, which is cheaper than a thread hop).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid

from sqlalchemy import text

from service.store.db import sync_session
from service.store.telemetry.labels import TenantLabels

log = logging.getLogger("fairway.metrics")
RANK_EVERY_S = 60.0
RANK_DAYS = 7

_NAME = text("SELECT name FROM tenants WHERE id = :id")
_RANKED = text("""
SELECT t.id, t.name FROM tenants t
LEFT JOIN usage_daily u ON u.tenant_id = t.id AND u.day >= :since
GROUP BY t.id, t.name
ORDER BY coalesce(sum(u.requests), 0) DESC, t.name
LIMIT :n
""")


def lookup_name(database_url: str, tenant_id: str) -> str | None:
    try:
        tid = uuid.UUID(tenant_id)
    except ValueError:
        return None
    with sync_session(database_url) as session:
        name = session.execute(_NAME, {"id": tid}).scalar()
    return None if name is None else str(name)


def ranked_tenants(database_url: str, limit: int,
                   today: dt.date | None = None) -> list[tuple[str, str]]:
    since = (today or dt.datetime.now(dt.UTC).date()) - dt.timedelta(days=RANK_DAYS)
    with sync_session(database_url) as session:
        rows = session.execute(_RANKED, {"since": since, "n": limit}).all()
    return [(str(tid), str(name)) for tid, name in rows]


class _Ranker(threading.Thread):
    def __init__(self, labels: TenantLabels) -> None:
        super().__init__(name="tenant-label-ranker", daemon=True)
        self.labels = labels
        self.database_url = ""
        self.wake = threading.Event()

    def run(self) -> None:
        while True:
            try:
                self.labels.rank(ranked_tenants(self.database_url, self.labels.max_tenants))
            except Exception:  # the database is away: keep the names we have
                log.warning("could not rank tenants for metric labels")
            self.wake.wait(RANK_EVERY_S)
            self.wake.clear()


_ranker: _Ranker | None = None
_lock = threading.Lock()


def attach(labels: TenantLabels, database_url: str | None) -> None:
    """Give ``labels`` this database's names (and keep re-ranking them); None: label by id."""
    global _ranker
    if not database_url:
        labels.lookup = None
        return
    labels.lookup = lambda tenant_id: lookup_name(database_url, tenant_id)
    with _lock:
        if _ranker is None or _ranker.labels is not labels:
            _ranker = _Ranker(labels)
            _ranker.database_url = database_url
            _ranker.start()
        elif _ranker.database_url != database_url:  # a test process making a new stack
            _ranker.database_url = database_url
            _ranker.wake.set()

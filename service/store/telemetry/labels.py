"""Label values with bounded cardinality.

``tenant`` is the tenant's NAME, so Grafana shows who it is. At most ``max_tenants``
(FAIRWAY_METRICS_MAX_TENANTS) tenants are named in one process; the rest report as ``other``,
so a tenant explosion cannot take Prometheus down. Which tenants are named: every process
ranks the tenants by requests over the last days (usage_daily, the same table for all of
them, so the API, the dispatcher and the workers name the same top N) and re-ranks every
``RANK_EVERY_S``; until a rank is in, and for tenants new since, the first ones seen fill
the free places. The names come from ``service.store.telemetry.tenant_directory``; a process
without a database (unit tests) labels by the id it was given. See docs/observability.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from scheduler.tiers import TIER_NAMES

OTHER = "other"
UNKNOWN = "unknown"
JOB_CLASSES = frozenset({"realtime", "batch"})
# service_tier as echoed to clients, plus "batch" for batch-file lines.
TIERS = frozenset({*TIER_NAMES, "batch"})
LOOKUP_RETRY_S = 30.0  # after a failed name lookup (database away), label new ids "other"

NameLookup = Callable[[str], str | None]  # tenant id -> name, None if there is no such tenant


def safe_name(name: str) -> str:
    """A tenant literally named "other" or "unknown" must not pass for the catch-alls."""
    return f"{name} (tenant)" if name in (OTHER, UNKNOWN) else name


class TenantLabels:
    def __init__(self, max_tenants: int = 100, lookup: NameLookup | None = None) -> None:
        self.max_tenants = max_tenants
        self.lookup = lookup
        self._labels: dict[str, str] = {}  # tenant id -> its name (or id, without lookup)
        self._lock = threading.Lock()
        self._retry_at = 0.0

    def __call__(self, tenant: object) -> str:
        if tenant is None:
            return UNKNOWN
        key = str(tenant)
        label = self._labels.get(key)
        if label is not None:
            return label
        with self._lock:
            if key in self._labels:
                return self._labels[key]
            if len(self._labels) >= self.max_tenants:
                return OTHER
            if self.lookup is None:
                self._labels[key] = key
                return key
            if time.monotonic() < self._retry_at:
                return OTHER
            try:
                name = self.lookup(key)
            except Exception:  # the database is away: name it when it is back
                self._retry_at = time.monotonic() + LOOKUP_RETRY_S
                return OTHER
            if name is None:  # no such tenant (deleted, or not an id): not worth a place
                return OTHER
            self._labels[key] = safe_name(name)
            return self._labels[key]

    def rank(self, ranked: list[tuple[str, str]]) -> None:
        """Name these (id, name) tenants, most important first, up to the cap; forget the
        rest (they report as ``other`` until a place is free again)."""
        labels = {str(tid): safe_name(name) for tid, name in ranked[:self.max_tenants]}
        with self._lock:
            self._labels = labels


tenant_label = TenantLabels()


def class_label(kind: object) -> str:
    value = str(kind or "")
    return value if value in JOB_CLASSES else UNKNOWN


def tier_label(tier: object, kind: object = None) -> str:
    """The tier a job is labelled with. A batch-file line is stored with the service_tier its
    output echoes ("default", as OpenAI's batch output says) but runs in the batch class at
    batch priority (scheduler.tiers.BATCH_LINE): label it ``batch``. Flex is the only tier of
    the batch class a request can ask for."""
    value = str(tier or "")
    if str(kind or "") == "batch" and value != "flex":
        return "batch"
    return value if value in TIERS else UNKNOWN

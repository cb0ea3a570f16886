"""Label values with bounded cardinality.

``tenant`` is the tenant id (the same string in every process; the admin dashboard maps it to
a name). The number of distinct tenants a process labels is capped: past the cap, new tenants
report as ``other`` so a tenant explosion cannot take Prometheus down.
"""

from __future__ import annotations

import threading

OTHER = "other"
JOB_CLASSES = frozenset({"realtime", "batch"})
# service_tier as echoed to clients, plus "batch" for batch-file lines.
TIERS = frozenset({"priority", "default", "flex", "batch"})


class TenantLabels:
    def __init__(self, max_tenants: int = 100) -> None:
        self.max_tenants = max_tenants
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, tenant: object) -> str:
        value = str(tenant) if tenant is not None else "unknown"
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) >= self.max_tenants:
                return OTHER
            self._seen.add(value)
        return value


tenant_label = TenantLabels()


def class_label(kind: object) -> str:
    value = str(kind or "")
    return value if value in JOB_CLASSES else "unknown"


def tier_label(tier: object, kind: object = None) -> str:
    value = str(tier or "")
    if value in TIERS:
        return value
    return "batch" if str(kind or "") == "batch" else "unknown"

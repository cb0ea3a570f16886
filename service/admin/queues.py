"""Queue depth for the admin overview: active jobs by plan, by tenant and by job class, from
the jobs table (the system of record), with the status split (queued, assigned, running). A
plan is a "tier" in the JSON (``by_tier``, ``tier``), as everywhere in the admin API."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.lifecycle import ACTIVE
from service.store.models.jobs import JobStatus

_ACTIVE = text("""
SELECT t.tier, t.id AS tenant_id, t.name AS tenant, j.kind, j.status, count(*) AS n
FROM jobs j JOIN tenants t ON t.id = j.tenant_id
WHERE j.status IN ('queued', 'assigned', 'running')
GROUP BY t.tier, t.id, t.name, j.kind, j.status
""")

STATUSES = tuple(s.value for s in JobStatus if s in ACTIVE)


def _zero() -> dict[str, int]:
    return dict.fromkeys(STATUSES, 0)


async def queue_breakdown(session: AsyncSession) -> dict[str, Any]:
    """{by_tier: [{tier, queued, assigned, running}], by_tenant: [{tenant_id, tenant, tier,
    realtime_queued, batch_queued, queued, assigned, running}], by_class: {...}}, largest
    queued first; ``tier`` is the plan."""
    rows = (await session.execute(_ACTIVE)).mappings().all()
    plans: dict[str, dict[str, int]] = {}
    classes: dict[str, dict[str, int]] = {}
    tenants: dict[str, dict[str, Any]] = {}
    for r in rows:
        plans.setdefault(r["tier"], _zero())[r["status"]] += r["n"]
        classes.setdefault(r["kind"], _zero())[r["status"]] += r["n"]
        tid = str(r["tenant_id"])
        entry = tenants.setdefault(tid, {"tenant_id": tid, "tenant": r["tenant"],
                                         "tier": r["tier"], "realtime_queued": 0,
                                         "batch_queued": 0, **_zero()})
        entry[r["status"]] += r["n"]
        if r["status"] == "queued":
            entry[f"{r['kind']}_queued"] = entry.get(f"{r['kind']}_queued", 0) + r["n"]
    by_plan = [{"tier": name, **counts} for name, counts in sorted(plans.items())]
    by_tenant = sorted(tenants.values(), key=lambda t: (-t["queued"], t["tenant"]))
    return {"by_tier": by_plan, "by_tenant": by_tenant, "by_class": classes}

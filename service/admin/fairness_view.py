"""Fairness for the admin Overview: per class, Jain's index of the tenants' service against
their weighted fair share, and each tenant's service, share ratio and queue waits, over the
same window as the SLO view (the definitions: service.store.telemetry.fairness)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.store.fairness_window import WINDOW_SQL, tenant_services, window_params
from service.store.telemetry.fairness import TenantFairness, fairness_by_class


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _tenant_view(t: TenantFairness) -> dict[str, Any]:
    s = t.service
    return {"tenant_id": s.tenant_id, "tenant": s.tenant, "class": s.job_class,
            "weight": s.weight, "jobs": s.jobs, "served": s.served, "backlog": s.backlog,
            "fair_share": t.fair, "share_ratio": t.share_ratio,
            "queue_wait_p50_ms": _ms(s.wait_p50_s), "queue_wait_p99_ms": _ms(s.wait_p99_s),
            "oldest_wait_ms": _ms(s.oldest_wait_s)}


async def fairness(session: AsyncSession, *, window_s: float) -> dict[str, Any]:
    rows = (await session.execute(WINDOW_SQL, window_params(window_s))).mappings().all()
    report = fairness_by_class(tenant_services(rows))
    return {"window_s": window_s,
            "by_class": {c: {"jain": f.jain, "tenants": len(f.tenants)}
                         for c, f in report.items()},
            "by_tenant": sorted((_tenant_view(t) for f in report.values() for t in f.tenants),
                                key=lambda v: (v["class"], v["tenant"]))}

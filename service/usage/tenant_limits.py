"""What a tenant may use and has used, for the tenant itself (GET /v1/limits): its plan's
targets, its rate limits and what is left of them now, concurrency, and the month's token
budget. The same numbers the admin's quota view shows, under names a tenant's code can read:
OpenAI's rate-limit words (``max_requests_per_1_minute``) where it has them; null is no limit.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession

from service.plans.plan_records import get_plan
from service.store.models.quotas import TenantQuota
from service.store.models.tenants import Tenant
from service.store.quota_limits import QuotaLimits, effective_limits
from service.store.quota_store import QuotaStore
from service.usage.reports import month_tokens_used


def _next_month(now: dt.datetime) -> dt.datetime:
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (first + dt.timedelta(days=32)).replace(day=1)


def _left(cap: int | None, level: float | None) -> int | None:
    return None if cap is None or level is None else int(level)


def _budget(limits: QuotaLimits, used: int, now: dt.datetime) -> dict[str, Any]:
    cap = limits.monthly_tokens
    alert = limits.monthly_alert_tokens
    return {"limit": cap, "used": used,
            "remaining": None if cap is None else max(0, cap - used),
            "alert_at": alert, "alert_reached": alert is not None and used >= alert,
            "resets_at": int(_next_month(now).timestamp())}


async def tenant_limits(session: AsyncSession, redis: Redis, tenant: Tenant,
                        now: dt.datetime | None = None) -> dict[str, Any]:
    now = now or dt.datetime.now(dt.UTC)
    plan = await get_plan(session, name=tenant.plan)
    overrides = await session.get(TenantQuota, tenant.id)
    limits = effective_limits(dict(plan.quotas) if plan else {},
                              dict(overrides.overrides) if overrides else None)
    store = QuotaStore(redis)
    # The month's counter when Redis has it (what the door charges against), else Postgres'
    # count, as the admin's quota view reads it.
    used = await store.month_used(tenant_id=tenant.id, now=now)
    if used is None:
        used = await month_tokens_used(session, tenant_id=tenant.id, now=now)
    live = await store.state(tenant_id=tenant.id, limits=limits, month_used=used)
    return {
        "object": "limits",
        "organization": {"id": str(tenant.id), "name": tenant.name},
        "plan": None if plan is None else {
            "name": plan.name, "ttft_target_ms": plan.ttft_slo_ms,
            "tpot_target_ms": plan.tpot_slo_ms,
            "allowed_service_tiers": list(plan.allowed_service_tiers),
            "admission_mode": plan.admission_mode, "over_quota": plan.over_quota},
        "rate_limits": {
            "max_requests_per_1_minute": limits.requests_per_minute,
            "max_tokens_per_1_minute": limits.tokens_per_minute,
            "max_concurrent_requests": limits.concurrent_requests,
            "max_batch_enqueued_tokens": limits.batch_enqueued_tokens},
        "current": {
            "remaining_requests_per_1_minute": _left(
                limits.requests_per_minute, live["requests_per_minute_available"]),
            "remaining_tokens_per_1_minute": _left(
                limits.tokens_per_minute, live["tokens_per_minute_available"]),
            "open_concurrent_requests": live["concurrent_requests_open"],
            "batch_enqueued_tokens": live["batch_enqueued_tokens"]},
        "monthly_tokens": _budget(limits, used, now),
    }

"""Usage reads: a tenant's month so far and daily rows for the admin API. The per-job write is
service.store.usage.record_job_usage (the worker's final write)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models.usage import UsageDaily


async def month_tokens_used(session: AsyncSession, *, tenant_id: uuid.UUID,
                            now: dt.datetime | None = None) -> int:
    now = now or dt.datetime.now(dt.UTC)
    start = now.date().replace(day=1)
    total = await session.scalar(
        select(func.coalesce(func.sum(UsageDaily.prompt_tokens + UsageDaily.completion_tokens), 0))
        .where(UsageDaily.tenant_id == tenant_id, UsageDaily.day >= start))
    return int(total or 0)


async def usage_rows(session: AsyncSession, *, tenant_id: uuid.UUID | None, since: dt.date
                     ) -> list[dict[str, Any]]:
    query = select(UsageDaily).where(UsageDaily.day >= since).order_by(UsageDaily.day)
    if tenant_id is not None:
        query = query.where(UsageDaily.tenant_id == tenant_id)
    return [{"tenant_id": str(r.tenant_id), "day": r.day.isoformat(), "model": r.model,
             "job_class": r.job_class, "requests": r.requests,
             "failed_requests": r.failed_requests, "prompt_tokens": r.prompt_tokens,
             "completion_tokens": r.completion_tokens, "cached_tokens": r.cached_tokens}
            for r in (await session.scalars(query)).all()]

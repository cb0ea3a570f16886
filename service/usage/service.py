"""Usage accounting: one upsert per finished job, in the transaction that finishes it."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from service.usage.models import UsageDaily


async def record_job_usage(session: AsyncSession, *, tenant_id: uuid.UUID, model: str,
                           job_class: str, prompt_tokens: int, completion_tokens: int,
                           cached_tokens: int, failed: bool, day: dt.date | None = None) -> None:
    """Add one finished job to its day's row. The caller commits (with the job's final row,
    so a job is counted exactly once)."""
    values = {"requests": 1, "failed_requests": int(failed), "prompt_tokens": prompt_tokens,
              "completion_tokens": completion_tokens, "cached_tokens": cached_tokens}
    stmt = insert(UsageDaily).values(tenant_id=tenant_id, day=day or dt.datetime.now(dt.UTC).date(),
                                     model=model, job_class=job_class, **values)
    excluded = stmt.excluded
    await session.execute(stmt.on_conflict_do_update(
        index_elements=["tenant_id", "day", "model", "job_class"],
        set_={k: getattr(UsageDaily, k) + getattr(excluded, k) for k in values}))


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

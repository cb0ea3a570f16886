"""Usage accounting's write: one upsert per finished job, in the transaction that finishes it
(the worker's final write). Reads for the admin API and quotas live in service.usage."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models.usage import UsageDaily


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

"""A tenant's jobs, newest first, in pages as OpenAI's list endpoints give them.

The cursor is a job id (``after``): the next page starts after that job in the order
``(created_at, id)`` descending, which the index ``ix_jobs_tenant_created_id`` serves as one
range scan per page, whatever the filters.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models.jobs import Job


@dataclass(frozen=True, slots=True)
class JobFilters:
    """Every field narrows the list; None leaves it open."""

    status: str | None = None
    job_class: str | None = None  # the job's kind: realtime | batch
    service_tier: str | None = None
    model: str | None = None
    batch_id: uuid.UUID | None = None
    created_after: dt.datetime | None = None  # inclusive
    created_before: dt.datetime | None = None  # exclusive


class UnknownCursor(LookupError):
    """``after`` names no job of this tenant."""


def _filtered(tenant_id: uuid.UUID, f: JobFilters) -> Select[Any]:
    query = select(Job).where(Job.tenant_id == tenant_id)
    for column, value in ((Job.status, f.status), (Job.kind, f.job_class),
                          (Job.service_tier, f.service_tier), (Job.model, f.model),
                          (Job.batch_id, f.batch_id)):
        if value is not None:
            query = query.where(column == value)
    if f.created_after is not None:
        query = query.where(Job.created_at >= f.created_after)
    if f.created_before is not None:
        query = query.where(Job.created_at < f.created_before)
    return query


async def list_jobs(session: AsyncSession, *, tenant_id: uuid.UUID, filters: JobFilters,
                    after: uuid.UUID | None, limit: int) -> tuple[list[Job], bool]:
    """One page (at most ``limit`` jobs) and whether more follow. Raises UnknownCursor when
    ``after`` is not this tenant's job (another tenant's id reveals nothing)."""
    query = _filtered(tenant_id, filters)
    if after is not None:
        anchor = (await session.execute(
            select(Job.created_at, Job.id).where(Job.id == after, Job.tenant_id == tenant_id)
        )).first()
        if anchor is None:
            raise UnknownCursor(after)
        query = query.where(tuple_(Job.created_at, Job.id) < tuple_(anchor.created_at,
                                                                    anchor.id))
    rows: list[Job] = list((await session.scalars(
        query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit + 1))).all())
    return rows[:limit], len(rows) > limit

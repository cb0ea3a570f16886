"""Batches across every tenant for the admin dashboard: newest first, paged, with the
tenant's name and live request counts (the same counts GET /v1/batches/{id} reports)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.batches.batch_records import batch_view, live_counts
from service.store.models.batches import OPEN_STATUSES, Batch
from service.store.models.tenants import Tenant


async def batches_page(session: AsyncSession, *, tenant_id: uuid.UUID | None,
                       status: str | None, limit: int, offset: int) -> dict[str, Any]:
    """`status`: one batch status, or "open" for every status that can still change."""
    where = []
    if tenant_id is not None:
        where.append(Batch.tenant_id == tenant_id)
    if status == "open":
        where.append(Batch.status.in_([s.value for s in OPEN_STATUSES]))
    elif status:
        where.append(Batch.status == status)
    total = await session.scalar(select(func.count()).select_from(Batch).where(*where))
    rows = (await session.execute(
        select(Batch, Tenant.name).join(Tenant, Tenant.id == Batch.tenant_id).where(*where)
        .order_by(Batch.created_at.desc(), Batch.id.desc()).limit(limit).offset(offset))).all()
    batches = [b for b, _ in rows]
    counts = await live_counts(session, batches)
    return {"object": "list", "total": int(total or 0), "limit": limit, "offset": offset,
            "data": [{**batch_view(b, counts[b.id]), "tenant_id": str(b.tenant_id),
                      "tenant": name} for b, name in rows]}

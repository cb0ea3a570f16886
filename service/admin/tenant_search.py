"""The tenant list for the admin dashboard: a name search, status and plan filters, and pages."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.tenant_ops import tenant_view
from service.store.models.tenants import ApiKey, Tenant

Status = Literal["active", "suspended"]


async def search_tenants(session: AsyncSession, *, q: str | None, status: Status | None,
                         plan: str | None, limit: int, offset: int) -> dict[str, Any]:
    where = []
    if q:
        where.append(Tenant.name.icontains(q, autoescape=True))
    if status == "active":
        where.append(Tenant.suspended_at.is_(None))
    elif status == "suspended":
        where.append(Tenant.suspended_at.is_not(None))
    if plan:
        where.append(Tenant.plan == plan)
    total = await session.scalar(select(func.count()).select_from(Tenant).where(*where))
    tenants = (await session.scalars(select(Tenant).where(*where).order_by(Tenant.name)
                                     .limit(limit).offset(offset))).all()
    live = (ApiKey.revoked_at.is_(None)) & (
        ApiKey.expires_at.is_(None) | (ApiKey.expires_at > func.now()))
    ids = [t.id for t in tenants]
    counts = dict((await session.execute(
        select(ApiKey.tenant_id, func.count()).where(live, ApiKey.tenant_id.in_(ids))
        .group_by(ApiKey.tenant_id))).all()) if ids else {}
    return {"object": "list", "total": int(total or 0), "limit": limit, "offset": offset,
            "data": [tenant_view(t, active_keys=counts.get(t.id, 0)) for t in tenants]}

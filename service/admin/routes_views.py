"""Admin API reads (and one action) the dashboard's pages need: queues by plan and tenant,
SLO attainment over time, preemptions, recent refusals, usage over time, batches across
tenants (and their cancel), and a searchable, paged tenant list."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin import queues, slo_series
from service.admin.adapter_view import router as adapter_view_router
from service.admin.audit import record
from service.admin.explorer_routes import router as explorer_router
from service.admin.tenant_search import search_tenants
from service.batches.admin_view import batches_page
from service.batches.batch_records import batch_view, cancel_batch, live_counts
from service.store.models.batches import Batch, BatchStatus, parse_batch_id
from service.store.models.tenants import Tenant
from service.store.telemetry import refusals
from service.usage.by_key import key_series, key_totals
from service.usage.series import daily_series
from service.web.deps import AdminDep, RedisDep, SessionDep, require_admin
from service.web.errors import APIError
from service.web.responses import ADMIN_ROUTES, errors

router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)],
                   responses=ADMIN_ROUTES)

WEEK_S = 7 * 24 * 3600
# One batch status, or "open" (every status that can still change).
_BATCH_STATUS = "^(" + "|".join(["open", *(s.value for s in BatchStatus)]) + ")$"


def _uuid(value: str | None, param: str) -> uuid.UUID | None:
    if not value:
        return None
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise APIError(400, f"{param} must be a UUID.", code="invalid_value",
                       param=param) from exc


@router.get("/queues")
async def queue_depth(session: SessionDep) -> dict[str, Any]:
    return await queues.queue_breakdown(session)


@router.get("/slo/series")
async def slo_over_time(session: SessionDep,
                        window_s: float = Query(default=3600, gt=0, le=WEEK_S),
                        bucket_s: float = Query(default=60, ge=1, le=24 * 3600)
                        ) -> dict[str, Any]:
    if window_s / bucket_s > 2000:
        raise APIError(400, "window_s / bucket_s must be at most 2000 buckets.",
                       code="invalid_value", param="bucket_s")
    return {**await slo_series.slo_series(session, window_s=window_s, bucket_s=bucket_s),
            "preemptions": await slo_series.preemptions(session, window_s=window_s)}


@router.get("/refusals")
async def recent_refusals(session: SessionDep,
                          window_s: float = Query(default=900, gt=0, le=WEEK_S),
                          limit: int = Query(default=50, ge=1, le=500)) -> dict[str, Any]:
    """The 429s this API process answered recently (in memory: a restart forgets them)."""
    rows = refusals.recent(since=time.time() - window_s)
    names = await _tenant_names(session, {r["tenant_id"] for r in rows[:limit]})
    return {"object": "list", "window_s": window_s, "total": len(rows),
            "data": [{**r, "tenant": names.get(r["tenant_id"])} for r in rows[:limit]]}


@router.get("/usage/series")
async def usage_series(session: SessionDep, tenant_id: str | None = None,
                       days: int = Query(default=30, ge=1, le=366),
                       group_by: Literal["model", "job_class", "tenant", "key"] = "model"
                       ) -> dict[str, Any]:
    """Per UTC day. By model, class or tenant from the usage table; by key (one tenant) from
    the jobs, which record their key (batch lines have none)."""
    until = dt.datetime.now(dt.UTC).date()
    since = until - dt.timedelta(days=days - 1)
    tid = _uuid(tenant_id, "tenant_id")
    if group_by == "key":
        if tid is None:
            raise APIError(400, "group_by=key needs a tenant_id.", code="invalid_value",
                           param="tenant_id")
        return await key_series(session, tenant_id=tid, since=since, until=until)
    return await daily_series(session, tenant_id=tid, since=since, until=until,
                              group_by=group_by)


@router.get("/usage/keys")
async def usage_by_key(session: SessionDep, tenant_id: str,
                       days: int = Query(default=30, ge=1, le=366)) -> dict[str, Any]:
    """One tenant's finished requests and tokens per API key over the last `days` UTC days."""
    tid = _uuid(tenant_id, "tenant_id")
    if tid is None:
        raise APIError(400, "tenant_id is required.", code="invalid_value", param="tenant_id")
    since = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days - 1)
    return {"object": "list", "since": since.isoformat(),
            "data": await key_totals(session, tenant_id=tid, since=since)}


@router.get("/batches")
async def list_all_batches(session: SessionDep, tenant_id: str | None = None,
                           status: str | None = Query(default=None, pattern=_BATCH_STATUS),
                           limit: int = Query(default=25, ge=1, le=200),
                           offset: int = Query(default=0, ge=0, le=1_000_000)
                           ) -> dict[str, Any]:
    return await batches_page(session, tenant_id=_uuid(tenant_id, "tenant_id"), status=status,
                              limit=limit, offset=offset)


@router.post("/batches/{batch_id}/cancel", responses=errors(404, 409))
async def cancel_any_batch(batch_id: str, actor: AdminDep, session: SessionDep,
                           redis: RedisDep) -> dict[str, Any]:
    """Cancel any tenant's batch, as the tenant's own cancel does; audited."""
    parsed = parse_batch_id(batch_id)
    batch = await session.get(Batch, parsed) if parsed else None
    if batch is None:
        raise APIError(404, f"No such Batch object: {batch_id}", code="not_found",
                       param="batch_id")
    # Added before the guarded update, so the entry commits with the cancel (or rolls back
    # with it when the batch could not be cancelled).
    record(session, actor=actor, action="batch.cancel", target_type="tenant",
           target_id=str(batch.tenant_id), details={"batch_id": batch.public_id})
    batch = await cancel_batch(session, batch=batch, redis=redis)
    return batch_view(batch, (await live_counts(session, [batch]))[batch.id])


@router.get("/search/tenants")
async def find_tenants(session: SessionDep, q: str | None = Query(default=None, max_length=128),
                       status: Literal["active", "suspended"] | None = None,
                       tier: str | None = Query(default=None, max_length=32,
                                                description="only tenants on this plan"),
                       limit: int = Query(default=25, ge=1, le=200),
                       offset: int = Query(default=0, ge=0, le=1_000_000)) -> dict[str, Any]:
    return await search_tenants(session, q=q, status=status, plan=tier, limit=limit,
                                offset=offset)


async def _tenant_names(session: AsyncSession, ids: set[str]) -> dict[str, str]:
    uuids = [u for u in (_maybe_uuid(i) for i in ids) if u is not None]
    if not uuids:
        return {}
    rows = await session.execute(select(Tenant.id, Tenant.name).where(Tenant.id.in_(uuids)))
    return {str(i): n for i, n in rows.all()}


def _maybe_uuid(raw: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


router.include_router(explorer_router)  # /admin/search, /admin/jobs/{id}, /admin/batches/{id}
router.include_router(adapter_view_router)  # /admin/tenants/{id}/adapters: adapters and use

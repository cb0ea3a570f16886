"""A tenant's LoRA adapters for the dashboard: each live adapter with its use over the last
30 days (requests, tokens and the last request, from the jobs that ran with the adapter:
their ``adapter_model``), its recent load times and the workers that hold it warm now (from
the live workers' beats, service.admin.adapter_loads). A load's whole history is the workers'
``fairway_lora_load_seconds`` histogram, which the view names."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from fastapi import APIRouter, Depends
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.adapters.records import list_adapters
from service.admin.adapter_loads import AdapterLoads
from service.admin.tenant_ops import require_tenant
from service.store.adapter_names import ft_name
from service.store.models.adapters import LoraAdapter
from service.store.models.jobs import Job
from service.web.catalog import live_workers
from service.web.deps import RedisDep, SessionDep, require_admin
from service.web.responses import ADMIN_ROUTES, errors

# No prefix: the admin views router includes it under /admin.
router = APIRouter(dependencies=[Depends(require_admin)], responses=ADMIN_ROUTES)

USE_WINDOW_DAYS = 30
LOAD_TIME_METRIC = "fairway_lora_load_seconds"


def _ts(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


async def adapter_use(session: AsyncSession, tenant_id: uuid.UUID, models: list[str],
                      since: dt.datetime) -> dict[str, tuple[int, int, dt.datetime]]:
    """Requests, tokens and the last request per ``ft:`` model name since ``since``. Bounded
    to the tenant's jobs in the window (the tenant-and-created index), so the scan grows with
    the tenant's recent traffic, not with the whole table."""
    if not models:
        return {}
    named = Job.adapter_model
    tokens = func.coalesce(func.sum(func.coalesce(Job.prompt_tokens, 0)
                                    + func.coalesce(Job.completion_tokens, 0)), 0)
    rows = await session.execute(
        select(named, func.count(), tokens, func.max(Job.created_at))
        .where(Job.tenant_id == tenant_id, Job.created_at >= since, named.in_(models))
        .group_by(named))
    return {model: (int(count), int(total), last) for model, count, total, last in rows.all()
            if model is not None}


def _adapter_row(row: LoraAdapter, model: str, use: tuple[int, int, dt.datetime] | None,
                 loads: AdapterLoads) -> dict[str, Any]:
    requests, tokens, last = use or (0, 0, None)
    return {"id": row.public_id, "name": row.name, "model": model,
            "base_model": row.base_model, "rank": row.rank, "bytes": row.bytes,
            "created_at": _ts(row.created_at), "requests": requests, "tokens": tokens,
            "last_used_at": _ts(last), **loads.view(row.public_id, model)}


@router.get("/tenants/{tenant_id}/adapters", responses=errors(404))
async def tenant_adapters(tenant_id: str, session: SessionDep,
                          redis: RedisDep) -> dict[str, Any]:
    tenant = await require_tenant(session, tenant_id)
    adapters = await list_adapters(session, tenant_id=tenant.id)
    models = [ft_name(a.base_model, tenant.name, a.name) for a in adapters]
    since = dt.datetime.now(dt.UTC) - dt.timedelta(days=USE_WINDOW_DAYS)
    use = await adapter_use(session, tenant.id, models, since)
    loads = AdapterLoads.of(await live_workers(redis)) if adapters else AdapterLoads({}, {})
    return {"object": "list", "window_days": USE_WINDOW_DAYS,
            "load_time_metric": LOAD_TIME_METRIC,
            "data": [_adapter_row(a, m, use.get(m), loads)
                     for a, m in zip(adapters, models, strict=True)]}

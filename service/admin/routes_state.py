"""Admin API, read side: usage, live queues and workers, SLO attainment, the audit log."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Query

from service.admin import audit, live
from service.admin.fairness_view import fairness
from service.usage.reports import usage_rows
from service.web.catalog import live_workers
from service.web.deps import RedisDep, SessionDep, require_admin
from service.web.errors import APIError
from service.web.responses import ADMIN_ROUTES

router = APIRouter(prefix="/admin", dependencies=[Depends(require_admin)],
                   responses=ADMIN_ROUTES)


@router.get("/usage")
async def usage(session: SessionDep, tenant_id: str | None = None,
                days: int = Query(default=30, ge=1, le=366)) -> dict[str, Any]:
    try:
        tid = uuid.UUID(tenant_id) if tenant_id else None
    except ValueError as exc:
        raise APIError(400, "tenant_id must be a UUID.", code="invalid_value",
                       param="tenant_id") from exc
    since = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days - 1)
    return {"object": "list", "since": since.isoformat(),
            "data": await usage_rows(session, tenant_id=tid, since=since)}


@router.get("/live")
async def live_state(session: SessionDep, redis: RedisDep,
                     window_s: float = Query(default=300, gt=0, le=7 * 24 * 3600)
                     ) -> dict[str, Any]:
    return {"queues": await live.queue_depth(session),
            "workers": await live_workers(redis),
            "slo": await live.slo_attainment(session, window_s=window_s),
            "fairness": await fairness(session, window_s=window_s)}


@router.get("/audit")
async def audit_log(session: SessionDep, limit: int = Query(default=100, ge=1, le=1000),
                    offset: int = Query(default=0, ge=0, le=10_000_000),
                    target_id: str | None = Query(default=None, max_length=64),
                    action: str | None = Query(default=None, max_length=64),
                    actor: str | None = Query(default=None, max_length=128)) -> dict[str, Any]:
    """Newest first. `action` and `actor` match a prefix ("tenant." is every tenant action);
    each entry names its tenant (`target_name`) and key (`key_name`) where it has one."""
    filters = {"target_id": target_id, "action": action, "actor": actor}
    return {"object": "list", "total": await audit.count(session, **filters),
            "limit": limit, "offset": offset,
            "data": await audit.recent(session, limit=limit, offset=offset, **filters)}

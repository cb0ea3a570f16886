"""OpenAI Batches API routes: thin wrappers over service/batches/batch_records.py."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from redis import Redis

from service.batches.batch_records import (
    batch_view,
    cancel_batch,
    create_batch,
    get_batch,
    list_batches,
    live_counts,
)
from service.batches.ingest import validate_batch
from service.batches.key_models import check_batch_model
from service.batches.schemas import BatchCreate, allowed_windows
from service.files.storage import storage_for
from service.observability.requests import record_refusal
from service.quotas.batch import check_batch_create
from service.quotas.reservation import quota_store
from service.spend.stops import BUDGET_OPEN
from service.store.db import sync_session
from service.store.models.batches import Batch, parse_batch_id
from service.store.settings import Settings
from service.web.deps import CurrentTenant, RedisDep, SessionDep, SettingsDep
from service.web.errors import APIError
from service.web.responses import TENANT_ROUTES, WITH_BODY, errors

log = logging.getLogger("fairway.batches")
router = APIRouter(prefix="/v1", responses=TENANT_ROUTES)
_validations: set[asyncio.Task[Any]] = set()  # keep references: asyncio holds tasks weakly


@router.post("/batches", responses={**errors(404, 429), **WITH_BODY},
             dependencies=[BUDGET_OPEN])
async def create(body: BatchCreate, request: Request, tenant: CurrentTenant,
                 session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    windows = allowed_windows(settings.batches.completion_windows)
    if body.completion_window not in windows:
        raise APIError(400, f"completion_window must be one of {sorted(windows)}.",
                       code="invalid_value", param="completion_window")
    try:
        await check_batch_model(request, session, storage_for(settings.files_root),
                                tenant_id=tenant.id, input_file_id=body.input_file_id)
        await check_batch_create(session, quota_store(request.app.state), tenant=tenant)
    except APIError as exc:
        record_refusal(tenant.id, exc)
        raise
    batch = await create_batch(session, tenant_id=tenant.id, body=body,
                               window=windows[body.completion_window])
    known = set(await request.app.state.catalog.refresh())  # once per batch: never stale
    # Validation parses and COPYs up to 200 MB: a thread, so the event loop keeps serving.
    # If this process dies first, the dispatcher's maintenance validates it (ingest.py).
    task = asyncio.create_task(asyncio.to_thread(_validate, settings, batch.id, known))
    _validations.add(task)
    task.add_done_callback(_validations.discard)
    return batch_view(batch, {"total": 0, "completed": 0, "failed": 0})


@router.get("/batches")
async def read_batches(tenant: CurrentTenant, session: SessionDep, after: str | None = None,
                       limit: Annotated[int, Query(ge=1, le=100)] = 20) -> dict[str, Any]:
    rows, more = await list_batches(session, tenant_id=tenant.id,
                                    after=parse_batch_id(after) if after else None, limit=limit)
    counts = await live_counts(session, rows)
    data = [batch_view(b, counts[b.id]) for b in rows]
    return {"object": "list", "data": data, "has_more": more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


@router.get("/batches/{batch_id}", responses=errors(404))
async def read_batch(batch_id: str, tenant: CurrentTenant, session: SessionDep
                     ) -> dict[str, Any]:
    batch = await _owned(session, tenant.id, batch_id)
    return batch_view(batch, (await live_counts(session, [batch]))[batch.id])


@router.post("/batches/{batch_id}/cancel", responses=errors(404, 409))
async def cancel(batch_id: str, tenant: CurrentTenant, session: SessionDep,
                 redis: RedisDep) -> dict[str, Any]:
    batch = await cancel_batch(session, batch=await _owned(session, tenant.id, batch_id),
                               redis=redis)
    return batch_view(batch, (await live_counts(session, [batch]))[batch.id])


async def _owned(session: SessionDep, tenant_id: uuid.UUID, batch_id: str) -> Batch:
    parsed = parse_batch_id(batch_id)
    batch = await get_batch(session, batch_id=parsed, tenant_id=tenant_id) if parsed else None
    if batch is None:
        raise APIError(404, f"No such Batch object: {batch_id}", code="not_found",
                       param="batch_id")
    return batch


def _validate(settings: Settings, batch_id: uuid.UUID, known_models: set[str]) -> None:
    redis = Redis.from_url(settings.redis_url)  # sync client: this runs in a thread
    try:
        with sync_session(settings.database_url) as session:
            validate_batch(session, batch_id=batch_id, storage=storage_for(settings.files_root),
                           settings=settings, redis=redis, known_models=known_models)
    except Exception:
        log.exception("batch validation crashed; the dispatcher retries it",
                      extra={"batch_id": str(batch_id)})
    finally:
        redis.close()

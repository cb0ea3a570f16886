"""The jobs API: list a tenant's jobs, read one, cancel one (docs/jobs-api.md).

Thin wrappers: the queries are service/jobs/listing.py, the cancel service/jobs/cancel.py.
A tenant only ever sees its own jobs; another tenant's look like they don't exist (404).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from scheduler.tiers import TierName
from service.jobs.cancel import cancel_own_job
from service.jobs.job_records import get_job, job_public_view, parse_public_id
from service.jobs.listing import JobFilters, UnknownCursor, list_jobs
from service.store.models.batches import parse_batch_id
from service.store.models.jobs import Job
from service.web.deps import CurrentTenant, RedisDep, SessionDep, SettingsDep
from service.web.errors import APIError
from service.web.responses import TENANT_ROUTES, errors

router = APIRouter(prefix="/v1", responses=TENANT_ROUTES)

# `completed` is what batches and the Responses API call a job that `succeeded`: accepted as a
# filter so either word finds it; jobs still say `succeeded` (the documented status).
JobStatusName = Literal["queued", "assigned", "running", "succeeded", "completed", "failed",
                        "cancelled"]
# Unix seconds up to the last second of year 9999 (what a datetime can hold).
MAX_TIMESTAMP = 253_402_300_799


class JobListQuery(BaseModel):
    """The query of ``GET /v1/jobs``: a page, and filters that each narrow it."""
    limit: int = Field(20, ge=1, le=100, description="Page size.")
    after: str | None = Field(None, description="The last id of the previous page.")
    status: JobStatusName | None = None
    job_class: Literal["realtime", "batch"] | None = Field(None, alias="class")
    tier: TierName | None = None
    model: str | None = Field(None, max_length=256)
    batch_id: str | None = None
    created_after: int | None = Field(None, ge=0, le=MAX_TIMESTAMP,
                                      description="Unix seconds, inclusive.")
    created_before: int | None = Field(None, ge=0, le=MAX_TIMESTAMP,
                                       description="Unix seconds, exclusive.")

    def filters(self) -> JobFilters:
        status = "succeeded" if self.status == "completed" else self.status
        return JobFilters(status=status, job_class=self.job_class,
                          service_tier=self.tier, model=self.model,
                          batch_id=_batch_id(self.batch_id),
                          created_after=_time(self.created_after),
                          created_before=_time(self.created_before))


@router.get("/jobs")
async def read_jobs(tenant: CurrentTenant, session: SessionDep,
                    query: Annotated[JobListQuery, Query()]) -> dict[str, Any]:
    """The caller's jobs, newest first, in OpenAI's list shape."""
    filters, after = query.filters(), query.after
    cursor = _job_id(after, param="after", status=400) if after is not None else None
    try:
        rows, more = await list_jobs(session, tenant_id=tenant.id, filters=filters,
                                     after=cursor, limit=query.limit)
    except UnknownCursor:
        raise APIError(400, f"after: no job with id '{after}'.", code="invalid_value",
                       param="after") from None
    data = [job_public_view(job) for job in rows]
    return {"object": "list", "data": data, "has_more": more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}


@router.get("/jobs/{job_id}", responses=errors(404))
async def read_job(job_id: str, tenant: CurrentTenant, session: SessionDep) -> dict[str, Any]:
    return job_public_view(await _own_job(session, tenant.id, job_id))


@router.post("/jobs/{job_id}/cancel", responses=errors(404, 409))
async def cancel_job(job_id: str, tenant: CurrentTenant, session: SessionDep, redis: RedisDep,
                     settings: SettingsDep) -> dict[str, Any]:
    """Cancel a queued, parked or running job; a running job's engine frees its slot."""
    job = await cancel_own_job(session, redis, tenant_id=tenant.id,
                               job_id=_job_id(job_id, param="job_id", status=404),
                               public_id=job_id, stream_ttl_s=settings.jobs.stream_ttl_seconds)
    return job_public_view(job)


async def _own_job(session: SessionDep, tenant_id: uuid.UUID, job_id: str) -> Job:
    job = await get_job(session, job_id=_job_id(job_id, param="job_id", status=404),
                        tenant_id=tenant_id)
    if job is None:
        raise APIError(404, f"No job with id '{job_id}'.", code="not_found", param="job_id")
    return job


def _job_id(value: str, *, param: str, status: int) -> uuid.UUID:
    parsed = parse_public_id(value)
    if parsed is None:
        if status == 404:
            raise APIError(404, f"No job with id '{value}'.", code="not_found", param=param)
        raise APIError(400, f"{param}: '{value}' is not a job id.", code="invalid_value",
                       param=param)
    return parsed


def _batch_id(value: str | None) -> uuid.UUID | None:
    if value is None:
        return None
    parsed = parse_batch_id(value)
    if parsed is None:
        raise APIError(400, f"batch_id: '{value}' is not a batch id.", code="invalid_value",
                       param="batch_id")
    return parsed


def _time(value: int | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(value, dt.UTC) if value is not None else None

"""The job and batch explorer's reads: which job or batch an id a user quotes names, a job's
detail (its timeline, tokens, plan and targets) and a batch's (its files, line counts, slowest
and failed lines). Any tenant's: these are admin reads.

The ids accepted are the ones users are shown: ``job_<hex>``, the answer's own id
(``chatcmpl-``, ``cmpl-``, ``resp_``), a batch line's ``batch_req_<hex>`` and ``req_<hex>``
(a batch output line's ``request_id``; the hex is the job's), ``batch_<hex>``, a file's
``file-<hex>`` (the batch it belongs to), a bare UUID, and a batch line's ``custom_id`` given
with its batch, and the ``x-request-id`` of the API request that created a job (``req_<hex>``
or the client's own token, kept on the job since revision 0018)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.job_timeline import iso_ms, timeline
from service.batches.batch_records import batch_view, live_counts
from service.store.models.batches import BATCH_PREFIX, Batch, parse_batch_id
from service.store.models.files import StoredFile
from service.store.models.jobs import Job, JobStatus
from service.store.models.tenants import Tenant

Kind = Literal["job", "batch"]
# Job ids in the spellings users see; the hex after the prefix is the job's UUID.
JOB_PREFIXES = ("job_", "chatcmpl-", "cmpl-", "resp_", "batch_req_", "req_")
FILE_PREFIX = "file-"
# How many of a batch's lines its detail lists as slowest and as failed.
LINES_SHOWN = 10


@dataclass(frozen=True, slots=True)
class Found:
    kind: Kind
    id: uuid.UUID
    matched_as: str  # what the query was: job_id, batch_id, request_id, custom_id, file_id, uuid

    @property
    def public_id(self) -> str:
        return (BATCH_PREFIX if self.kind == "batch" else "job_") + self.id.hex


def _uuid(raw: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


def _strip(value: str, prefixes: tuple[str, ...]) -> tuple[str, str] | None:
    for prefix in prefixes:
        if value.startswith(prefix):
            return prefix, value[len(prefix):]
    return None


async def _job_exists(session: AsyncSession, job_id: uuid.UUID) -> bool:
    return await session.scalar(select(Job.id).where(Job.id == job_id)) is not None


async def _batch_exists(session: AsyncSession, batch_id: uuid.UUID) -> bool:
    return await session.scalar(select(Batch.id).where(Batch.id == batch_id)) is not None


async def resolve(session: AsyncSession, q: str, *, batch: str | None = None) -> Found | None:
    """What ``q`` names, or None. ``batch``: look ``q`` up as a custom_id among its lines."""
    q = q.strip()
    if batch:
        batch_id = parse_batch_id(batch.strip())
        if batch_id is None:
            return None
        line = await session.scalar(select(Job.id).where(
            Job.batch_id == batch_id, Job.custom_id == q).order_by(Job.line_no).limit(1))
        return Found("job", line, "custom_id") if line else None
    if q.startswith(BATCH_PREFIX) and not q.startswith("batch_req_"):
        batch_id = _uuid(q[len(BATCH_PREFIX):])
        if batch_id and await _batch_exists(session, batch_id):
            return Found("batch", batch_id, "batch_id")
        return None
    if q.startswith(FILE_PREFIX):
        return await _by_file(session, q[len(FILE_PREFIX):])
    stripped = _strip(q, JOB_PREFIXES)
    if stripped is not None:
        prefix, rest = stripped
        job_id = _uuid(rest)
        if job_id and await _job_exists(session, job_id):
            return Found("job", job_id, "request_id" if prefix == "req_" else "job_id")
        return await _by_request_id(session, q) if prefix == "req_" else None
    raw = _uuid(q)
    if raw is not None:
        if await _job_exists(session, raw):
            return Found("job", raw, "uuid")
        if await _batch_exists(session, raw):
            return Found("batch", raw, "uuid")
    return await _by_request_id(session, q)


async def _by_request_id(session: AsyncSession, q: str) -> Found | None:
    """The job an API request created, by the x-request-id its client saw (ours, req_..., or
    the client's own, which the API keeps when it is a sane token)."""
    job_id = await session.scalar(select(Job.id).where(Job.request_id == q).limit(1))
    return Found("job", job_id, "request_id") if job_id else None


async def _by_file(session: AsyncSession, raw: str) -> Found | None:
    file_id = _uuid(raw)
    if file_id is None:
        return None
    batch_id = await session.scalar(select(Batch.id).where(or_(
        Batch.input_file_id == file_id, Batch.output_file_id == file_id,
        Batch.error_file_id == file_id)).limit(1))
    return Found("batch", batch_id, "file_id") if batch_id else None


def _tenant_ref(tenant: Tenant | None, tenant_id: uuid.UUID) -> dict[str, Any]:
    return {"id": str(tenant_id), "name": tenant.name if tenant else None,
            "plan": tenant.plan if tenant else None}


async def job_detail(session: AsyncSession, job_id: uuid.UUID, *,
                     now: dt.datetime | None = None) -> dict[str, Any] | None:
    job = await session.get(Job, job_id)
    if job is None:
        return None
    tenant = await session.get(Tenant, job.tenant_id)
    error = job.error or None
    return {
        "id": job.public_id, "object": "admin.job", "uuid": str(job.id),
        "tenant": _tenant_ref(tenant, job.tenant_id),
        "api_key_id": str(job.api_key_id) if job.api_key_id else None,
        "batch": {"id": BATCH_PREFIX + job.batch_id.hex, "custom_id": job.custom_id,
                  "line_no": job.line_no} if job.batch_id else None,
        "kind": job.kind, "endpoint": job.endpoint, "model": job.model,
        "service_tier": job.service_tier, "priority": job.priority, "stream": job.stream,
        "max_tokens": job.max_tokens, "status": job.status, "attempt": job.attempt,
        "worker_id": job.worker_id, "finish_reason": job.finish_reason, "error": error,
        "tokens": {"prompt": job.prompt_tokens, "completion": job.completion_tokens,
                   "cached": job.cached_tokens},
        "slo": {"plan": job.slo_plan, "ttft_slo_ms": job.ttft_slo_ms,
                "tpot_slo_ms": job.tpot_slo_ms, "predicted_ttft_ms": job.predicted_ttft_ms},
        "preemption": {"preemptions": job.preemptions or 0,
                       "recomputed_tokens": job.recomputed_tokens or 0},
        "deadline_at": iso_ms(job.deadline_at) if job.deadline_at else None,
        **timeline(job, now=now),
    }


async def batch_detail(session: AsyncSession, batch_id: uuid.UUID) -> dict[str, Any] | None:
    batch = await session.get(Batch, batch_id)
    if batch is None:
        return None
    tenant = await session.get(Tenant, batch.tenant_id)
    counts = (await live_counts(session, [batch]))[batch.id]
    by_status = dict((await session.execute(
        select(Job.status, func.count()).where(Job.batch_id == batch.id)
        .group_by(Job.status))).tuples().all())
    return {
        **batch_view(batch, counts),
        "tenant": _tenant_ref(tenant, batch.tenant_id),
        "files": await _files(session, batch),
        "lines_by_status": {**{s.value: 0 for s in JobStatus}, **by_status,
                            "invalid": batch.invalid_lines},
        "slowest_lines": await _slowest(session, batch.id),
        "failed_lines": await _failed(session, batch.id),
    }


async def _files(session: AsyncSession, batch: Batch) -> list[dict[str, Any]]:
    roles = (("input", batch.input_file_id), ("output", batch.output_file_id),
             ("error", batch.error_file_id))
    ids = [fid for _, fid in roles if fid is not None]
    stored = {f.id: f for f in (await session.scalars(
        select(StoredFile).where(StoredFile.id.in_(ids)))).all()} if ids else {}
    out = []
    for role, fid in roles:
        if fid is None:
            continue
        f = stored.get(fid)
        out.append({"role": role, "id": f"{FILE_PREFIX}{fid.hex}",
                    "filename": f.filename if f else None, "bytes": f.bytes if f else None,
                    "lines": f.line_count if f else None})
    return out


def _line(job_id: uuid.UUID, custom_id: str | None, line_no: int | None,
          **more: Any) -> dict[str, Any]:
    return {"job_id": f"job_{job_id.hex}", "custom_id": custom_id, "line_no": line_no, **more}


async def _slowest(session: AsyncSession, batch_id: uuid.UUID) -> list[dict[str, Any]]:
    """The ended lines that ran longest (start to end of their last attempt)."""
    ran = func.extract("epoch", Job.finished_at - Job.started_at)
    rows = (await session.execute(
        select(Job.id, Job.custom_id, Job.line_no, Job.status, ran.label("ran"),
               Job.completion_tokens, Job.worker_id)
        .where(Job.batch_id == batch_id, Job.started_at.is_not(None),
               Job.finished_at.is_not(None))
        .order_by(ran.desc(), Job.line_no).limit(LINES_SHOWN))).all()
    return [_line(r.id, r.custom_id, r.line_no, status=r.status,
                  run_ms=round(float(r.ran) * 1000), completion_tokens=r.completion_tokens,
                  worker_id=r.worker_id) for r in rows]


async def _failed(session: AsyncSession, batch_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = (await session.execute(
        select(Job.id, Job.custom_id, Job.line_no, Job.error)
        .where(Job.batch_id == batch_id, Job.status == JobStatus.FAILED)
        .order_by(Job.line_no).limit(LINES_SHOWN))).all()
    return [_line(r.id, r.custom_id, r.line_no, code=(r.error or {}).get("code"),
                  message=(r.error or {}).get("message")) for r in rows]

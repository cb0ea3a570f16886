"""Completions usage in OpenAI's Usage API shape (GET /v1/organization/usage/completions), read
from the job rows: tokens per job are stored on the job, with the key that sent it, its class
(batch or not), its service tier and the adapter it ran with, which the daily usage table does
not keep. Grouped by model, an adapter's jobs count under its ``ft:`` name.

What counts is what the usage table counts: jobs a worker ended (``usage_xid`` set), whatever
their status. A job falls in the bucket of the time it was made (``created_at``), so one
tenant's range is one scan of ``ix_jobs_tenant_created_id``. The admin's reads (every tenant,
or one, with a tenant column) share the query.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import BigInteger, Select, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models.jobs import Job, JobKind
from service.store.models.tenants import ApiKey, Tenant
from service.usage.buckets import WIDTHS, PageWindow, encode_cursor, page_window, utc

# group_by values and what they group on. project_id and user_id are OpenAI's: a tenant is one
# organization with no projects or users, so they group nothing and read null.
GROUP_FIELDS = ("model", "api_key_id", "batch", "service_tier", "project_id", "user_id")
ADMIN_GROUP_FIELDS = (*GROUP_FIELDS, "tenant_id")
_NULL_GROUPS = frozenset({"project_id", "user_id"})
RESULT_OBJECT = "organization.usage.completions.result"


@dataclass(frozen=True, slots=True)
class UsageQuery:
    start_time: int
    end_time: int
    bucket_width: str = "1d"
    limit: int | None = None  # buckets per page; None: the width's default
    page_start: int | None = None  # the decoded cursor
    group_by: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    api_key_ids: tuple[uuid.UUID, ...] = ()
    batch: bool | None = None
    tenant_ids: tuple[uuid.UUID, ...] = field(default=())  # admin reads only

    @property
    def width_s(self) -> int:
        return WIDTHS[self.bucket_width].seconds

    def window(self, *, max_buckets: int | None = None) -> PageWindow:
        limit = max_buckets or self.limit or WIDTHS[self.bucket_width].default_limit
        return page_window(start_time=self.start_time, end_time=self.end_time,
                           width_s=self.width_s, limit=limit, page_start=self.page_start)


def shown_model() -> Any:
    """The model a job counts under: an adapter's ``ft:`` name for its jobs (as OpenAI shows a
    fine-tuned model's), else the job's model. A column of the row, so grouping by it costs no
    more than grouping by the base model."""
    return func.coalesce(Job.adapter_model, Job.model)


def _group_columns(group_by: tuple[str, ...]) -> list[Any]:
    columns = {"model": shown_model(), "api_key_id": Job.api_key_id,
               "batch": (Job.kind == JobKind.BATCH.value), "service_tier": Job.service_tier,
               "tenant_id": Job.tenant_id}
    return [columns[g].label(g) for g in group_by if g not in _NULL_GROUPS]


def usage_statement(query: UsageQuery, window: PageWindow, tenant_id: uuid.UUID | None
               ) -> Select[Any]:
    width = query.width_s
    bucket = cast(func.floor(func.extract("epoch", Job.created_at) / width) * width, BigInteger)
    groups = _group_columns(query.group_by)
    stmt = (select(bucket.label("bucket"), *groups, func.count().label("requests"),
                   func.coalesce(func.sum(Job.prompt_tokens), 0).label("input_tokens"),
                   func.coalesce(func.sum(Job.completion_tokens), 0).label("output_tokens"),
                   func.coalesce(func.sum(Job.cached_tokens), 0).label("cached_tokens"))
            .where(Job.created_at >= utc(window.start),
                   Job.created_at < utc(window.end), Job.usage_xid.is_not(None))
            .group_by(bucket, *groups).order_by(bucket, *groups))
    if tenant_id is not None:
        stmt = stmt.where(Job.tenant_id == tenant_id)
    if query.tenant_ids:
        stmt = stmt.where(Job.tenant_id.in_(query.tenant_ids))
    if query.models:
        stmt = stmt.where(shown_model().in_(query.models))
    if query.api_key_ids:
        stmt = stmt.where(Job.api_key_id.in_(query.api_key_ids))
    if query.batch is not None:
        kind = JobKind.BATCH if query.batch else JobKind.REALTIME
        stmt = stmt.where(Job.kind == kind.value)
    return stmt


def _result(row: Any, group_by: tuple[str, ...], names: dict[uuid.UUID, str]
            ) -> dict[str, Any]:
    out: dict[str, Any] = {
        "object": RESULT_OBJECT, "input_tokens": int(row.input_tokens),
        "output_tokens": int(row.output_tokens), "input_cached_tokens": int(row.cached_tokens),
        "input_uncached_tokens": int(row.input_tokens) - int(row.cached_tokens),
        "input_audio_tokens": 0, "output_audio_tokens": 0,
        "num_model_requests": int(row.requests),
        "project_id": None, "user_id": None, "api_key_id": None, "model": None, "batch": None,
        "service_tier": None}
    for name in group_by:
        if name in _NULL_GROUPS:
            continue
        value = getattr(row, name)
        out[name] = str(value) if isinstance(value, uuid.UUID) else value
    # Ours, beside OpenAI's fields: the names a person knows the key and the tenant by.
    if "api_key_id" in group_by:
        out["api_key_name"] = names.get(row.api_key_id) if row.api_key_id else None
    if "tenant_id" in group_by:
        out["tenant_name"] = names.get(row.tenant_id)
    return out


async def _names(session: AsyncSession, group_by: tuple[str, ...], rows: list[Any]
                 ) -> dict[uuid.UUID, str]:
    """Key and tenant names of the rows' ids (every row is already in scope)."""
    names: dict[uuid.UUID, str] = {}
    keys = {r.api_key_id for r in rows if r.api_key_id} if "api_key_id" in group_by else set()
    if keys:
        found = await session.execute(select(ApiKey.id, ApiKey.name).where(ApiKey.id.in_(keys)))
        names.update(dict(found.tuples().all()))
    if "tenant_id" in group_by and rows:
        found = await session.execute(select(Tenant.id, Tenant.name).where(
            Tenant.id.in_({r.tenant_id for r in rows})))
        names.update(dict(found.tuples().all()))
    return names


async def usage_page(session: AsyncSession, query: UsageQuery, *,
                     tenant_id: uuid.UUID | None, max_buckets: int | None = None
                     ) -> dict[str, Any]:
    """One page of buckets, every bucket of the page present (``results`` empty when idle).
    ``tenant_id`` scopes it to one tenant (a tenant's own read); None reads every tenant."""
    window = query.window(max_buckets=max_buckets)
    rows = list((await session.execute(usage_statement(query, window, tenant_id))).all())
    names = await _names(session, query.group_by, rows)
    by_bucket: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_bucket.setdefault(int(row.bucket), []).append(_result(row, query.group_by, names))
    width = query.width_s
    data = [{"object": "bucket", "start_time": start, "end_time": start + width,
             "results": by_bucket.get(start, [])} for start in window.bucket_starts(width)]
    more = window.next_start is not None
    return {"object": "page", "data": data, "has_more": more,
            "next_page": encode_cursor(window.end) if more else None}

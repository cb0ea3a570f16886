"""Usage per API key, from the jobs table (jobs record the key that sent them; the daily usage
table has no key). Finished jobs only, by the UTC day they were created. Batch lines carry no
key of their own: they count under `key_id` None."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import Date, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models.jobs import Job, JobStatus
from service.store.models.tenants import ApiKey

NO_KEY = "(batch lines, no key)"
_FINISHED = (JobStatus.SUCCEEDED.value, JobStatus.FAILED.value)


def _sums() -> list[Any]:
    return [func.count().label("requests"),
            func.count().filter(Job.status == JobStatus.FAILED.value).label("failed_requests"),
            func.coalesce(func.sum(Job.prompt_tokens), 0).label("prompt_tokens"),
            func.coalesce(func.sum(Job.completion_tokens), 0).label("completion_tokens")]


def _window(tenant_id: uuid.UUID, since: dt.date) -> list[Any]:
    start = dt.datetime.combine(since, dt.time(), tzinfo=dt.UTC)
    return [Job.tenant_id == tenant_id, Job.created_at >= start, Job.status.in_(_FINISHED)]


async def key_totals(session: AsyncSession, *, tenant_id: uuid.UUID, since: dt.date
                     ) -> list[dict[str, Any]]:
    rows = (await session.execute(
        select(Job.api_key_id, *_sums()).where(*_window(tenant_id, since))
        .group_by(Job.api_key_id))).mappings().all()
    return [{"key_id": str(r["api_key_id"]) if r["api_key_id"] else None,
             "requests": r["requests"], "failed_requests": r["failed_requests"],
             "prompt_tokens": int(r["prompt_tokens"]),
             "completion_tokens": int(r["completion_tokens"])} for r in rows]


async def key_series(session: AsyncSession, *, tenant_id: uuid.UUID, since: dt.date,
                     until: dt.date) -> dict[str, Any]:
    """The shape of service.usage.series.daily_series, one series per key (named)."""
    day = cast(func.timezone("UTC", Job.created_at), Date).label("day")
    label = func.coalesce(ApiKey.name + " (" + ApiKey.prefix + "…)", NO_KEY)
    rows = (await session.execute(
        select(day, Job.api_key_id, label.label("label"), *_sums())
        .outerjoin(ApiKey, ApiKey.id == Job.api_key_id)
        .where(*_window(tenant_id, since), Job.created_at < dt.datetime.combine(
            until + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC))
        .group_by(day, Job.api_key_id, "label"))).mappings().all()
    days = [since + dt.timedelta(days=i) for i in range((until - since).days + 1)]
    index = {d: i for i, d in enumerate(days)}
    metrics = ("requests", "failed_requests", "prompt_tokens", "completion_tokens")
    series: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = str(r["api_key_id"]) if r["api_key_id"] else "none"
        entry = series.setdefault(key, {"key": key, "label": r["label"],
                                        **{m: [0] * len(days) for m in metrics}})
        for m in metrics:
            entry[m][index[r["day"]]] = int(r[m] or 0)
    ordered = sorted(series.values(), key=lambda s: -sum(s["requests"]))
    return {"group_by": "key", "days": [d.isoformat() for d in days], "series": ordered,
            "totals": {m: sum(sum(s[m]) for s in ordered) for m in metrics}}



"""Usage over time for the admin dashboard: one bucket per UTC day from the usage table,
split by model, job class or tenant, every day of the range present (zero when idle)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models.tenants import Tenant
from service.store.models.usage import UsageDaily

GroupBy = Literal["model", "job_class", "tenant"]
METRICS = ("requests", "failed_requests", "prompt_tokens", "completion_tokens")


async def daily_series(session: AsyncSession, *, tenant_id: uuid.UUID | None, since: dt.date,
                       until: dt.date, group_by: GroupBy) -> dict[str, Any]:
    group_col = {"model": UsageDaily.model, "job_class": UsageDaily.job_class,
                 "tenant": Tenant.name}[group_by]
    query = (select(UsageDaily.day, group_col.label("grp"),
                    *(func.sum(getattr(UsageDaily, m)).label(m) for m in METRICS))
             .join(Tenant, Tenant.id == UsageDaily.tenant_id)
             .where(UsageDaily.day >= since, UsageDaily.day <= until)
             .group_by(UsageDaily.day, group_col))
    if tenant_id is not None:
        query = query.where(UsageDaily.tenant_id == tenant_id)
    days = [since + dt.timedelta(days=i) for i in range((until - since).days + 1)]
    index = {d: i for i, d in enumerate(days)}
    series: dict[str, dict[str, list[int]]] = {}
    for row in (await session.execute(query)).mappings().all():
        values = series.setdefault(row["grp"], {m: [0] * len(days) for m in METRICS})
        for m in METRICS:
            values[m][index[row["day"]]] = int(row[m] or 0)
    ordered = sorted(series.items(), key=lambda kv: -sum(kv[1]["prompt_tokens"])
                     - sum(kv[1]["completion_tokens"]))
    return {"group_by": group_by, "days": [d.isoformat() for d in days],
            "series": [{"key": key, **values} for key, values in ordered],
            "totals": {m: sum(sum(v[m]) for _, v in ordered) for m in METRICS}}

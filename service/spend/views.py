"""What the spend admin routes answer: sums by a dimension, with names for ids, and the CSV
export (one row per day, tenant, key, model and price class)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.spend.money import shown
from service.spend.queries import spend_lines, utc_midnight
from service.spend.report import Dimension, SpendLine, daily_costs, group, total
from service.store.models.tenants import ApiKey, Tenant

NO_KEY = "(batch lines, no key)"
CSV_COLUMNS = ("day", "tenant_id", "tenant", "key_id", "key", "model", "job_class",
               "price_version", "requests", "prompt_tokens", "completion_tokens", "cost",
               "currency")


async def window_lines(session: AsyncSession, *, since: dt.date, until: dt.date,
                       tenant_id: uuid.UUID | None) -> list[SpendLine]:
    """Jobs that ended on the UTC days ``since`` to ``until``, both included."""
    return await spend_lines(session, start=utc_midnight(since),
                             end=utc_midnight(until + dt.timedelta(days=1)),
                             tenant_ids=None if tenant_id is None else [tenant_id])


async def _names(session: AsyncSession, lines: Sequence[SpendLine]
                 ) -> tuple[dict[str, str], dict[str, str]]:
    tenant_ids = {line.tenant_id for line in lines}
    key_ids = {line.key_id for line in lines if line.key_id is not None}
    tenants = {str(i): n for i, n in (await session.execute(
        select(Tenant.id, Tenant.name).where(Tenant.id.in_(tenant_ids)))).all()}
    keys = {str(i): f"{n} ({p}…)" for i, n, p in (await session.execute(
        select(ApiKey.id, ApiKey.name, ApiKey.prefix).where(ApiKey.id.in_(key_ids)))).all()}
    return tenants, keys


async def spend_view(session: AsyncSession, lines: Sequence[SpendLine], *, by: Dimension,
                     since: dt.date, until: dt.date, currency: str) -> dict[str, Any]:
    tenants, keys = await _names(session, lines)
    rows = []
    for (value,), sums in group(lines, [by]).items():
        row: dict[str, Any] = {by: value, **sums.view()}
        if by == "tenant":
            row["tenant_name"] = tenants.get(value, value)
        elif by == "key":
            row["key"] = value or None
            row["key_name"] = keys.get(value, "(deleted key)") if value else NO_KEY
        rows.append(row)
    days = [since + dt.timedelta(days=i) for i in range((until - since).days + 1)]
    return {"object": "spend", "currency": currency, "since": since.isoformat(),
            "until": until.isoformat(), "group_by": by, "totals": total(lines).view(),
            "data": rows, "days": [d.isoformat() for d in days],
            "daily_cost": daily_costs(lines, days)}


async def spend_csv(session: AsyncSession, lines: Sequence[SpendLine], *,
                    currency: str) -> str:
    tenants, keys = await _names(session, lines)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    sums = group(lines, ["day", "tenant", "key", "model", "job_class"])
    versions: dict[tuple[str, ...], set[int]] = {}
    for line in lines:
        cell: tuple[str, ...] = (line.day.isoformat(), str(line.tenant_id),
                                 str(line.key_id) if line.key_id else "", line.model,
                                 line.job_class)
        versions.setdefault(cell, set()).update({line.price_id} if line.price_id else set())
    for key in sorted(sums):
        day, tenant_id, key_id, model, job_class = key
        s = sums[key]
        writer.writerow((day, tenant_id, _cell(tenants.get(tenant_id, "")), key_id,
                         _cell(keys.get(key_id, "") if key_id else NO_KEY), _cell(model),
                         job_class, " ".join(str(v) for v in sorted(versions.get(key, ())))
                         or "unpriced", s.requests, s.prompt_tokens, s.completion_tokens,
                         shown(s.cost), currency))
    return out.getvalue()


def _cell(text: str) -> str:
    """A name that a spreadsheet would run as a formula is prefixed with a quote (CSV
    injection: tenant, key and model names are chosen by people)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text

"""Spend read from Postgres: the ended jobs of a window grouped into lines, each under the price
version in force when its jobs ended, and the prices themselves. Async for the API, sync for
the dispatcher's budget check; the statements are shared."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Collection, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import Date, Select, and_, case, cast, func, literal, null, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from service.spend.money import JOB_CLASSES, JobClass, Price
from service.spend.report import SpendLine, priced_line
from service.store.models.jobs import Job
from service.store.models.spend import ModelPrice
from service.usage.completions import shown_model

# Each version's interval: from its effective_from to the next version's of the same model.
_VERSIONS = select(
    ModelPrice.id, ModelPrice.model, ModelPrice.effective_from.label("since"),
    func.lead(ModelPrice.effective_from).over(
        partition_by=ModelPrice.model,
        order_by=(ModelPrice.effective_from, ModelPrice.id)).label("until"),
).cte("price_versions")


def lines_statement(*, start: dt.datetime, end: dt.datetime,
                    tenant_ids: Collection[uuid.UUID] | None, detail: bool = True
                    ) -> Select[Any]:
    """Ended jobs with ``start <= finished_at < end`` grouped by tenant, model, price class and
    price version, and with ``detail`` by key and UTC day too (a budget needs only each
    tenant's sum: without, far fewer lines come back)."""
    klass = case((Job.kind == "batch", "batch"), (Job.service_tier == "flex", "flex"),
                 else_="realtime").label("job_class")
    key = Job.api_key_id if detail else null().label("api_key_id")
    day = (cast(func.timezone("UTC", Job.finished_at), Date) if detail
           else literal(start.date(), Date)).label("day")
    # An adapter's jobs show under its ft: name (service.usage.completions.shown_model) and
    # pay the base model's price (the job's model). A budget needs neither split.
    model = (shown_model() if detail else Job.model).label("model")
    in_force = and_(_VERSIONS.c.model == Job.model, _VERSIONS.c.since <= Job.finished_at,
                    or_(_VERSIONS.c.until.is_(None), Job.finished_at < _VERSIONS.c.until))
    grouped = [Job.tenant_id, Job.model, klass, _VERSIONS.c.id,
               *((model, key, day) if detail else ())]
    query = (select(Job.tenant_id, key, model, klass, day,
                    _VERSIONS.c.id.label("price_id"), func.count().label("requests"),
                    func.coalesce(func.sum(Job.prompt_tokens), 0).label("prompt_tokens"),
                    func.coalesce(func.sum(Job.completion_tokens), 0).label("completion_tokens"))
             .outerjoin(_VERSIONS, in_force)
             .where(Job.finished_at >= start, Job.finished_at < end)
             .group_by(*grouped))
    if tenant_ids is not None:
        query = query.where(Job.tenant_id.in_(list(tenant_ids)))
    return query


def to_price(row: ModelPrice) -> Price | None:
    if row.input_per_mtok is None or row.output_per_mtok is None:
        return None  # an unpricing version
    return Price(row.input_per_mtok, row.output_per_mtok, row.batch_discount_pct,
                 row.flex_discount_pct, row.batch_input_per_mtok, row.batch_output_per_mtok,
                 row.flex_input_per_mtok, row.flex_output_per_mtok)


def cast_class(value: str) -> JobClass:
    for klass in JOB_CLASSES:
        if klass == value:
            return klass
    raise ValueError(f"unknown price class {value!r}")


def _lines(rows: Sequence[Any], prices: dict[int, Price | None]) -> list[SpendLine]:
    return [priced_line(tenant_id=r.tenant_id, key_id=r.api_key_id, model=r.model,
                        job_class=cast_class(r.job_class),
                        day=r.day, price_id=r.price_id, prices=prices, requests=int(r.requests),
                        prompt_tokens=int(r.prompt_tokens),
                        completion_tokens=int(r.completion_tokens)) for r in rows]


def _price_ids(rows: Sequence[Any]) -> set[int]:
    return {r.price_id for r in rows if r.price_id is not None}


async def spend_lines(session: AsyncSession, *, start: dt.datetime, end: dt.datetime,
                      tenant_ids: Collection[uuid.UUID] | None = None, detail: bool = True
                      ) -> list[SpendLine]:
    rows = (await session.execute(lines_statement(start=start, end=end, tenant_ids=tenant_ids,
                                                  detail=detail))).all()
    ids = _price_ids(rows)
    found = (await session.scalars(select(ModelPrice).where(ModelPrice.id.in_(ids)))).all()
    return _lines(rows, {p.id: to_price(p) for p in found})


def spend_lines_sync(session: Session, *, start: dt.datetime, end: dt.datetime,
                     tenant_ids: Collection[uuid.UUID] | None = None, detail: bool = True
                     ) -> list[SpendLine]:
    rows = session.execute(lines_statement(start=start, end=end, tenant_ids=tenant_ids,
                                           detail=detail)).all()
    ids = _price_ids(rows)
    found = session.scalars(select(ModelPrice).where(ModelPrice.id.in_(ids))).all()
    return _lines(rows, {p.id: to_price(p) for p in found})


def month_spend(lines: Sequence[SpendLine]) -> dict[uuid.UUID, Decimal]:
    out: dict[uuid.UUID, Decimal] = {}
    for line in lines:
        out[line.tenant_id] = out.get(line.tenant_id, Decimal(0)) + line.cost
    return out


def utc_midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)

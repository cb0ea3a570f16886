"""Model prices in Postgres: the version in force per model, its history, and a change (a new
version, in force from now; nothing is edited in place)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.spend.money import DEFAULT_DISCOUNT_PCT, JOB_CLASSES, shown
from service.spend.queries import to_price
from service.store.models.served_models import ServedModel
from service.store.models.spend import ModelPrice

UNPRICED = "unpriced"


def price_view(row: ModelPrice | None, model: str) -> dict[str, Any]:
    """A model's price as the API shows it: per-million-token prices per class (what each
    class pays, discounts applied), or ``status: unpriced`` (its jobs cost 0)."""
    price = to_price(row) if row is not None else None
    if row is None or price is None:
        return {"model": model, "status": UNPRICED, "classes": None,
                "effective_from": row.effective_from.isoformat() if row else None,
                "version": row.id if row else None}
    classes = {}
    for klass in JOB_CLASSES:
        rate_in, rate_out = price.rates(klass)
        classes[klass] = {"input_per_mtok": shown(rate_in), "output_per_mtok": shown(rate_out)}
    return {"model": model, "status": "priced", "classes": classes,
            "input_per_mtok": shown(price.input_per_mtok),
            "output_per_mtok": shown(price.output_per_mtok),
            "batch_discount_pct": f"{price.batch_discount_pct:f}",
            "flex_discount_pct": f"{price.flex_discount_pct:f}",
            "batch_input_per_mtok": _opt(price.batch_input_per_mtok),
            "batch_output_per_mtok": _opt(price.batch_output_per_mtok),
            "flex_input_per_mtok": _opt(price.flex_input_per_mtok),
            "flex_output_per_mtok": _opt(price.flex_output_per_mtok),
            "effective_from": row.effective_from.isoformat(), "version": row.id,
            "created_by": row.created_by}


def _opt(value: Decimal | None) -> str | None:
    return None if value is None else shown(value)


async def current_prices(session: AsyncSession) -> dict[str, ModelPrice]:
    """The newest version of every model ever priced (an unpricing version included)."""
    rows = (await session.scalars(
        select(ModelPrice).distinct(ModelPrice.model)
        .order_by(ModelPrice.model, ModelPrice.effective_from.desc(), ModelPrice.id.desc()))).all()
    return {r.model: r for r in rows}


async def list_prices(session: AsyncSession, offered: Iterable[str] = ()
                      ) -> list[dict[str, Any]]:
    """Every priced model, every model offered now and every one offered before (unpriced
    until given a price), by name."""
    current = await current_prices(session)
    served = set((await session.scalars(select(ServedModel.name))).all()) | set(offered)
    return [price_view(current.get(m), m) for m in sorted(served | set(current))]


async def price_history(session: AsyncSession, model: str) -> list[dict[str, Any]]:
    rows = (await session.scalars(
        select(ModelPrice).where(ModelPrice.model == model)
        .order_by(ModelPrice.effective_from.desc(), ModelPrice.id.desc()))).all()
    return [price_view(r, model) for r in rows]


async def add_version(session: AsyncSession, *, model: str, actor: str,
                      fields: dict[str, Decimal | None] | None,
                      now: dt.datetime | None = None) -> ModelPrice:
    """A new version in force from ``now`` (default: this transaction's start): ``fields``
    (the input, output, discount and explicit class prices), or None to unprice the model."""
    values: dict[str, Any] = dict(fields or {})
    values.setdefault("batch_discount_pct", DEFAULT_DISCOUNT_PCT)
    values.setdefault("flex_discount_pct", DEFAULT_DISCOUNT_PCT)
    if now is not None:
        values["effective_from"] = now
    row = ModelPrice(model=model, created_by=actor, **values)  # else from Postgres's clock,
    session.add(row)  # the one jobs' finished_at is read from
    await session.flush()
    await session.refresh(row)
    return row

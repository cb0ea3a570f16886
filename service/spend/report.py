"""Spend lines and their sums, pure: a line is one tenant, key, model, price class and UTC day
under one price version, with its tokens and what they cost."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from service.spend.money import JobClass, Price, charge, shown

Dimension = Literal["tenant", "key", "model", "job_class", "day"]
DIMENSIONS: tuple[Dimension, ...] = ("tenant", "key", "model", "job_class", "day")


@dataclass(frozen=True, slots=True)
class SpendLine:
    tenant_id: uuid.UUID
    key_id: uuid.UUID | None  # None: batch lines and jobs sent before keys were recorded
    model: str
    job_class: JobClass
    day: dt.date
    price_id: int | None  # the price version in force when the jobs ended; None: unpriced
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost: Decimal

    def value(self, dim: Dimension) -> str:
        return {"tenant": str(self.tenant_id), "key": str(self.key_id) if self.key_id else "",
                "model": self.model, "job_class": self.job_class,
                "day": self.day.isoformat()}[dim]


def priced_line(*, tenant_id: uuid.UUID, key_id: uuid.UUID | None, model: str,
                job_class: JobClass, day: dt.date, price_id: int | None,
                prices: Mapping[int, Price | None], requests: int, prompt_tokens: int,
                completion_tokens: int) -> SpendLine:
    price = prices.get(price_id) if price_id is not None else None
    return SpendLine(tenant_id, key_id, model, job_class, day, price_id if price else None,
                     requests, prompt_tokens, completion_tokens,
                     charge(prompt_tokens, completion_tokens, price, job_class))


@dataclass(slots=True)
class Total:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Decimal = Decimal(0)
    unpriced_requests: int = 0  # requests of models without a price then (they cost 0)
    models: set[str] = field(default_factory=set)

    def add(self, line: SpendLine) -> None:
        self.requests += line.requests
        self.prompt_tokens += line.prompt_tokens
        self.completion_tokens += line.completion_tokens
        self.cost += line.cost
        if line.price_id is None:
            self.unpriced_requests += line.requests
        self.models.add(line.model)

    def view(self) -> dict[str, Any]:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost": shown(self.cost),
                "unpriced_requests": self.unpriced_requests}


def total(lines: Iterable[SpendLine]) -> Total:
    out = Total()
    for line in lines:
        out.add(line)
    return out


def group(lines: Iterable[SpendLine], by: Sequence[Dimension]) -> dict[tuple[str, ...], Total]:
    """Sums per distinct value of ``by``, most costly first (then by the values)."""
    sums: dict[tuple[str, ...], Total] = {}
    for line in lines:
        key = tuple(line.value(d) for d in by)
        sums.setdefault(key, Total()).add(line)
    return dict(sorted(sums.items(), key=lambda kv: (-kv[1].cost, kv[0])))


def daily_costs(lines: Iterable[SpendLine], days: Sequence[dt.date]) -> list[str]:
    """The cost of each of ``days`` (zero when idle), for a chart."""
    per_day = {d: Decimal(0) for d in days}
    for line in lines:
        if line.day in per_day:
            per_day[line.day] += line.cost
    return [shown(per_day[d]) for d in days]

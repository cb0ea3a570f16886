"""Money arithmetic (service.spend.money, service.spend.report): Decimal exactness, class
discounts and explicit class prices, unpriced models, thresholds, and sums."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest

from service.spend.money import (
    Price,
    charge,
    crossed_thresholds,
    job_class,
    next_month,
    percent_used,
    shown,
)
from service.spend.report import daily_costs, group, priced_line, total

D = Decimal
PRICE = Price(D("0.15"), D("0.60"))  # per million tokens


def test_realtime_pays_the_list_price_exactly() -> None:
    assert charge(1_000_000, 0, PRICE, "realtime") == D("0.15")
    assert charge(1, 1, PRICE, "realtime") == D("0.00000075")


def test_batch_and_flex_are_half_price_by_default() -> None:
    assert PRICE.rates("batch") == (D("0.075"), D("0.30"))
    assert charge(2_000_000, 1_000_000, PRICE, "flex") == D("0.45")


def test_a_class_discount_or_explicit_price_wins() -> None:
    price = Price(D("1"), D("2"), batch_discount_pct=D("25"), flex_discount_pct=D("0"),
                  flex_output_per_mtok=D("0.5"))
    assert price.rates("batch") == (D("0.75"), D("1.5"))
    assert price.rates("flex") == (D("1"), D("0.5"))  # input at 0% off, output explicit


def test_unpriced_costs_zero() -> None:
    assert charge(10**9, 10**9, None, "realtime") == 0


def test_many_small_charges_sum_exactly() -> None:
    # 10,000 requests of 3 tokens at 0.10/M: float arithmetic drifts, Decimal does not.
    price = Price(D("0.10"), D("0.10"))
    assert sum((charge(1, 2, price, "realtime") for _ in range(10_000)), D(0)) == D("0.003")
    assert shown(D("0.003")) == "0.003000" and shown(D("1E-9")) == "0.000000"


def test_job_class_from_kind_and_tier() -> None:
    assert job_class("batch", "default") == "batch"
    assert job_class("realtime", "flex") == "flex"
    assert job_class("realtime", "priority") == job_class("realtime", None) == "realtime"


@pytest.mark.parametrize(("spend", "sent", "expected"), [
    ("49.99", [], []),
    ("50.00", [], [50]),
    ("80.00", [50], [80]),
    ("130", [], [50, 80, 100]),
    ("130", [50, 80, 100], []),
])
def test_thresholds_cross_once(spend: str, sent: list[int], expected: list[int]) -> None:
    assert crossed_thresholds(D(spend), D("100"), [100, 50, 80], sent) == expected


def test_percent_and_months() -> None:
    assert percent_used(D("1"), D("3")) == D("33.33")
    assert next_month(dt.date(2026, 12, 6)) == dt.date(2027, 1, 1)
    assert next_month(dt.date(2026, 1, 31)) == dt.date(2026, 2, 1)


def test_lines_sum_by_dimension_and_day() -> None:
    t1, t2, key = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    day = dt.date(2026, 12, 1)
    prices = {1: PRICE}
    lines = [
        priced_line(tenant_id=t1, key_id=key, model="m", job_class="realtime", day=day,
                    price_id=1, prices=prices, requests=2, prompt_tokens=1_000_000,
                    completion_tokens=0),
        priced_line(tenant_id=t1, key_id=None, model="m", job_class="batch", day=day,
                    price_id=1, prices=prices, requests=1, prompt_tokens=1_000_000,
                    completion_tokens=0),
        priced_line(tenant_id=t2, key_id=None, model="free", job_class="realtime",
                    day=day + dt.timedelta(days=1), price_id=None, prices=prices, requests=5,
                    prompt_tokens=7, completion_tokens=7),
    ]
    sums = group(lines, ["tenant"])
    assert list(sums) == [(str(t1),), (str(t2),)]  # most costly first
    assert sums[(str(t1),)].cost == D("0.225") and sums[(str(t2),)].cost == 0
    assert total(lines).view() == {"requests": 8, "prompt_tokens": 2_000_007,
                                   "completion_tokens": 7, "cost": "0.225000",
                                   "unpriced_requests": 5}
    assert daily_costs(lines, [day, day + dt.timedelta(days=1), day + dt.timedelta(days=2)]) \
        == ["0.225000", "0.000000", "0.000000"]

"""Money arithmetic, pure: what a job class pays per token under a price, what a line of usage
costs, and which budget thresholds a month's spend has crossed. Decimal throughout (never a
float: 0.1 + 0.2 must stay 0.3 when thousands of lines are summed)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

JobClass = Literal["realtime", "batch", "flex"]
JOB_CLASSES: tuple[JobClass, ...] = ("realtime", "batch", "flex")
MILLION = Decimal(1_000_000)
HUNDRED = Decimal(100)
# OpenAI's Batch API is half price; flex processing is too. Used when a price names no other.
DEFAULT_DISCOUNT_PCT = Decimal(50)
# What amounts are shown and exported with: a millionth of the currency unit (a one-token
# request of a cheap model costs well under a cent).
SHOWN = Decimal("0.000001")


@dataclass(frozen=True, slots=True)
class Price:
    """A model's prices per million tokens. Batch and flex pay the realtime price less their
    discount, unless an explicit price for the class is given."""

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    batch_discount_pct: Decimal = DEFAULT_DISCOUNT_PCT
    flex_discount_pct: Decimal = DEFAULT_DISCOUNT_PCT
    batch_input_per_mtok: Decimal | None = None
    batch_output_per_mtok: Decimal | None = None
    flex_input_per_mtok: Decimal | None = None
    flex_output_per_mtok: Decimal | None = None

    def rates(self, job_class: JobClass) -> tuple[Decimal, Decimal]:
        """(input, output) per million tokens for ``job_class``."""
        if job_class == "realtime":
            return self.input_per_mtok, self.output_per_mtok
        if job_class == "batch":
            pct, explicit_in, explicit_out = (self.batch_discount_pct, self.batch_input_per_mtok,
                                              self.batch_output_per_mtok)
        else:
            pct, explicit_in, explicit_out = (self.flex_discount_pct, self.flex_input_per_mtok,
                                              self.flex_output_per_mtok)
        keep = (HUNDRED - pct) / HUNDRED
        return (self.input_per_mtok * keep if explicit_in is None else explicit_in,
                self.output_per_mtok * keep if explicit_out is None else explicit_out)


def job_class(kind: str, service_tier: str | None) -> JobClass:
    """The price class of a job: batch lines are batch; realtime requests that ran on the flex
    tier (asked for, or overflowed past a rate limit) are flex; the rest realtime."""
    if kind == "batch":
        return "batch"
    return "flex" if service_tier == "flex" else "realtime"


def charge(prompt_tokens: int, completion_tokens: int, price: Price | None,
           job_class: JobClass) -> Decimal:
    """The exact cost of these tokens (not rounded); an unpriced model costs 0."""
    if price is None:
        return Decimal(0)
    rate_in, rate_out = price.rates(job_class)
    return (prompt_tokens * rate_in + completion_tokens * rate_out) / MILLION


def shown(amount: Decimal) -> str:
    """An amount as the API, the CLI and the CSV show it: six decimals, never exponent form."""
    return f"{amount.quantize(SHOWN):f}"


def month_start(day: dt.date) -> dt.date:
    return day.replace(day=1)


def next_month(day: dt.date) -> dt.date:
    first = month_start(day)
    return (first + dt.timedelta(days=32)).replace(day=1)


def percent_used(spend: Decimal, limit: Decimal) -> Decimal:
    """Spend as a percentage of a positive limit, two decimals."""
    return (spend * HUNDRED / limit).quantize(Decimal("0.01"))


def crossed_thresholds(spend: Decimal, limit: Decimal, thresholds: Iterable[int],
                       already_sent: Iterable[int] = ()) -> list[int]:
    """The thresholds (percent of ``limit``) that ``spend`` has reached and that have not been
    alerted yet, ascending. Reaching is inclusive: 50.00 of 100.00 crosses 50%."""
    sent = set(already_sent)
    return sorted(t for t in set(thresholds) if t not in sent and spend * HUNDRED >= limit * t)


def over_budget(spend: Decimal, limit: Decimal) -> bool:
    return spend >= limit

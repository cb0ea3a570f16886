"""Request bodies of the spend admin API. Money is a decimal (a JSON string such as "0.15" or a
number), at least 0, at most six decimals; never a float in arithmetic."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from pydantic import ConfigDict, Field, StrictBool, StrictInt

from service.spend.budgets import DEFAULT_THRESHOLDS
from service.store.storable import StorableModel

MONEY_MAX = Decimal("999999999999")  # 12 digits before the point: the Numeric(18, 6) columns
MODEL_NAME_MAX = 256  # the jobs.model column

Money = Annotated[Decimal, Field(ge=0, le=MONEY_MAX, decimal_places=6)]
PositiveMoney = Annotated[Decimal, Field(gt=0, le=MONEY_MAX, decimal_places=6)]
Percent = Annotated[Decimal, Field(ge=0, le=100, decimal_places=2)]
Threshold = Annotated[StrictInt, Field(ge=1, le=100)]


class PriceSet(StorableModel):
    """A model's new prices per million tokens, in force from now. Batch and flex pay the
    realtime prices less their discount (50% unless given) unless their own prices are
    given."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=MODEL_NAME_MAX)
    input_per_mtok: Money
    output_per_mtok: Money
    batch_discount_pct: Percent = Decimal(50)
    flex_discount_pct: Percent = Decimal(50)
    batch_input_per_mtok: Money | None = None
    batch_output_per_mtok: Money | None = None
    flex_input_per_mtok: Money | None = None
    flex_output_per_mtok: Money | None = None


class BudgetSet(StorableModel):
    """A tenant's monthly budget (UTC calendar months)."""

    model_config = ConfigDict(extra="forbid")

    monthly_limit: PositiveMoney
    thresholds: list[Threshold] = Field(default=list(DEFAULT_THRESHOLDS), max_length=10)
    hard_stop: StrictBool = False

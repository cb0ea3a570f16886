"""Quota limits: the plan's defaults merged with a tenant's overrides.

A limit of None means "no limit". Overrides are sparse: a key present with a value replaces
the plan default; a key present with None lifts the limit; a missing key inherits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

QUOTA_FIELDS = ("requests_per_minute", "tokens_per_minute", "concurrent_requests",
                "batch_enqueued_tokens", "monthly_tokens", "monthly_alert_percent")


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None  # prompt + completion, reserved at admission
    concurrent_requests: int | None = None  # open realtime-API requests
    batch_enqueued_tokens: int | None = None  # batch work admitted but not finished
    monthly_tokens: int | None = None  # calendar month (UTC) budget
    monthly_alert_percent: int = 80  # soft alert level: warn, don't refuse

    @property
    def monthly_alert_tokens(self) -> int | None:
        if self.monthly_tokens is None:
            return None
        return self.monthly_tokens * self.monthly_alert_percent // 100

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class QuotaSpec(BaseModel):
    """Validates a quota document from the admin API or the plans (``tiers``) table."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: int | None = Field(default=None, ge=0)
    tokens_per_minute: int | None = Field(default=None, ge=0)
    concurrent_requests: int | None = Field(default=None, ge=0)
    batch_enqueued_tokens: int | None = Field(default=None, ge=0)
    monthly_tokens: int | None = Field(default=None, ge=0)
    monthly_alert_percent: int | None = Field(default=None, ge=1, le=100)


def validate_quota_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """Keeps exactly the keys the caller sent (so None can mean "lift the limit")."""
    spec = QuotaSpec.model_validate(doc)
    return {k: getattr(spec, k) for k in doc}


def effective_limits(plan_defaults: dict[str, Any], overrides: dict[str, Any] | None
                     ) -> QuotaLimits:
    merged = {k: v for k, v in plan_defaults.items() if k in QUOTA_FIELDS}
    merged.update({k: v for k, v in (overrides or {}).items() if k in QUOTA_FIELDS})
    if merged.get("monthly_alert_percent") is None:
        merged.pop("monthly_alert_percent", None)
    return QuotaLimits(**merged)

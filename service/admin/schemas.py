"""Request bodies for the admin API."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from service.store.quota_limits import QuotaSpec
from service.store.storable import StorableModel
from service.tiers.defaults import ALL_SERVICE_TIERS

TIER_NAME_MAX = 32  # the tiers.name column
SLO_MAX_MS = 24 * 3600 * 1000  # a day: well inside the int4 columns that hold the targets


class TenantCreate(StorableModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    tier: str = "standard"
    issue_key: bool = True  # convenient default: a new tenant usually needs a key at once


class TenantUpdate(StorableModel):
    model_config = ConfigDict(extra="forbid")
    tier: str | None = None
    suspended: bool | None = None


class KeyCreate(StorableModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="default", min_length=1, max_length=128)
    expires_at: dt.datetime | None = None  # without an offset: UTC

    @field_validator("expires_at")
    @classmethod
    def _in_utc(cls, value: dt.datetime | None) -> dt.datetime | None:
        """In UTC, and a time Python can read back: an offset can carry 9999-12-31 past year
        9999 (or 0001-01-01 before year 1), which Postgres stores but the driver cannot load."""
        if value is None:
            return None
        try:
            return value.astimezone(dt.UTC) if value.tzinfo else value.replace(tzinfo=dt.UTC)
        except OverflowError as exc:
            raise ValueError("expires_at is out of range once converted to UTC") from exc


class QuotaUpdate(StorableModel):
    """Sparse overrides: omitted keys inherit the tier; null lifts the limit."""

    model_config = ConfigDict(extra="forbid")
    overrides: dict[str, Any]

    @field_validator("overrides")
    @classmethod
    def _valid(cls, value: dict[str, Any]) -> dict[str, Any]:
        spec = QuotaSpec.model_validate(value)
        return {k: getattr(spec, k) for k in value}


class TierUpsert(StorableModel):
    model_config = ConfigDict(extra="forbid")
    weight: float = Field(gt=0, le=1000)
    allowed_service_tiers: list[str] = Field(
        min_length=1, json_schema_extra={"items": {"type": "string",
                                                   "enum": list(ALL_SERVICE_TIERS)}})
    ttft_slo_ms: int = Field(gt=0, le=SLO_MAX_MS)
    tpot_slo_ms: int = Field(gt=0, le=SLO_MAX_MS)
    quotas: QuotaSpec

    @field_validator("allowed_service_tiers")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = set(value) - set(ALL_SERVICE_TIERS)
        if unknown:
            raise ValueError(f"unknown service tiers: {sorted(unknown)}")
        return sorted(set(value), key=ALL_SERVICE_TIERS.index)

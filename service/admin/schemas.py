"""Request bodies for the admin API.

Every number an admin writes is checked here, on the server, whatever the client: a quota is a
JSON integer at least 0 (not a string, a float, a boolean or NaN) or the explicit string
``"unlimited"``; JSON ``null`` is refused, because a form that turns a typo into NaN sends
``null`` and must not lift a limit by accident. An invalid field is a 400 in OpenAI's shape
whose ``param`` names it.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic_core import PydanticCustomError

from scheduler.tiers import SERVICE_TIERS
from service.store.quota_limits import QUOTA_FIELDS
from service.store.storable import StorableModel
from service.tenants.key_policy import KEY_POLICY_FIELDS, clean_models

PLAN_NAME_MAX = 32  # the tiers.name column (the plans table keeps its first name)
SLO_MAX_MS = 24 * 3600 * 1000  # a day: well inside the int4 columns that hold the targets
QUOTA_MAX = 2**53  # exact in every JSON reader (a browser's Number included)
UNLIMITED = "unlimited"


def _quota_value(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One message for every wrong shape, saying what is right (pydantic's union errors
    would list each branch's complaint)."""
    if value is None:
        raise PydanticCustomError(
            "quota_null", 'null is not a limit: send "unlimited" for no limit, or leave the '
                          "field out")
    try:
        return handler(value)
    except ValueError:
        raise PydanticCustomError(
            "quota_value", 'must be a whole number from 0 to {max}, or "unlimited"',
            {"max": QUOTA_MAX}) from None


QuotaValue = Annotated[
    Annotated[StrictInt, Field(ge=0, le=QUOTA_MAX)] | Literal["unlimited"],
    WrapValidator(_quota_value)]
AlertPercent = Annotated[StrictInt, Field(ge=1, le=100)]


class QuotaDoc(BaseModel):
    """A tenant's quota overrides. Only the fields sent count (`stored`); a field's default
    None stands for "not sent" and is never a value: an explicit null is refused."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: QuotaValue = None  # type: ignore[assignment]
    tokens_per_minute: QuotaValue = None  # type: ignore[assignment]
    concurrent_requests: QuotaValue = None  # type: ignore[assignment]
    batch_enqueued_tokens: QuotaValue = None  # type: ignore[assignment]
    monthly_tokens: QuotaValue = None  # type: ignore[assignment]
    monthly_alert_percent: AlertPercent = None  # type: ignore[assignment]

    def stored(self) -> dict[str, Any]:
        """The fields sent, as stored: "unlimited" becomes None (no limit)."""
        return _stored({k: getattr(self, k) for k in self.model_fields_set})


# TierQuotas and TierUpsert keep the names their OpenAPI schemas had before plans were named
# plans (a class's name is its schema's, which generated clients use).
class TierQuotas(BaseModel):
    """A plan's default quotas: every limit named, a number or "unlimited" (no limit is
    unlimited by being left out); the monthly alert level defaults to 80 %."""

    model_config = ConfigDict(extra="forbid")

    requests_per_minute: QuotaValue
    tokens_per_minute: QuotaValue
    concurrent_requests: QuotaValue
    batch_enqueued_tokens: QuotaValue
    monthly_tokens: QuotaValue
    monthly_alert_percent: AlertPercent = 80

    def stored(self) -> dict[str, Any]:
        return _stored(self.model_dump())


def _stored(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if doc[k] == UNLIMITED else doc[k]) for k in QUOTA_FIELDS if k in doc}


def quota_view(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored quota document as the admin API shows it: None (no limit) as "unlimited", so
    what an admin reads can be written back unchanged."""
    return {k: (UNLIMITED if v is None and k != "monthly_alert_percent" else v)
            for k, v in doc.items()}


class TenantCreate(StorableModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    tier: str = Field(default="standard", min_length=1, max_length=PLAN_NAME_MAX,
                      description="the tenant's plan (see /admin/tiers)")
    issue_key: StrictBool = True  # convenient default: a new tenant usually needs a key at once


class TenantUpdate(StorableModel):
    model_config = ConfigDict(extra="forbid")
    tier: str | None = Field(default=None, min_length=1, max_length=PLAN_NAME_MAX,
                             description="move the tenant to this plan")
    suspended: StrictBool | None = None


KeyLimit = Annotated[StrictInt, Field(ge=1, le=QUOTA_MAX)]


class KeyPolicyFields(StorableModel):
    """A key's own policy (service.tenants.key_policy): each limit optional, at most its
    tenant's; null: the tenant's limit alone, every model, never expires."""

    requests_per_minute: KeyLimit | None = Field(
        default=None, description="the key's own requests per minute, within the tenant's")
    tokens_per_minute: KeyLimit | None = Field(
        default=None, description="the key's own tokens per minute (prompt estimate plus "
                                  "max_tokens), within the tenant's")
    concurrent_requests: KeyLimit | None = Field(
        default=None, description="the key's own open realtime requests, within the tenant's")
    allowed_models: list[str] | None = Field(
        default=None, description="the models the key may use; null: every model")

    @field_validator("allowed_models")
    @classmethod
    def _models(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else clean_models(value)

    def policy(self) -> dict[str, Any]:
        """The policy fields sent (a create's unsent ones are null: none)."""
        return {k: getattr(self, k) for k in KEY_POLICY_FIELDS if k in self.model_fields_set}


class KeyCreate(KeyPolicyFields):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(default="default", min_length=1, max_length=128,
                      description="a label for lists: 1-128 characters, not only spaces, no "
                                  "control characters")
    expires_at: dt.datetime | None = Field(
        default=None, description="when the key stops working, in the future; without an "
                                  "offset: UTC; null or left out: never")

    @field_validator("name")
    @classmethod
    def _readable(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("name must not be blank")
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("name must not contain control characters")
        return value

    @field_validator("expires_at")
    @classmethod
    def _in_utc_and_future(cls, value: dt.datetime | None) -> dt.datetime | None:
        """In UTC, and a time Python can read back: an offset can carry 9999-12-31 past year
        9999 (or 0001-01-01 before year 1), which Postgres stores but the driver cannot load.
        A time already past would make a key that never works."""
        if value is None:
            return None
        try:
            value = value.astimezone(dt.UTC) if value.tzinfo else value.replace(tzinfo=dt.UTC)
        except OverflowError as exc:
            raise ValueError("expires_at is out of range once converted to UTC") from exc
        if value <= dt.datetime.now(dt.UTC):
            raise ValueError("expires_at must be in the future")
        return value


class KeyUpdate(KeyCreate):
    """A key's changes: only the fields sent change."""

    @field_validator("name", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("name must be text (leave it out to keep it)")
        return value

    def changes(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.model_fields_set}


class QuotaUpdate(StorableModel):
    """A tenant's overrides, replacing the ones it had: a quota left out inherits the plan's,
    a number replaces it, "unlimited" lifts it."""

    model_config = ConfigDict(extra="forbid")
    overrides: QuotaDoc


class TierUpsert(StorableModel):
    """A tenant plan: its fair-share weight, allowed service tiers, SLO targets and default
    quotas."""

    model_config = ConfigDict(extra="forbid")
    weight: float = Field(gt=0, le=1000, strict=True, allow_inf_nan=False,
                          description="fair-share weight, more than 0")
    allowed_service_tiers: list[str] = Field(
        min_length=1, json_schema_extra={"items": {"type": "string",
                                                   "enum": list(SERVICE_TIERS)}})
    ttft_slo_ms: int = Field(gt=0, le=SLO_MAX_MS, strict=True)
    tpot_slo_ms: int = Field(gt=0, le=SLO_MAX_MS, strict=True)
    admission_mode: Literal["queue", "shed"] = Field(
        "queue", description="how realtime requests are admitted: `queue` while the predicted "
                           "wait before one starts is within `max_queue_wait_ms` (the TTFT "
                           "target then orders work), `shed` when the predicted TTFT meets "
                           "the target (429 otherwise)")
    max_queue_wait_ms: int = Field(30_000, gt=0, le=SLO_MAX_MS, strict=True,
                                   description="queue mode: the longest predicted wait a "
                                               "realtime request is admitted with")
    over_quota: Literal["refuse", "overflow"] = Field(
        "refuse", description="a realtime request past the plan's rate limits (requests or "
                              "tokens per minute, concurrent requests): `refuse` answers 429, "
                              "`overflow` runs it at batch priority when capacity is idle "
                              "(its response says `service_tier: flex`); the monthly token "
                              "budget binds either way")
    quotas: TierQuotas

    @field_validator("allowed_service_tiers")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = set(value) - set(SERVICE_TIERS)
        if unknown:
            raise ValueError(f"unknown service tiers: {sorted(unknown)}")
        return sorted(set(value), key=SERVICE_TIERS.index)

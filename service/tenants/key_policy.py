"""One API key's own policy: limits counted per key beside its tenant's, the models it may
use, and when it stops working. Pure: the admin API validates and stores it
(service.admin.key_ops), the door enforces it (service.quotas.key_limits)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from service.store.quota_limits import QuotaLimits

# The limits a key may have, each optional; named as the tenant's quotas are.
KEY_LIMITS = ("requests_per_minute", "tokens_per_minute", "concurrent_requests")
KEY_POLICY_FIELDS = (*KEY_LIMITS, "allowed_models", "expires_at")
MAX_ALLOWED_MODELS = 64
MODEL_NAME_MAX = 256


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    allowed_models: tuple[str, ...] | None = None  # None: every model the tenant may use

    @classmethod
    def of(cls, row: Any) -> KeyPolicy:
        """From an ``ApiKey`` row (or anything with its column names)."""
        models = row.allowed_models
        return cls(row.requests_per_minute, row.tokens_per_minute, row.concurrent_requests,
                   None if models is None else tuple(models))

    @property
    def limited(self) -> bool:
        """Any limit of its own: then each request costs one more quota call at the door."""
        return any(getattr(self, name) is not None for name in KEY_LIMITS)

    def limits(self) -> QuotaLimits:
        return QuotaLimits(requests_per_minute=self.requests_per_minute,
                           tokens_per_minute=self.tokens_per_minute,
                           concurrent_requests=self.concurrent_requests)

    def allows(self, model: str) -> bool:
        return self.allowed_models is None or model in self.allowed_models


NO_POLICY = KeyPolicy()


def expired(expires_at: dt.datetime | None, now: dt.datetime) -> bool:
    return expires_at is not None and expires_at <= now


def above_tenant(key_limits: Mapping[str, Any],
                 tenant_limits: QuotaLimits) -> tuple[str, int, int] | None:
    """The first key limit above its tenant's (field, key's, tenant's), or None. A key's limit
    is a share of the tenant's: one above it could never be reached."""
    for name in KEY_LIMITS:
        mine, theirs = key_limits.get(name), getattr(tenant_limits, name)
        if mine is not None and theirs is not None and mine > theirs:
            return name, mine, theirs
    return None


def clean_models(models: Iterable[str]) -> list[str]:
    """The allow-list as stored: each name once, in the order given; raises ValueError for an
    empty list, a blank or over-long name, or control characters."""
    seen: list[str] = []
    for name in models:
        if not name.strip():
            raise ValueError("a model name must not be blank")
        if len(name) > MODEL_NAME_MAX:
            raise ValueError(f"a model name is at most {MODEL_NAME_MAX} characters")
        if any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise ValueError("a model name must not contain control characters")
        if name not in seen:
            seen.append(name)
    if not seen:
        raise ValueError("allowed_models must name at least one model (null: every model)")
    if len(seen) > MAX_ALLOWED_MODELS:
        raise ValueError(f"allowed_models names at most {MAX_ALLOWED_MODELS} models")
    return seen

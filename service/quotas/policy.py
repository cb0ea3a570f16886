"""A tenant's effective policy: its tier row merged with its quota overrides (one query)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, Select, String, Uuid, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from service.store.models.quotas import TenantQuota
from service.store.models.tiers import Tier
from service.store.quota_limits import QuotaLimits, effective_limits


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    tier: str
    limits: QuotaLimits
    allowed_service_tiers: tuple[str, ...]
    ttft_slo_ms: int
    tpot_slo_ms: int


# Built once, run for every request with its tenant and tier (building it cost more than
# the lookup; service.store.lifecycle, "built once").
_POLICY: Select[Any] = (
    select(Tier.quotas, Tier.allowed_service_tiers, Tier.ttft_slo_ms, Tier.tpot_slo_ms,
           TenantQuota.overrides)
    .select_from(Tier)
    .outerjoin(TenantQuota, TenantQuota.tenant_id == bindparam("p_tenant_id", type_=Uuid()))
    .where(Tier.name == bindparam("p_tier", type_=String())))


def _params(tenant_id: uuid.UUID, tier: str) -> dict[str, Any]:
    return {"p_tenant_id": tenant_id, "p_tier": tier}


def _policy(tier: str, row: Row[Any] | None) -> TenantPolicy:
    if row is None:  # the FK makes this unreachable; refuse rather than run unlimited
        return TenantPolicy(tier, QuotaLimits(0, 0, 0, 0, 0), (), 0, 0)
    return TenantPolicy(tier, effective_limits(row.quotas, row.overrides),
                        tuple(row.allowed_service_tiers), row.ttft_slo_ms, row.tpot_slo_ms)


async def load_policy(session: AsyncSession, *, tenant_id: uuid.UUID, tier: str) -> TenantPolicy:
    # One primary-key lookup. The realtime door caches what it returns, trusted only while
    # the tenant's policy generation is unchanged (service.quotas.door_policy), so an admin's
    # change still binds the very next call on every API process. (The tenant's tier itself
    # comes from the key lookup, which other API processes may reuse for
    # FAIRWAY_KEY_CACHE_SECONDS.)
    return _policy(tier, (await session.execute(_POLICY, _params(tenant_id, tier))).first())


def load_policy_sync(session: Session, *, tenant_id: uuid.UUID, tier: str) -> TenantPolicy:
    """The same lookup on a synchronous session (batch ingest runs in a thread)."""
    return _policy(tier, session.execute(_POLICY, _params(tenant_id, tier)).first())


def resolve_service_tier(requested: str | None, allowed: tuple[str, ...]) -> str | None:
    """The service_tier to run with, or None if the tier doesn't allow what was asked.

    An explicit value must be in the allowed set. Omitted or "auto" picks "default" when the
    tier allows it, else "flex" (a flex-only tier still gets service).
    """
    if requested not in (None, "auto"):
        return requested if requested in allowed else None
    for candidate in ("default", "flex"):
        if candidate in allowed:
            return candidate
    return None

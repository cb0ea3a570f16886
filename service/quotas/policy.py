"""A tenant's effective policy: its plan row merged with its quota overrides (one query)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, Select, String, Uuid, bindparam, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from service.store.models.plans import QUEUE, REFUSE, Plan
from service.store.models.quotas import TenantQuota
from service.store.quota_limits import QuotaLimits, effective_limits


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    plan: str
    limits: QuotaLimits
    allowed_service_tiers: tuple[str, ...]
    ttft_slo_ms: int
    tpot_slo_ms: int
    # How the door admits the plan's realtime requests (service.store.models.plans).
    admission_mode: str = QUEUE
    max_queue_wait_ms: int = 30_000
    over_quota: str = REFUSE  # past a rate limit: refuse, or run as overflow

    @property
    def max_wait_s(self) -> float | None:
        """The queue mode's wait budget; None in shed mode (refused by the TTFT target)."""
        return self.max_queue_wait_ms / 1000 if self.admission_mode == QUEUE else None


# Built once, run for every request with its tenant and plan (building it cost more than
# the lookup; service.store.lifecycle, "built once").
_POLICY: Select[Any] = (
    select(Plan.quotas, Plan.allowed_service_tiers, Plan.ttft_slo_ms, Plan.tpot_slo_ms,
           Plan.admission_mode, Plan.max_queue_wait_ms, Plan.over_quota, TenantQuota.overrides)
    .select_from(Plan)
    .outerjoin(TenantQuota, TenantQuota.tenant_id == bindparam("p_tenant_id", type_=Uuid()))
    .where(Plan.name == bindparam("p_plan", type_=String())))


def _params(tenant_id: uuid.UUID, plan: str) -> dict[str, Any]:
    return {"p_tenant_id": tenant_id, "p_plan": plan}


def _policy(plan: str, row: Row[Any] | None) -> TenantPolicy:
    if row is None:  # the FK makes this unreachable; refuse rather than run unlimited
        return TenantPolicy(plan, QuotaLimits(0, 0, 0, 0, 0), (), 0, 0)
    return TenantPolicy(plan, effective_limits(row.quotas, row.overrides),
                        tuple(row.allowed_service_tiers), row.ttft_slo_ms, row.tpot_slo_ms,
                        row.admission_mode, row.max_queue_wait_ms, row.over_quota)


async def load_policy(session: AsyncSession, *, tenant_id: uuid.UUID, plan: str) -> TenantPolicy:
    # One primary-key lookup. The realtime door caches what it returns, trusted only while
    # the tenant's policy generation is unchanged (service.quotas.door_policy), so an admin's
    # change still binds the very next call on every API process. (The tenant's plan itself
    # comes from the key lookup, which other API processes may reuse for
    # FAIRWAY_KEY_CACHE_SECONDS.)
    return _policy(plan, (await session.execute(_POLICY, _params(tenant_id, plan))).first())


def load_policy_sync(session: Session, *, tenant_id: uuid.UUID, plan: str) -> TenantPolicy:
    """The same lookup on a synchronous session (batch ingest runs in a thread)."""
    return _policy(plan, session.execute(_POLICY, _params(tenant_id, plan)).first())


def resolve_service_tier(requested: str | None, allowed: tuple[str, ...]) -> str | None:
    """The service_tier to run with, or None if the plan doesn't allow what was asked.

    An explicit value must be in the allowed set. Omitted or "auto" picks "default" when the
    plan allows it, else "flex" (a flex-only plan still gets service).
    """
    if requested not in (None, "auto"):
        return requested if requested in allowed else None
    for candidate in ("default", "flex"):
        if candidate in allowed:
            return candidate
    return None

"""Tier reads and edits (async, for the admin API)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models.tenants import Tenant
from service.store.models.tiers import Tier


def tier_view(tier: Tier) -> dict[str, Any]:
    return {"name": tier.name, "weight": tier.weight,
            "allowed_service_tiers": list(tier.allowed_service_tiers),
            "ttft_slo_ms": tier.ttft_slo_ms, "tpot_slo_ms": tier.tpot_slo_ms,
            "quotas": dict(tier.quotas)}


async def list_tiers(session: AsyncSession) -> list[Tier]:
    return list((await session.scalars(select(Tier).order_by(Tier.weight, Tier.name))).all())


async def get_tier(session: AsyncSession, *, name: str) -> Tier | None:
    return await session.get(Tier, name)


async def upsert_tier(session: AsyncSession, *, name: str, weight: float,
                      allowed_service_tiers: list[str], ttft_slo_ms: int, tpot_slo_ms: int,
                      quotas: dict[str, Any]) -> tuple[dict[str, Any] | None, Tier]:
    """Create or replace a tier; returns (previous view or None, tier)."""
    tier = await session.get(Tier, name)
    before = tier_view(tier) if tier else None
    if tier is None:
        tier = Tier(name=name)
        session.add(tier)
    tier.weight = weight
    tier.allowed_service_tiers = allowed_service_tiers
    tier.ttft_slo_ms = ttft_slo_ms
    tier.tpot_slo_ms = tpot_slo_ms
    tier.quotas = quotas
    tier.updated_at = dt.datetime.now(dt.UTC)
    await session.flush()
    # The dispatcher reads tenants.weight; keep it equal to the tier's weight.
    await session.execute(update(Tenant).where(Tenant.tier == name).values(weight=weight))
    return before, tier


async def tenants_on(session: AsyncSession, *, name: str) -> list[uuid.UUID]:
    """The tenants a change of tier ``name`` applies to."""
    return list((await session.scalars(select(Tenant.id).where(Tenant.tier == name))).all())


async def delete_tier(session: AsyncSession, *, name: str) -> bool:
    """Refuses (False) while any tenant is on the tier."""
    in_use = await session.scalar(select(Tenant.id).where(Tenant.tier == name).limit(1))
    tier = await session.get(Tier, name)
    if tier is None or in_use is not None:
        return False
    await session.delete(tier)
    return True

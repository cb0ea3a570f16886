"""Plan reads and edits (async, for the admin API)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models.plans import Plan
from service.store.models.tenants import Tenant


def plan_view(plan: Plan) -> dict[str, Any]:
    return {"name": plan.name, "weight": plan.weight,
            "allowed_service_tiers": list(plan.allowed_service_tiers),
            "ttft_slo_ms": plan.ttft_slo_ms, "tpot_slo_ms": plan.tpot_slo_ms,
            "admission_mode": plan.admission_mode, "max_queue_wait_ms": plan.max_queue_wait_ms,
            "over_quota": plan.over_quota, "quotas": dict(plan.quotas)}


async def list_plans(session: AsyncSession) -> list[Plan]:
    return list((await session.scalars(select(Plan).order_by(Plan.weight, Plan.name))).all())


async def get_plan(session: AsyncSession, *, name: str) -> Plan | None:
    return await session.get(Plan, name)


# What an upsert sets: every column of a plan but its name and its timestamps.
PLAN_FIELDS = ("weight", "allowed_service_tiers", "ttft_slo_ms", "tpot_slo_ms",
               "admission_mode", "max_queue_wait_ms", "over_quota", "quotas")


async def upsert_plan(session: AsyncSession, *, name: str, fields: dict[str, Any]
                      ) -> tuple[dict[str, Any] | None, Plan]:
    """Create or replace a plan from ``fields`` (each of PLAN_FIELDS); returns (previous
    view or None, plan)."""
    plan = await session.get(Plan, name)
    before = plan_view(plan) if plan else None
    if plan is None:
        plan = Plan(name=name)
        session.add(plan)
    for key in PLAN_FIELDS:
        setattr(plan, key, fields[key])
    plan.updated_at = dt.datetime.now(dt.UTC)
    await session.flush()
    # The dispatcher reads tenants.weight; keep it equal to the plan's weight.
    await session.execute(update(Tenant).where(Tenant.plan == name)
                          .values(weight=fields["weight"]))
    return before, plan


async def tenants_on(session: AsyncSession, *, name: str) -> list[uuid.UUID]:
    """The tenants a change of plan ``name`` applies to."""
    return list((await session.scalars(select(Tenant.id).where(Tenant.plan == name))).all())


async def delete_plan(session: AsyncSession, *, name: str) -> bool:
    """Refuses (False) while any tenant is on the plan."""
    in_use = await session.scalar(select(Tenant.id).where(Tenant.plan == name).limit(1))
    plan = await session.get(Plan, name)
    if plan is None or in_use is not None:
        return False
    await session.delete(plan)
    return True

"""Batch admission: one reservation per batch, for the batch engineer's create/finish hooks.

A batch reserves its whole estimate (sum of prompt estimates + max_tokens over its lines)
against the enqueued-tokens limit and the monthly budget when it is created, and settles to the
real total when it reaches a final status. Its jobs hold no per-job reservations, so the
worker's per-job settle is a no-op for them; Postgres usage is still recorded per job.
"""

from __future__ import annotations

import uuid
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncSession

from service.quotas.admission import refusal, reserve, unavailable
from service.quotas.policy import load_policy
from service.quotas.store import BATCH_RESERVATION_TTL_S, QuotaStore


async def admit_batch(session: AsyncSession, store: QuotaStore, *, tenant: Any,
                      batch_id: uuid.UUID, tokens: int) -> None:
    """Reserve a batch's tokens or raise the 429/503 APIError to return to the client."""
    try:
        policy = await load_policy(session, tenant_id=tenant.id, tier=tenant.tier)
        # Per-minute limits are for realtime traffic; a batch is paced by the scheduler.
        limits = policy.limits.__class__(
            batch_enqueued_tokens=policy.limits.batch_enqueued_tokens,
            monthly_tokens=policy.limits.monthly_tokens,
            monthly_alert_percent=policy.limits.monthly_alert_percent)
        decision = await reserve(store, session, tenant_id=tenant.id,
                                 policy=policy.__class__(policy.tier, limits,
                                                         policy.allowed_service_tiers,
                                                         policy.ttft_slo_ms, policy.tpot_slo_ms),
                                 tokens=tokens, ticket=batch_id, batch=True, hold_slot=False,
                                 slot_ttl_s=BATCH_RESERVATION_TTL_S)
    except RedisError as exc:
        raise unavailable() from exc
    if not decision.admitted:
        raise refusal(decision)


async def settle_batch(store: QuotaStore, *, tenant_id: uuid.UUID, batch_id: uuid.UUID,
                       actual_tokens: int) -> None:
    await store.settle(tenant_id=tenant_id, ref=batch_id, actual_tokens=actual_tokens)

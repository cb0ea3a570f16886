"""Batch admission: one reservation per batch, keyed by the batch id.

A batch reserves its whole estimate (sum of prompt estimates + max_tokens over its valid
lines) against the enqueued-tokens limit and the monthly budget when its validation has
counted its lines (service/batches/ingest.py), and settles to the real total when it reaches a
final status (service/batches/completion.py). Its jobs hold no per-job reservations, so the
worker's per-job settle is a no-op for them; Postgres usage is still recorded per job.

Ingest and maintenance run in threads with synchronous sessions and a synchronous Redis
client, hence the `*_sync` variants; `admit_batch`/`settle_batch` are the async forms.
Settling is idempotent (the SETTLE script deletes the reservation), so a repeated step
changes nothing the second time.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import replace
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from service.quotas.policy import TenantPolicy, load_policy, load_policy_sync
from service.quotas.refusal import refusal
from service.quotas.reservation import QuotaAsk, reserve, unavailable
from service.store.models.usage import UsageDaily
from service.store.quota_limits import QuotaLimits
from service.store.quota_store import (
    BATCH_RESERVATION_TTL_S,
    Decision,
    QuotaStore,
    SyncQuotaStore,
    seconds_to_next_month,
)
from service.usage.reports import month_tokens_used

log = logging.getLogger("fairway.quotas")


def _batch_policy(policy: TenantPolicy) -> TenantPolicy:
    # Per-minute and concurrency limits are for realtime traffic; a batch is paced by the
    # scheduler. Only the enqueued-tokens limit and the month apply.
    limits = QuotaLimits(batch_enqueued_tokens=policy.limits.batch_enqueued_tokens,
                         monthly_tokens=policy.limits.monthly_tokens,
                         monthly_alert_percent=policy.limits.monthly_alert_percent)
    return replace(policy, limits=limits)


async def admit_batch(session: AsyncSession, store: QuotaStore, *, tenant: Any,
                      batch_id: uuid.UUID, tokens: int) -> None:
    """Reserve a batch's tokens or raise the 429/503 APIError to return to the client."""
    try:
        policy = await load_policy(session, tenant_id=tenant.id, plan=tenant.plan)
        decision = await reserve(store, session, QuotaAsk(
            tenant.id, _batch_policy(policy), tokens, batch_id, batch=True, hold_slot=False,
            slot_ttl_s=BATCH_RESERVATION_TTL_S))
    except RedisError as exc:
        raise unavailable() from exc
    if not decision.admitted:
        raise refusal(decision, _batch_policy(policy).limits, requested=tokens)


async def settle_batch(store: QuotaStore, *, tenant_id: uuid.UUID, batch_id: uuid.UUID,
                       actual_tokens: int) -> None:
    await store.settle(tenant_id=tenant_id, ref=batch_id, actual_tokens=actual_tokens)


async def check_batch_create(session: AsyncSession, store: QuotaStore, *, tenant: Any) -> None:
    """POST /v1/batches: refuse at once (429 insufficient_quota) when the tenant's monthly
    budget is already spent. The batch's own size is checked when its lines are counted."""
    try:
        policy = await load_policy(session, tenant_id=tenant.id, plan=tenant.plan)
        budget = policy.limits.monthly_tokens
        if budget is None:
            return
        used = await store.month_used(tenant_id=tenant.id)
        if used is None:  # new month, or Redis lost it: seed from Postgres first
            await store.seed_month(tenant_id=tenant.id,
                                   used_tokens=await month_tokens_used(session,
                                                                       tenant_id=tenant.id))
            used = await store.month_used(tenant_id=tenant.id) or 0
    except RedisError as exc:
        raise unavailable() from exc
    if used >= budget:
        raise refusal(Decision(False, "monthly_tokens",
                               seconds_to_next_month(dt.datetime.now(dt.UTC)), used=used),
                      policy.limits)


def _month_used_sync(session: Session, tenant_id: uuid.UUID) -> int:
    start = dt.datetime.now(dt.UTC).date().replace(day=1)
    total = session.scalar(
        select(func.coalesce(func.sum(UsageDaily.prompt_tokens + UsageDaily.completion_tokens), 0))
        .where(UsageDaily.tenant_id == tenant_id, UsageDaily.day >= start))
    return int(total or 0)


def admit_batch_sync(session: Session, store: SyncQuotaStore, *, tenant_id: uuid.UUID,
                     plan: str, batch_id: uuid.UUID, tokens: int) -> tuple[Decision, QuotaLimits]:
    """Reserve a batch's tokens; returns the decision (refusals are not raised: the caller
    fails the batch) and the limits it was judged against. RedisError propagates."""
    policy = _batch_policy(load_policy_sync(session, tenant_id=tenant_id, plan=plan))
    for _ in range(2):
        decision = store.admit(tenant_id=tenant_id, limits=policy.limits, tokens=tokens,
                               ticket=batch_id, batch=True)
        if not decision.needs_seed:
            if decision.alert_crossed:
                log.warning("tenant passed its monthly token alert level",
                            extra={"tenant_id": str(tenant_id)})
            return decision, policy.limits
        store.seed_month(tenant_id=tenant_id, used_tokens=_month_used_sync(session, tenant_id))
    raise RedisError("the month counter is still missing after seeding it")


def settle_batch_sync(store: SyncQuotaStore, *, tenant_id: uuid.UUID, batch_id: uuid.UUID,
                      actual_tokens: int) -> int | None:
    """Release a batch's reservation, correcting the month to `actual_tokens`. Returns the
    reserved tokens, or None when there was nothing to settle (already settled, or never
    admitted). Idempotent."""
    return store.settle(tenant_id=tenant_id, ref=batch_id, actual_tokens=actual_tokens)

"""The worker's one hook at job end: usage into Postgres and the quota reservation corrected
to real usage."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.quota_store import QuotaStore
from service.store.usage import record_job_usage

log = logging.getLogger("fairway.usage")


async def account_job_end(session: AsyncSession, redis: Redis, *, job_id: uuid.UUID,
                          tenant_id: uuid.UUID, model: str, job_class: str,
                          values: dict[str, Any]) -> None:
    """Call inside the transaction that writes the job's final row, before its commit.

    The usage row commits with the final row, so each job is counted exactly once (the final
    write succeeds once per job). The Redis correction runs now rather than after commit: the
    API releases its side once it sees the final event, which is published after commit, so
    settling first keeps the worker's real numbers ahead of the API's fallback charge. If the
    commit then fails, the settle was for a job that will be retried: a small, bounded error.
    """
    prompt = int(values.get("prompt_tokens") or 0)
    completion = int(values.get("completion_tokens") or 0)
    await record_job_usage(session, tenant_id=tenant_id, model=model, job_class=job_class,
                           prompt_tokens=prompt, completion_tokens=completion,
                           cached_tokens=int(values.get("cached_tokens") or 0),
                           failed=values.get("status") != "succeeded")
    try:
        await QuotaStore(redis).settle(tenant_id=tenant_id, ref=job_id,
                                       actual_tokens=prompt + completion)
    except RedisError:  # the reservation's TTL is the backstop; usage is already recorded
        log.warning("quota settle failed", extra={"job_id": str(job_id)})

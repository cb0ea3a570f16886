"""The worker's one hook at job end: the quota reservation corrected to real usage.

Usage itself (`usage_daily`) is not written here: the job's final row carries it, stamped for
the roll-up that counts it once (service.store.usage)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.store.quota_store import QuotaStore

log = logging.getLogger("fairway.usage")


async def account_job_end(redis: Redis, *, job_id: uuid.UUID, tenant_id: uuid.UUID,
                          values: dict[str, Any]) -> bool:
    """Call once the job's final row is committed, before its final stream entry.

    The API releases its side once it sees the final entry (unless the entry says the worker
    settled), so settling first keeps the worker's real numbers ahead of the API's fallback
    charge. After the commit, not inside its transaction: a final write that fails settles
    nothing, and no row lock waits on a Redis round trip. A worker lost between the two leaves
    the reservation to the API's release or its TTL.

    True when this call settled the reservation (which frees its concurrency slot too); False
    when it was gone already (the API released it, or it expired) or Redis was away.
    """
    prompt = int(values.get("prompt_tokens") or 0)
    completion = int(values.get("completion_tokens") or 0)
    try:
        settled = await QuotaStore(redis).settle(tenant_id=tenant_id, ref=job_id,
                                                 actual_tokens=prompt + completion)
    except RedisError:  # the reservation's TTL is the backstop; usage is in the job's row
        log.warning("quota settle failed", extra={"job_id": str(job_id)})
        return False
    return settled is not None

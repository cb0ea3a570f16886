"""Step phase slots: where on its pool's grid a worker's engine steps end (scheduler.step_phase).

A worker claims the lowest free slot among its served model's workers before its engine is
built (the slot fixes the engine's grid offset, ``PhaseGrid.for_slot``); its host keeps the
claim alive with each heartbeat and gives it back on stop. A worker that dies stops renewing,
and its slot frees itself when the key's TTL runs out.
"""

from __future__ import annotations

import logging

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import RedisError

from service.store.keys import phase_slot_key

log = logging.getLogger("fairway.worker")

MAX_PHASE_SLOTS = 64


def claim_phase_slot(
    redis: Redis, model: str, worker_id: str, ttl_s: int, slots: int = MAX_PHASE_SLOTS
) -> int | None:
    """Claim the lowest free phase slot for ``model`` (``SET key worker_id NX EX ttl_s``) and
    return it; a slot this worker already holds (a restart under the same id) is kept.

    None when Redis cannot be reached or all ``slots`` are taken: the worker then runs without
    a phase lock rather than not at all.
    """
    keys = [phase_slot_key(model, slot) for slot in range(slots)]
    try:
        owners = redis.mget(keys)
        for slot, owner in enumerate(owners):
            if _is(owner, worker_id):
                redis.expire(keys[slot], ttl_s)
                return slot
        for slot, key in enumerate(keys):
            if redis.set(key, worker_id, nx=True, ex=ttl_s):
                return slot
    except (RedisError, OSError) as exc:
        log.warning("no step phase slot (Redis: %s): running without a phase lock", exc)
        return None
    log.warning("all %d step phase slots for %s are taken: running without a phase lock",
                slots, model)
    return None


async def keep_phase_slot(redis: AsyncRedis, model: str, slot: int, worker_id: str,
                          ttl_s: int) -> bool:
    """Renew this worker's claim (heartbeat); retake the slot if it lapsed and is free. False
    when another worker holds it now (the engine keeps its offset: two share a phase)."""
    key = phase_slot_key(model, slot)
    if _is(await redis.get(key), worker_id) and await redis.expire(key, ttl_s):
        return True
    return bool(await redis.set(key, worker_id, nx=True, ex=ttl_s))


async def release_phase_slot(redis: AsyncRedis, model: str, slot: int, worker_id: str) -> None:
    """Give the slot back, if this worker still holds it."""
    key = phase_slot_key(model, slot)
    if _is(await redis.get(key), worker_id):
        await redis.delete(key)


def _is(owner: bytes | str | None, worker_id: str) -> bool:
    if isinstance(owner, bytes):
        owner = owner.decode()
    return owner == worker_id

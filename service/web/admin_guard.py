"""Throttling of guesses at the admin token: past ``admin_auth_failures_per_minute`` failed
attempts from one client address in a minute, every admin request from that address gets a
429 with Retry-After until the minute ends, the right token included (checked first, so a
guess answered 429 tells nothing). Unthrottled, an address could try 1,000 tokens a second.

The count is in Redis, so every API process shares it. Without Redis the throttle steps aside
(logged): the admin token still decides, and an outage must not lock the operator out.
"""

from __future__ import annotations

import logging
import time

from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.store.keys import admin_auth_failures_key
from service.web.errors import APIError

log = logging.getLogger("fairway.api")

WINDOW_S = 60


def _window(now: float) -> tuple[int, int]:
    """(this minute's number, seconds until it ends, at least 1)."""
    return int(now // WINDOW_S), max(1, WINDOW_S - int(now % WINDOW_S))


async def refuse_if_throttled(redis: Redis, client: str, limit: int) -> None:
    """Raise the 429 when ``client`` has used up this minute's failures; ``limit`` 0: off."""
    if limit <= 0:
        return
    window, left_s = _window(time.time())
    try:
        failures = await redis.get(admin_auth_failures_key(client, window))
    except RedisError:
        log.warning("admin authentication throttle unavailable (Redis)", exc_info=True)
        return
    if failures is not None and int(failures) >= limit:
        raise APIError(429, f"Too many failed admin authentication attempts from this "
                            f"address; retry in {left_s} s.", code="rate_limit_exceeded",
                       headers={"Retry-After": str(left_s)})


async def record_failure(redis: Redis, client: str, limit: int) -> None:
    """Count one failed attempt from ``client`` in this minute."""
    if limit <= 0:
        return
    window, _ = _window(time.time())
    key = admin_auth_failures_key(client, window)
    try:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, 2 * WINDOW_S)
            await pipe.execute()
    except RedisError:
        log.warning("admin authentication failure not counted (Redis)", exc_info=True)

"""What an API process does once at start-up so that its first requests cost what later
ones do.

Cold, the first request paid ~90 ms in the API against ~15 ms warm on two cores: SQLAlchemy
configures its mappers on the first ORM query, each pooled connection is opened on first use,
and each statement is compiled on its first run. Under a burst right after a start (a deploy,
a restart after a crash) a dozen cold requests at once stood ~500 ms in line behind each other
(refusals at the door are due within 50 ms; `bench/overload.py` prints when its slowest
refusals came). So before the app serves, it configures the mappers, opens the database and
Redis pools to their steady size, and compiles the key lookup every request makes.

Nothing here is needed for correctness: a failure (Postgres or Redis not up yet) is logged and
the API starts anyway; /readyz says what is missing, and the pools fill on first use as before.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis.asyncio import Redis
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import configure_mappers

from service.store.models.tenants import ApiKey, Tenant

log = logging.getLogger("fairway.api")


async def warm_up(engine: AsyncEngine, redis: Redis, *, connections: int,
                  timeout_s: float = 5.0) -> None:
    started = time.perf_counter()
    configure_mappers()
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*(_one_connection(engine, i == 0) for i in range(connections)),
                                 *(redis.ping() for _ in range(connections)))
    except Exception as exc:  # a dependency not up yet: the pools fill on first use instead
        log.warning("start-up warm-up incomplete: %s", exc.__class__.__name__)
        return
    log.info("warmed up in %.0f ms", (time.perf_counter() - started) * 1000)


async def _one_connection(engine: AsyncEngine, compile_lookups: bool) -> None:
    # All branches check out before any returns (connecting awaits), so the pool opens
    # ``connections`` of them, not one reused.
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
        if compile_lookups:  # the per-request key lookup (service.tenants.accounts), no match
            await conn.execute(select(ApiKey, Tenant).join(Tenant, Tenant.id == ApiKey.tenant_id)
                               .where(ApiKey.key_hash == ""))

"""What the API knows about workers: their heartbeats in Redis (served models, load)."""

from __future__ import annotations

import json
import time
from typing import Any

from redis.asyncio import Redis

from service.store.keys import WORKER_KEY_PATTERN
from service.store.settings import Settings


async def live_workers(redis: Redis) -> list[dict[str, Any]]:
    keys = [k async for k in redis.scan_iter(match=WORKER_KEY_PATTERN, count=500)]
    if not keys:
        return []
    values = await redis.mget(keys)
    return [json.loads(v) for v in values if v]


class ModelCatalog:
    """Models clients may name: the configured one plus whatever live workers serve."""

    def __init__(
        self, settings: Settings, redis: Redis, ttl_s: float = 2.0, miss_refresh_s: float = 0.25
    ) -> None:
        self._configured = settings.engine.served_model_name
        self._redis = redis
        self._ttl = ttl_s
        # A name missing from the cache is looked up again at most this often: a worker for a
        # new model that just came up is usable at once, and a client naming unknown models
        # cannot turn every request into a Redis scan.
        self._miss_refresh = miss_refresh_s
        self._cached: tuple[float, list[str]] = (0.0, [])

    async def models(self) -> list[str]:
        at, names = self._cached
        if time.monotonic() - at < self._ttl:
            return names
        return await self.refresh()

    async def has(self, model: str) -> bool:
        names = await self.models()
        if model in names:
            return True
        if time.monotonic() - self._cached[0] < self._miss_refresh:
            return False
        return model in await self.refresh()

    async def refresh(self) -> list[str]:
        served = {m for w in await live_workers(self._redis) for m in w.get("models", [])}
        names = sorted(served | {self._configured})
        self._cached = (time.monotonic(), names)
        return names

"""What the API knows about workers: their heartbeats in Redis (served models, load), and
the models clients may name, with the time each was first offered here (``created``)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.keys import WORKER_KEY_PATTERN
from service.store.models.served_models import ServedModel
from service.store.settings import Settings
from service.store.single_flight import RENEW_AFTER_S, SingleFlight, renew_delay


async def live_workers(redis: Redis) -> list[dict[str, Any]]:
    keys = [k async for k in redis.scan_iter(match=WORKER_KEY_PATTERN, count=500)]
    if not keys:
        return []
    values = await redis.mget(keys)
    return [json.loads(v) for v in values if v]


class ModelCatalog:
    """Models clients may name: the configured one, those of ``FAIRWAY_CATALOG_MODELS`` (which
    may have no worker: scaled to zero) and whatever live workers serve; which of them a live
    worker serves now; and what those workers' engines can do (the "capabilities" of their
    heartbeats)."""

    def __init__(
        self, settings: Settings, redis: Redis, ttl_s: float = 2.0, miss_refresh_s: float = 0.25,
        renew_after_s: float = RENEW_AFTER_S,
    ) -> None:
        self._configured = {settings.engine.served_model_name, *settings.api.catalog_models}
        self._redis = redis
        self._ttl = ttl_s
        # A name missing from the cache is looked up again at most this often: a worker for a
        # new model that just came up is usable at once, and a client naming unknown models
        # cannot turn every request into a Redis scan.
        self._miss_refresh = miss_refresh_s
        self._cached: tuple[float, list[str]] = (0.0, [])
        self._loaded = False
        self._reading: SingleFlight[None, list[str]] = SingleFlight()
        # The background refresh, apart: it starts ``renew_after_s`` after the request that
        # found the list old (past that request's critical path), and a lookup that must
        # read now (a miss) does not wait out that delay.
        self._renewal: SingleFlight[None, list[str]] = SingleFlight()
        self._renew_after_s = renew_delay(ttl_s, renew_after_s)
        # model -> the capabilities every live worker serving it has (absent: no live worker)
        self._capabilities: dict[str, frozenset[str]] = {}
        self._created: dict[str, int] = {}  # name -> first offered (epoch s); never changes
        self._served: frozenset[str] = frozenset()  # models a live, undrained worker serves

    async def models(self) -> list[str]:
        """The names, as of at most ``ttl_s`` ago. Once loaded, an older list is returned at
        once while one background read refreshes it: a request never waits on the scan, and
        a burst at the TTL's end starts one scan, not one each (they stood in line)."""
        at, names = self._cached
        if time.monotonic() - at < self._ttl:
            return names
        if self._loaded:
            self._renewal.run(None, self._read, after_s=self._renew_after_s)  # background
            return names
        return await self.refresh()

    async def has(self, model: str) -> bool:
        names = await self.models()
        if model in names:
            return True
        if time.monotonic() - self._cached[0] < self._miss_refresh:
            return False
        return model in await self.refresh()

    async def supports(self, model: str, capability: str) -> bool | None:
        """Can the engines serving ``model`` do ``capability``? Only if every live worker
        serving it says so: the dispatcher places a job on any of them. None when no live
        worker serves it (yet): the worker that gets the job decides, and refuses it then."""
        await self.models()
        capabilities = self._capabilities.get(model)
        return None if capabilities is None else capability in capabilities

    async def serves(self, model: str, *, fresh: bool = False) -> bool:
        """Does a live worker that takes new work (not draining) serve ``model``? As of the
        cached list, or, with ``fresh``, of a read now (shared with any under way)."""
        if fresh:
            await self.refresh()
        else:
            await self.models()
        return model in self._served

    async def refresh(self) -> list[str]:
        """Read the live workers now; a read already under way is shared, not repeated."""
        return await asyncio.shield(self._reading.run(None, self._read))

    async def _read(self) -> list[str]:
        workers = await live_workers(self._redis)
        capabilities: dict[str, frozenset[str]] = {}
        served: set[str] = set()
        for worker in workers:
            has = frozenset(worker.get("capabilities") or ())
            for model in worker.get("models", []):
                capabilities[model] = capabilities.get(model, has) & has
                if not worker.get("draining"):
                    served.add(model)
        names = sorted(set(capabilities) | self._configured)
        self._capabilities = capabilities
        self._served = frozenset(served)
        self._cached = (time.monotonic(), names)
        self._loaded = True
        return names

    async def created(self, session: AsyncSession, names: list[str]) -> dict[str, int]:
        """When each model was first offered by this deployment (epoch seconds): recorded in
        Postgres the first time any API process lists it, and never moved after, so every
        process and restart answers the same. One write per new name per process at most."""
        missing = [n for n in names if n not in self._created]
        if missing:
            await session.execute(insert(ServedModel).values([{"name": n} for n in missing])
                                  .on_conflict_do_nothing(index_elements=["name"]))
            await session.commit()
            rows = await session.execute(select(ServedModel.name, ServedModel.first_served_at)
                                         .where(ServedModel.name.in_(missing)))
            self._created.update({name: int(at.timestamp()) for name, at in rows.all()})
        return {n: self._created[n] for n in names if n in self._created}

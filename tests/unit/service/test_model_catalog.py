"""The API's model catalog: a cached view of the models live workers serve."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from service.store.settings import EngineSettings, Settings
from service.web.catalog import ModelCatalog


class FakeRedis:
    """The two calls live_workers makes, over a dict of heartbeat keys."""

    def __init__(self) -> None:
        self.beats: dict[str, str] = {}
        self.scans = 0

    async def scan_iter(self, match: str, count: int) -> Any:
        self.scans += 1
        for key in list(self.beats):
            yield key

    async def mget(self, keys: list[str]) -> list[str | None]:
        return [self.beats.get(k) for k in keys]


def test_a_new_model_is_found_at_once_and_misses_are_rate_limited() -> None:
    async def run() -> None:
        redis = FakeRedis()
        settings = Settings(engine=EngineSettings(served_model_name="base"))
        catalog = ModelCatalog(settings, redis, ttl_s=60.0,
                               miss_refresh_s=0.05)  # type: ignore[arg-type]
        assert await catalog.models() == ["base"]
        redis.beats["fairway:worker:w1"] = json.dumps({"models": ["new-model"]})
        time.sleep(0.06)
        assert await catalog.has("new-model")  # the cache is fresh (ttl 60 s) but it misses
        assert await catalog.has("base")
        scans = redis.scans
        assert not await catalog.has("nope")  # refreshed just now: no new scan
        assert redis.scans == scans
        time.sleep(0.06)
        assert not await catalog.has("nope")
        assert redis.scans == scans + 1

    asyncio.run(run())


def test_past_the_ttl_a_burst_gets_the_last_list_at_once_and_one_scan_refreshes_it() -> None:
    async def run() -> None:
        redis = FakeRedis()
        redis.beats["fairway:worker:w1"] = json.dumps({"models": ["m1"]})
        settings = Settings(engine=EngineSettings(served_model_name="base"))
        catalog = ModelCatalog(settings, redis, ttl_s=0.05)  # type: ignore[arg-type]
        assert await catalog.models() == ["base", "m1"]
        redis.beats["fairway:worker:w2"] = json.dumps({"models": ["m2"]})
        time.sleep(0.06)
        scans = redis.scans
        burst = await asyncio.gather(*(catalog.models() for _ in range(10)))
        assert burst == [["base", "m1"]] * 10  # no request waited on the scan
        await asyncio.sleep(0)
        assert redis.scans == scans  # not during the requests that found the list old
        await asyncio.sleep(0.05)  # past renew_after_s (a quarter of the TTL here)
        assert redis.scans == scans + 1
        assert await catalog.models() == ["base", "m1", "m2"]

    asyncio.run(run())


def test_catalog_models_are_named_without_a_worker_and_serves_says_which_have_one() -> None:
    async def run() -> None:
        from service.store.settings_groups import ApiSettings

        redis = FakeRedis()
        redis.beats["fairway:worker:w1"] = json.dumps({"models": ["base"]})
        redis.beats["fairway:worker:w2"] = json.dumps({"models": ["leaving"], "draining": True})
        settings = Settings(engine=EngineSettings(served_model_name="base"),
                            api=ApiSettings(catalog_models=["cold", "leaving"]))
        catalog = ModelCatalog(settings, redis, ttl_s=60.0)  # type: ignore[arg-type]
        assert await catalog.models() == ["base", "cold", "leaving"]
        assert await catalog.has("cold")
        assert await catalog.serves("base")
        assert not await catalog.serves("cold")
        assert not await catalog.serves("leaving")  # draining: takes nothing new
        redis.beats["fairway:worker:w3"] = json.dumps({"models": ["cold"]})
        assert not await catalog.serves("cold")  # the cached list (ttl 60 s)
        assert await catalog.serves("cold", fresh=True)

    asyncio.run(run())

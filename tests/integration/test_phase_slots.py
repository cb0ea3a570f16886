"""Step phase slots (worker.phase_slot) against real Redis: workers of one model take the
lowest free slot, a released or lapsed slot is taken again, the 65th worker runs unlocked,
and the worker's settings turn a slot into its engine's grid offset."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from scheduler.cost_profiles import profile
from scheduler.step_phase import PhaseGrid
from service.store.keys import phase_slot_key
from service.store.settings import EngineSettings, Settings
from worker.engine.config import VllmEngineConfig
from worker.phase_slot import (
    MAX_PHASE_SLOTS,
    claim_phase_slot,
    keep_phase_slot,
    release_phase_slot,
)

TTL = 30


@pytest.fixture
def redis(test_redis_url: str) -> Redis:
    return Redis.from_url(test_redis_url)


def model() -> str:
    return f"m-{uuid.uuid4().hex[:8]}"


def test_workers_take_the_lowest_free_slot_and_reuse_a_released_one(
    redis: Redis, test_redis_url: str
) -> None:
    m = model()
    assert claim_phase_slot(redis, m, "w-a", TTL) == 0
    assert claim_phase_slot(redis, m, "w-b", TTL) == 1
    assert claim_phase_slot(redis, m, "w-a", TTL) == 0  # a restart under its id keeps it
    assert claim_phase_slot(redis, model(), "w-c", TTL) == 0  # slots are per model
    assert redis.get(phase_slot_key(m, 1)) == b"w-b"
    assert 0 < redis.ttl(phase_slot_key(m, 1)) <= TTL

    async def release() -> None:
        client = AsyncRedis.from_url(test_redis_url)
        try:
            await release_phase_slot(client, m, 1, "w-a")  # not w-a's: kept
            assert redis.get(phase_slot_key(m, 1)) == b"w-b"
            await release_phase_slot(client, m, 0, "w-a")
        finally:
            await client.aclose()

    asyncio.run(release())
    assert claim_phase_slot(redis, m, "w-d", TTL) == 0
    assert claim_phase_slot(redis, m, "w-e", TTL) == 2


def test_heartbeat_renews_the_claim_and_retakes_a_lapsed_one(
    redis: Redis, test_redis_url: str
) -> None:
    m = model()
    assert claim_phase_slot(redis, m, "w-a", 5) == 0
    key = phase_slot_key(m, 0)

    async def beats() -> list[bool]:
        client = AsyncRedis.from_url(test_redis_url)
        try:
            kept = [await keep_phase_slot(client, m, 0, "w-a", TTL)]
            assert redis.ttl(key) > 5
            redis.delete(key)  # lapsed (a long stall): free, so retaken
            kept.append(await keep_phase_slot(client, m, 0, "w-a", TTL))
            assert redis.get(key) == b"w-a"
            redis.set(key, "w-other")  # lapsed and claimed by another worker meanwhile
            kept.append(await keep_phase_slot(client, m, 0, "w-a", TTL))
            assert redis.get(key) == b"w-other"
            return kept
        finally:
            await client.aclose()

    assert asyncio.run(beats()) == [True, True, False]


def test_the_65th_worker_and_an_unreachable_redis_get_no_slot(redis: Redis) -> None:
    m = model()
    slots = [claim_phase_slot(redis, m, f"w-{i}", TTL) for i in range(MAX_PHASE_SLOTS + 1)]
    assert slots == [*range(MAX_PHASE_SLOTS), None]
    down = Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    assert claim_phase_slot(down, m, "w-x", TTL) is None


def vllm_config(settings: Settings, slot: int | None) -> VllmEngineConfig:
    from worker.main import engine_config

    config = engine_config(settings.engine, slot)
    assert isinstance(config, VllmEngineConfig)
    return config


def test_worker_settings_turn_a_slot_into_the_engines_grid_offset(test_redis_url: str) -> None:
    from worker.engine.vllm_engine import VllmEngine
    from worker.main import claim_phase_slot_for, engine_from_settings

    m = model()
    gpu = Settings(redis_url=test_redis_url,
                   engine=EngineSettings(kind="vllm", served_model_name=m,
                                         cost_profile="h200-llama3-8b", model_path="unused"))
    period = profile("h200-llama3-8b").phase_period_s()
    assert period > 0
    assert [claim_phase_slot_for(gpu, w) for w in ("w-a", "w-b")] == [0, 1]
    engine = engine_from_settings(gpu, 1)
    assert isinstance(engine, VllmEngine)
    config = engine.config
    assert config == vllm_config(gpu, 1)
    assert config.phase_period_s == period
    assert config.phase_offset_s == pytest.approx(PhaseGrid.for_slot(period, 1).offset_s)
    assert config.phase_offset_s == pytest.approx(period / 2)
    assert config.phase_cost is not None
    assert config.phase_cost["prefill_per_token_s"] == profile("h200-llama3-8b").prefill_per_token_s
    assert vllm_config(gpu, None).phase_period_s == 0  # no slot: unlocked

    # No lock planned, no slot claimed: the CPU profile's period is 0, or it is set to 0.
    cpu = gpu.with_changes(engine={"cost_profile": "cpu-smollm2-135m"})
    off = gpu.with_changes(engine={"phase_period_s": 0.0})
    assert claim_phase_slot_for(cpu, "w-c") is None
    assert claim_phase_slot_for(off, "w-c") is None
    assert vllm_config(cpu, 2).phase_period_s == 0
    fixed = gpu.with_changes(engine={"phase_period_s": 0.5})
    assert vllm_config(fixed, 3).phase_offset_s == pytest.approx(0.5 * 3 / 4)

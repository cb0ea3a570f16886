"""The worker's Redis client waits out its hand-off read's whole BLOCK on an idle stream:
redis-py 8's default 5 s socket timeout ended every idle read in a timeout, taken for an
outage, and the read backed off while placed jobs waited."""

from __future__ import annotations

import asyncio
import uuid

from service.store.settings import Settings
from worker.host import HANDOFF_BLOCK_MS, worker_redis


def test_an_idle_hand_off_read_blocks_its_whole_wait(test_redis_url: str) -> None:
    async def read() -> object:
        redis = worker_redis(Settings(redis_url=test_redis_url))
        try:
            return await redis.xread({f"test-idle-handoff:{uuid.uuid4()}": "$"}, count=1,
                                     block=HANDOFF_BLOCK_MS)
        finally:
            await redis.aclose()

    assert not asyncio.run(read())  # nothing came, and no timeout

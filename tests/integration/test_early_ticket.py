"""The express ticket the door takes beside its quota script (service.jobs.express.EarlyTicket)
against the real Redis and Postgres: a request the door refuses gives its ticket back, at the
head of its list and never without an expiry; an admitted one carries it to its insert."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from redis.asyncio import Redis

from service.api.door import admit
from service.api.slo_gate import SloGate
from service.cli.bootstrap import create_tenant_with_key
from service.jobs.express import EarlyTicket
from service.store.db import async_sessionmaker_for, sync_session
from service.store.keys import EXPRESS_LIST_TTL_MS, encode_ticket, express_key
from service.store.models.quotas import TenantQuota
from service.store.models.tenants import Tenant
from service.store.settings import Settings
from service.web.errors import APIError

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def _settle(redis: Redis, key: str) -> list[bytes]:
    for _ in range(100):  # the give-back runs in the background
        await asyncio.sleep(0.01)
        entries: list[bytes] = await redis.lrange(key, 0, -1)  # type: ignore[misc]
        if len(entries) != 1 or entries[0] != b"w-b|2":
            return entries
    return entries


def test_a_ticket_given_back_is_at_the_head_again_and_expires(test_redis_url: str) -> None:
    model = f"early-{uuid.uuid4().hex[:6]}"
    key = express_key(model)

    async def run() -> tuple[list[bytes], int, list[bytes], int]:
        redis = Redis.from_url(test_redis_url)
        try:
            await redis.rpush(key, encode_ticket("w-a", "1"), encode_ticket("w-b", "2"))  # type: ignore[misc]
            await redis.pexpire(key, 60_000)
            early = EarlyTicket(redis, model)
            taken = await early.take()
            assert taken is not None and taken.worker_id == "w-a"
            early.give_back()
            kept = await _settle(redis, key)
            kept_ttl = await redis.pttl(key)
            await redis.delete(key)
            await redis.rpush(key, encode_ticket("w-c", "3"))  # type: ignore[misc]
            last = EarlyTicket(redis, model)
            assert (await last.take()) is not None  # the pop emptied (deleted) the list
            last.give_back()
            for _ in range(100):
                await asyncio.sleep(0.01)
                if await redis.exists(key):
                    break
            return kept, kept_ttl, await redis.lrange(key, 0, -1), await redis.pttl(key)  # type: ignore[misc]
        finally:
            await redis.delete(key)
            await redis.aclose()

    kept, kept_ttl, again, ttl = asyncio.run(run())
    assert kept == [b"w-a|1", b"w-b|2"]
    assert 50_000 < kept_ttl <= 60_000  # the lender's expiry stands
    assert again == [b"w-c|3"]
    assert 0 < ttl <= EXPRESS_LIST_TTL_MS  # an emptied list comes back with the lender's TTL


def test_a_request_its_quota_refuses_gives_its_ticket_back(database_url: str,
                                                          test_redis_url: str) -> None:
    settings = Settings(database_url=database_url, redis_url=test_redis_url)
    tenant_id, _ = create_tenant_with_key(settings, f"early-{uuid.uuid4().hex[:6]}")
    with sync_session(database_url) as session:
        session.add(TenantQuota(tenant_id=tenant_id, overrides={"requests_per_minute": 1}))
        session.commit()
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        session.expunge(tenant)
    key = express_key("m")

    async def run() -> tuple[list[bool], list[bytes]]:
        redis = Redis.from_url(test_redis_url)
        sessions = async_sessionmaker_for(database_url)
        request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(
            redis=redis, slo_gate=SloGate(redis), sessionmaker=sessions)))
        carried: list[bool] = []
        try:
            await redis.delete(key)
            await redis.rpush(key, *(encode_ticket("w-a", str(i)) for i in range(3)))  # type: ignore[misc]
            await redis.pexpire(key, 60_000)
            for _ in range(2):  # the first is admitted, the second refused (1 a minute)
                async with sessions() as session:
                    try:
                        door = await admit(request, session, settings, tenant,  # type: ignore[arg-type]
                                           model="m", payload=dict(BODY), max_tokens=8,
                                           deadline_ms=None)
                    except APIError as exc:
                        assert exc.status == 429
                        continue
                    carried.append(door.ticket is not None
                                   and (await door.ticket.take()) is not None)
                    await door.admission.release()
            await asyncio.sleep(0.1)  # the refused one's give-back, in the background
            return carried, await redis.lrange(key, 0, -1)  # type: ignore[misc]
        finally:
            await redis.delete(key)
            await redis.aclose()

    carried, left = asyncio.run(run())
    assert carried == [True]  # the admitted request took one, for its insert
    assert left == [b"w-a|1", b"w-a|2"]  # the refused one's came back to the head

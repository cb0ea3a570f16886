"""The express hand-off the door's quota script sends on admission
(service.store.quota_scripts.ADMIT_AND_HAND_OFF, through ``service.api.door.Door.admit``), against
the real Redis and Postgres: an admitted realtime request takes the model's next ticket and its
entry is in that worker's stream, for its job, before the door returns; a refused one, one
admitted with no ticket lent and one whose month counter had to be seeded first take exactly
what they should; an entry Redis refuses places nothing and drops its ticket."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from redis.asyncio import Redis

from service.api.door import Admitted, Door
from service.api.slo_gate import SloGate
from service.cli.bootstrap import create_tenant_with_key
from service.jobs.door_request import DoorRequest
from service.quotas.door_policy import DoorPolicies, PolicyCache
from service.quotas.reservation import RequestQuotas
from service.store import handoff
from service.store.db import async_sessionmaker_for, sync_session
from service.store.keys import encode_ticket, express_key, handoff_stream
from service.store.models.quotas import TenantQuota
from service.store.models.tenants import Tenant
from service.store.quota_store import QuotaStore
from service.store.settings import Settings
from service.web.errors import APIError

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi\u0000there"}]}


def _tenant(database_url: str, overrides: dict[str, Any] | None = None) -> Tenant:
    settings = Settings(database_url=database_url)
    tenant_id, _ = create_tenant_with_key(settings, f"handoff-{uuid.uuid4().hex[:6]}")
    with sync_session(database_url) as session:
        if overrides:
            session.add(TenantQuota(tenant_id=tenant_id, overrides=overrides))
            session.commit()
        tenant = session.get(Tenant, tenant_id)
        assert tenant is not None
        session.expunge(tenant)
    return tenant


async def _door(database_url: str, redis_url: str, tenant: Tenant, model: str, tickets: int,
                requests: int, before: Any = None
                ) -> tuple[list[Admitted | APIError], list[Any], dict[str, list[Any]]]:
    """Lend ``tickets`` (worker w-a, then w-b, ...) and admit ``requests`` in a row: what
    each got, the tickets left, and each worker's stream entries."""
    settings = Settings(database_url=database_url, redis_url=redis_url)
    redis = Redis.from_url(redis_url)
    sessions = async_sessionmaker_for(database_url)
    policies = DoorPolicies(PolicyCache(), sessions)
    the_door = Door(settings, SloGate(redis), policies,
                    RequestQuotas(QuotaStore(redis), policies))
    key, workers = express_key(model), [f"w-{chr(97 + i)}-{model}" for i in range(3)]
    out: list[Admitted | APIError] = []
    try:
        if tickets:
            await redis.rpush(key, *(encode_ticket(workers[i], f"t{i}")
                                     for i in range(tickets)))
            await redis.pexpire(key, 60_000)
        if before is not None:
            await before(redis, workers)
        for _ in range(requests):
            async with sessions() as session:
                try:
                    door = await the_door.admit(session, DoorRequest(
                        tenant, None, model, "chat.completions", dict(BODY), 8, None))
                except APIError as exc:
                    out.append(exc)
                    continue
                out.append(door)
                await door.admission.release()
        left: list[Any] = await redis.lrange(key, 0, -1)
        streams: dict[str, list[Any]] = {}
        for worker in workers:
            if await redis.type(handoff_stream(worker)) == b"stream":
                streams[worker] = list(await redis.xrange(handoff_stream(worker)) or [])
        return out, left, streams
    finally:
        await redis.delete(key, *(handoff_stream(w) for w in workers))
        await redis.aclose()


def test_an_admitted_request_is_handed_off_to_the_next_tickets_worker(
        database_url: str, test_redis_url: str) -> None:
    tenant = _tenant(database_url)
    model = f"ho-{uuid.uuid4().hex[:6]}"
    out, left, streams = asyncio.run(_door(database_url, test_redis_url, tenant, model,
                                           tickets=2, requests=1))
    door, = out
    assert isinstance(door, Admitted) and door.ticket is not None
    assert (door.ticket.worker_id, door.ticket.ticket) == (f"w-a-{model}", "t0")
    assert left == [encode_ticket(f"w-b-{model}", "t1").encode()]
    (_, fields), = streams[f"w-a-{model}"]
    entry = handoff.decode(fields)
    assert entry is not None and entry.ahead and entry.attempt == 1
    assert entry.job_id == str(door.admission.ticket)  # the job the insert will create
    assert entry.body is not None and entry.body.tenant_id == str(tenant.id)
    assert entry.body.endpoint == "chat.completions" and entry.body.max_tokens == 8
    # The body as the row stores it: U+0000 escaped (service.store.nul_codec).
    assert "\u0000" not in entry.body.request["messages"][0]["content"]


def test_a_refused_request_takes_no_ticket_and_sends_nothing(database_url: str,
                                                            test_redis_url: str) -> None:
    tenant = _tenant(database_url, {"requests_per_minute": 1})
    model = f"ho-{uuid.uuid4().hex[:6]}"
    out, left, streams = asyncio.run(_door(database_url, test_redis_url, tenant, model,
                                           tickets=3, requests=2))
    admitted, refused = out
    assert isinstance(admitted, Admitted) and admitted.ticket is not None
    assert isinstance(refused, APIError) and refused.status == 429
    assert len(left) == 2 and list(streams) == [f"w-a-{model}"]
    assert len(streams[f"w-a-{model}"]) == 1


def test_with_no_ticket_lent_the_request_is_admitted_unplaced(database_url: str,
                                                             test_redis_url: str) -> None:
    tenant = _tenant(database_url)
    out, left, streams = asyncio.run(_door(database_url, test_redis_url, tenant,
                                           f"ho-{uuid.uuid4().hex[:6]}", tickets=0,
                                           requests=1))
    door, = out
    assert isinstance(door, Admitted) and door.ticket is None
    assert left == [] and streams == {}


def test_a_month_counter_seeded_first_hands_off_once(database_url: str,
                                                     test_redis_url: str) -> None:
    tenant = _tenant(database_url, {"monthly_tokens": 10**9})  # a new tenant: no counter yet
    model = f"ho-{uuid.uuid4().hex[:6]}"
    out, left, streams = asyncio.run(_door(database_url, test_redis_url, tenant, model,
                                           tickets=2, requests=1))
    door, = out
    assert isinstance(door, Admitted) and door.ticket is not None
    assert len(left) == 1 and len(streams[f"w-a-{model}"]) == 1


def test_an_entry_redis_refuses_places_nothing_and_drops_its_ticket(
        database_url: str, test_redis_url: str) -> None:
    tenant = _tenant(database_url)
    model = f"ho-{uuid.uuid4().hex[:6]}"

    async def break_first_stream(redis: Redis, workers: list[str]) -> None:
        await redis.set(handoff_stream(workers[0]), "not a stream")  # XADD: WRONGTYPE

    out, left, streams = asyncio.run(_door(database_url, test_redis_url, tenant, model,
                                           tickets=2, requests=2, before=break_first_stream))
    first, second = out
    assert isinstance(first, Admitted) and first.ticket is None  # the dispatcher's way
    assert isinstance(second, Admitted) and second.ticket is not None
    assert second.ticket.worker_id == f"w-b-{model}"  # the broken worker's ticket was dropped
    assert left == [] and list(streams) == [f"w-b-{model}"]

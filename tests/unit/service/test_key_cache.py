"""The key cache's own rules: TTL, no caching at 0, bounded size (oldest out first)."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

from service.tenants.key_cache import KeyCache, KeyLookup


def lookup(name: str = "t") -> KeyLookup:
    now = dt.datetime.now(dt.UTC)
    return KeyLookup(uuid.uuid4(), None, None, None, uuid.uuid4(), name, "standard", 1.0, None,
                     now)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_lives_for_the_ttl() -> None:
    clock = Clock()
    cache = KeyCache(5.0, clock=clock)
    found = lookup()
    cache.put("h", found)
    clock.now = 4.99
    assert cache.get("h") is found
    clock.now = 5.0
    assert cache.get("h") is None and len(cache) == 0


def test_ttl_zero_keeps_nothing() -> None:
    cache = KeyCache(0.0)
    cache.put("h", lookup())
    assert cache.get("h") is None and len(cache) == 0


def test_the_oldest_entry_goes_first_when_full() -> None:
    cache = KeyCache(60.0, max_entries=2)
    for name in ("a", "b", "c"):
        cache.put(name, lookup(name))
    assert cache.get("a") is None
    assert cache.get("b") is not None and cache.get("c") is not None


def test_each_request_gets_its_own_detached_tenant() -> None:
    found = lookup("acme")
    one, two = found.tenant(), found.tenant()
    assert one is not two and one.id == two.id == found.tenant_id and one.name == "acme"
    assert one.plan == "standard"


def test_a_burst_of_misses_on_one_key_reads_it_once() -> None:
    cache, found, reads = KeyCache(5.0), lookup(), []

    async def read() -> KeyLookup:
        reads.append(1)
        await asyncio.sleep(0.01)
        return found

    async def burst() -> list[KeyLookup | None]:
        return list(await asyncio.gather(*(cache.read_once("h", read) for _ in range(10))))

    assert asyncio.run(burst()) == [found] * 10
    assert len(reads) == 1
    assert cache.get("h") is found


def test_an_unknown_key_is_shared_with_the_burst_but_never_kept() -> None:
    cache = KeyCache(5.0)

    async def read() -> None:
        await asyncio.sleep(0.01)

    async def burst() -> list[KeyLookup | None]:
        return list(await asyncio.gather(*(cache.read_once("h", read) for _ in range(3))))

    assert asyncio.run(burst()) == [None] * 3
    assert cache.get("h") is None


def test_when_the_shared_read_fails_each_waiter_reads_on_its_own() -> None:
    cache, found, calls = KeyCache(5.0), lookup(), []

    async def read() -> KeyLookup:
        calls.append(1)
        await asyncio.sleep(0.01)
        if len(calls) == 1:
            raise ConnectionError("the first read's connection dropped")
        return found

    async def burst() -> list[KeyLookup | BaseException | None]:
        return list(await asyncio.gather(*(cache.read_once("h", read) for _ in range(3)),
                                         return_exceptions=True))

    first, *others = asyncio.run(burst())
    assert isinstance(first, ConnectionError)
    assert others == [found, found]
    assert len(calls) == 3


def test_past_half_its_ttl_an_entry_answers_while_one_background_read_renews_it() -> None:
    clock = Clock()
    cache = KeyCache(4.0, clock=clock, renew_after_s=0.03)
    old, new, reads = lookup(), lookup(), []
    cache.put("h", old)

    async def read() -> KeyLookup:
        reads.append(1)
        await asyncio.sleep(0.01)
        return new

    async def run() -> None:
        clock.now = 1.9
        cache.refresh_ahead("h", read)
        await asyncio.sleep(0.05)
        assert reads == []  # not yet half its TTL
        clock.now = 2.1
        cache.refresh_ahead("h", read)
        cache.refresh_ahead("h", read)
        assert cache.get("h") is old  # answers meanwhile
        await asyncio.sleep(0.01)
        assert reads == []  # the read waits past the request that found the entry old
        await asyncio.sleep(0.05)
        assert reads == [1]
        assert cache.get("h") is new
        clock.now = 6.0  # renewed at 2.1: kept until 6.1, never older than its TTL
        assert cache.get("h") is new
        clock.now = 6.1
        assert cache.get("h") is None

    asyncio.run(run())

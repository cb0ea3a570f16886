"""A refusal at the door waits on nothing once the tenant's policy and the model's outlook are
in the process's memory (service.api.door, service.quotas.door_policy): in a burst of hundreds
of streams on one event loop, any await on a refusal's path (a Redis or Postgres read) is
answered only after the whole burst, and the refusal with it.

Each test drives ``Door.admit`` by hand: a coroutine that raises its 429 on the first step
never yielded to the event loop."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any, cast

import pytest

from scheduler.outlook import RealtimeOutlook
from service.api import door
from service.api.slo_gate import SloGate
from service.jobs.door_request import DoorRequest
from service.quotas.door_policy import REHINT_TASK, DoorPolicies, PolicyCache
from service.quotas.policy import TenantPolicy
from service.store.quota_limits import QuotaLimits
from service.store.settings import Settings
from service.web.errors import APIError

POLICY = TenantPolicy("premium", QuotaLimits(0, 0, 0, 0, 0), ("default",), 500, 50, "shed")
TENANT = SimpleNamespace(id=uuid.uuid4(), plan="premium", weight=1.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class NoRedis:
    """The gate's Redis: any use is a round trip the refusal path must not make."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the refusal path used Redis ({name})")


class Quotas:
    def __init__(self) -> None:
        self.asked = 0

    async def reserve(self, session: Any, ask: Any, door_policy: Any, prompt: int) -> Any:
        self.asked += 1
        await asyncio.sleep(0)  # a round trip

        async def refund() -> None:
            return None
        return SimpleNamespace(express_ticket=None, refund=refund)


def _outlook(load: int) -> RealtimeOutlook:
    """One worker of 4 slots, ``load`` realtime jobs on it, each a second long."""
    return RealtimeOutlook(model="m", at=time.time() + 3600, workers=1, slots_total=4,
                           rt_load=load, rt_queued_prefill=0, mean_prompt_tokens=50,
                           job_service_s=1.0, step_s=0.02, prefill_per_token_s=1e-4,
                           prefill_step_s=0.01, token_budget=512)


class Policies(DoorPolicies):
    """The door's policy sources with Postgres faked: each read counted, and held while
    ``release`` is clear."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(PolicyCache(clock=clock), None)  # type: ignore[arg-type]
        self.reads = 0
        self.release = asyncio.Event()
        self.release.set()

    async def _read_apart(self, tenant_id: uuid.UUID, plan: str) -> TenantPolicy:
        self.reads += 1
        await self.release.wait()
        return POLICY


def _door(monkeypatch: pytest.MonkeyPatch, load: int
          ) -> tuple[door.Door, Policies, Clock, Quotas]:
    async def no_session(session: Any) -> None:
        return None

    monkeypatch.setattr(door, "without_transaction", no_session)
    gate = SloGate(NoRedis())  # type: ignore[arg-type]
    gate.keep("m", _outlook(load))  # as the outlook poller keeps it
    clock = Clock()
    policies = Policies(clock)
    quotas = Quotas()
    return door.Door(Settings(), gate, policies, quotas), policies, clock, quotas


def _request(tenant: Any = TENANT) -> DoorRequest:
    return DoorRequest(tenant, None, "m", "chat.completions",
                       {"messages": [{"role": "user", "content": "hi"}]}, 16, None)


def _refused_in_one_step(the_door: door.Door, tenant: Any = TENANT) -> APIError:
    """The 429 the door raises on its coroutine's first step; fails if it yields instead."""
    coro = cast(Coroutine[Any, Any, Any],
                the_door.admit(None, _request(tenant)))  # type: ignore[arg-type]
    try:
        yielded = coro.send(None)
    except APIError as exc:
        return exc
    coro.close()
    raise AssertionError(f"the refusal path awaited {yielded!r}")


def _read_once(policies: Policies) -> None:
    """The tenant's first request: its policy read (a hint, not cached: no generation yet)."""
    async def read() -> None:
        await policies.read(None, _request())  # type: ignore[arg-type]
    asyncio.run(read())


def test_a_refusal_on_a_policy_read_moments_ago_never_awaits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    the_door, policies, _, quotas = _door(monkeypatch, load=200)
    _read_once(policies)
    refused = _refused_in_one_step(the_door)
    assert refused.status == 429 and refused.code == "slo_unattainable"
    assert refused.headers is not None and int(refused.headers["Retry-After"]) >= 1
    assert quotas.asked == 0 and policies.reads == 1


def test_a_cached_policy_refuses_without_a_read(monkeypatch: pytest.MonkeyPatch) -> None:
    the_door, policies, _, _ = _door(monkeypatch, load=200)
    policies.cache.observe(TENANT.id, 3)  # an admission saw the tenant's generation
    _read_once(policies)  # so this read is cached
    policies._hints.clear()  # no hint: the cached policy is the door's fastest source
    assert _refused_in_one_step(the_door).code == "slo_unattainable"
    assert policies.reads == 1


def test_a_tenant_not_seen_lately_is_refused_on_its_plans_hint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the door judges by is the plan's: another tenant's policy on it refuses too (a
    tenant quiet for a while, or in a process its earlier requests did not reach)."""
    the_door, policies, _, _ = _door(monkeypatch, load=200)
    _read_once(policies)  # TENANT's
    other = SimpleNamespace(id=uuid.uuid4(), plan="premium", weight=1.0)
    assert _refused_in_one_step(the_door, other).code == "slo_unattainable"
    assert policies.reads == 1  # not the other tenant's
    elsewhere = SimpleNamespace(id=uuid.uuid4(), plan="standard", weight=1.0)
    assert policies.hint(_request(elsewhere)) is None  # another plan's: read before judged


def test_a_stale_hint_refuses_at_once_while_one_read_renews_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    the_door, policies, clock, _ = _door(monkeypatch, load=200)

    async def run() -> None:
        await policies.read(None, _request())  # type: ignore[arg-type]
        clock.now += 3.0  # past HINT_TTL_S, within HINT_STALE_S
        for _ in range(5):
            assert _refused_in_one_step(the_door).code == "slo_unattainable"
        renewals = [t for t in asyncio.all_tasks() if t.get_name() == REHINT_TASK]
        assert len(renewals) == 1  # one read, in the background, for all five
        await asyncio.gather(*renewals)
        assert policies.reads == 2
        assert policies.hint(_request()) is not None
        assert not [t for t in asyncio.all_tasks() if t.get_name() == REHINT_TASK]

    asyncio.run(run())


def test_a_stale_hint_takes_a_cached_policy_renewed_since_without_a_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    the_door, policies, clock, _ = _door(monkeypatch, load=200)

    async def run() -> None:
        policies.cache.observe(TENANT.id, 3)
        await policies.read(None, _request())  # type: ignore[arg-type]
        clock.now += 3.0  # the hint is past HINT_TTL_S; the cache renewed meanwhile:
        policies.cache.store(TENANT.id, TENANT.plan, POLICY, 3)
        assert _refused_in_one_step(the_door).code == "slo_unattainable"
        assert not [t for t in asyncio.all_tasks() if t.get_name() == REHINT_TASK]
        assert policies.reads == 1

    asyncio.run(run())


def test_a_hint_too_old_is_not_judged_by(monkeypatch: pytest.MonkeyPatch) -> None:
    the_door, policies, clock, _ = _door(monkeypatch, load=200)

    async def run() -> None:
        await policies.read(None, _request())  # type: ignore[arg-type]
        clock.now += 6.0  # past HINT_STALE_S: the request waits for the tenant's policy
        policies.release.clear()
        admission = asyncio.ensure_future(the_door.admit(None, _request()))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        assert not admission.done() and policies.reads == 2  # waiting on the read
        policies.release.set()
        with pytest.raises(APIError):  # then refused on what it read
            await admission

    asyncio.run(run())


def test_requests_the_hint_lets_on_count_ahead_while_their_policy_is_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle pool, a burst, and the tenant's policy not cached: the hint's look lets the
    first few on, and they wait on one policy read; counted ahead meanwhile, the rest of the
    burst is refused at once instead of waiting on that read to be refused after it."""
    the_door, policies, _, _ = _door(monkeypatch, load=0)

    async def run() -> None:
        await policies.read(None, _request())  # type: ignore[arg-type]
        policies.release.clear()  # the next read is slow (the first was not cached)
        tasks = [asyncio.ensure_future(the_door.admit(None, _request()))  # type: ignore[arg-type]
                 for _ in range(40)]
        await asyncio.sleep(0.01)
        refused_at_once = [t for t in tasks if t.done()]
        assert all(isinstance(t.exception(), APIError) for t in refused_at_once)
        assert len(refused_at_once) >= 30  # not waiting on the read
        assert the_door.gate._on_the_way["m"] == 40 - len(refused_at_once)
        policies.release.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert the_door.gate._on_the_way["m"] == 0
        assert policies.reads == 2

    asyncio.run(run())

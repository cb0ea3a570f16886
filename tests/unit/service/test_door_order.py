"""The door's order (``service.api.door.Door.admit``): a realtime request its SLO cannot admit
is refused before the quota script runs (so the refusal takes no quota and costs no Redis
round trip);
the gate counts a request only once its quota admitted it (a tenant bursting past its own rate
limit must not make the pool look busy to others); a request the gate refuses on that second
look gets its quota back; the quota script gets the request's hand-off entry, for its job's
id, and a job it placed on a lent ticket is counted, never refused after it."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.outlook import DoorVerdict
from service.api import door
from service.api.api_backlog import ApiBacklog
from service.jobs.door_request import DoorRequest
from service.quotas.door_policy import DoorPolicy
from service.quotas.policy import TenantPolicy
from service.quotas.reservation import QuotaAsk
from service.store.quota_limits import QuotaLimits
from service.store.settings import Settings
from service.web.errors import APIError


class FakeGate:
    def __init__(self, retry: int | None, counted_retry: int | None = None,
                 adapter: str | None = None) -> None:
        self.adapter = adapter  # the ft: name the requests name, if any
        self.retry = retry  # the answer to a look that counts nothing
        self.counted_retry = counted_retry  # the answer to a look that counts an admission
        self.admitted = 0
        self.prompts: list[int] = []
        self.rules: list[tuple[float, float | None]] = []  # (target_s, max_wait_s) per look
        self.due: list[float | None] = []  # the EDF deadline each look ordered it by
        self.backlog = ApiBacklog()
        self.on_the_way_at_quota: list[int] = []
        self.moving = 0

    async def judge(self, model: str, *, prompt_tokens: int, target_s: float,
                    count: bool = True, tenant: str | None = None, weight: float = 1.0,
                    max_wait_s: float | None = None, adapter: str | None = None,
                    due_in_s: float | None = None) -> DoorVerdict:
        assert tenant == str(TENANT.id) and weight == TENANT.weight  # judged as its tenant
        assert adapter == self.adapter  # the request's ft: name, or None for a base model
        self.prompts.append(prompt_tokens)
        self.rules.append((target_s, max_wait_s))
        self.due.append(due_in_s)
        retry = self.counted_retry if count else self.retry
        if retry is None and count:
            self.admitted += 1
        return DoorVerdict(0.1, retry)

    @contextlib.contextmanager
    def on_the_way(self, model: str) -> Iterator[None]:
        self.moving += 1
        try:
            yield
        finally:
            self.moving -= 1

    def count(self, model: str, tenant: str) -> None:
        assert tenant == str(TENANT.id)
        self.admitted += 1

    def predicted_ttft_s(self, model: str, *, prompt_tokens: int, tenant: str,
                         weight: float = 1.0, adapter: str | None = None) -> float | None:
        return 0.1


class FakePolicies:
    """The door's policy sources, with no database: the read always succeeds."""

    def __init__(self, calls: list[str], policy: TenantPolicy) -> None:
        self.calls = calls
        self.policy = policy
        self.hints: dict[Any, DoorPolicy] = {}

    def hint(self, req: DoorRequest) -> DoorPolicy | None:
        return self.hints.get(req.tenant.id)

    def cached(self, req: DoorRequest) -> DoorPolicy | None:
        return None

    async def read(self, session: Any, req: DoorRequest) -> DoorPolicy:
        self.calls.append("policy")
        self.hints[req.tenant.id] = door = DoorPolicy(self.policy, "default")
        return door


class FakeQuotas:
    def __init__(self, calls: list[str], quota_error: APIError | None, placed: str | None
                 ) -> None:
        self.calls, self.quota_error, self.placed = calls, quota_error, placed

    async def reserve(self, session: Any, ask: QuotaAsk, door: DoorPolicy,
                      prompt_estimate: int) -> Any:
        express = ask.express
        self.calls.append("reserve+hand-off" if express is not None else "reserve")
        if express is not None:  # the entry is for the job the admission will create
            assert express.fields["job"] == str(ask.ticket) and express.model == "m"
        if self.quota_error is not None:
            raise self.quota_error

        async def refund() -> None:
            self.calls.append("refund")
        # A ticket is lent only with a hand-off to send on it.
        return SimpleNamespace(express_ticket=self.placed if express is not None else None,
                               refund=refund)


# A plan that sheds by its 500 ms TTFT target; QUEUED waits up to 20 s instead.
POLICY = TenantPolicy("premium", QuotaLimits(0, 0, 0, 0, 0), ("default",), 500, 50, "shed")
QUEUED = replace(POLICY, admission_mode="queue", max_queue_wait_ms=20_000)


def _door(monkeypatch: pytest.MonkeyPatch, gate: FakeGate, quota_error: APIError | None,
          placed: str | None = "w1|t1", settings: Settings | None = None,
          policy: TenantPolicy = POLICY) -> tuple[door.Door, list[str]]:
    calls: list[str] = []

    async def no_session(session: Any) -> None:  # no database here: the reads are faked
        return None

    monkeypatch.setattr(door, "without_transaction", no_session)
    the_door = door.Door(settings or Settings(), gate,  # type: ignore[arg-type]
                         FakePolicies(calls, policy), FakeQuotas(calls, quota_error, placed))
    return the_door, calls


TENANT = SimpleNamespace(id=uuid.uuid4(), plan="premium", weight=2.0)


def _admit(the_door: door.Door, content: str = "", model: str | None = None) -> Any:
    payload: dict[str, Any] = {"messages": [{"role": "user", "content": content}]}
    if model is not None:
        payload["model"] = model
    req = DoorRequest(TENANT, None, "m", "chat.completions", payload,  # type: ignore[arg-type]
                      16, None)
    return the_door.admit(None, req)  # type: ignore[arg-type]


def test_an_slo_refusal_takes_no_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=2)
    the_door, calls = _door(monkeypatch, gate, quota_error=None)
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(the_door))
    assert refused.value.status == 429 and refused.value.code == "slo_unattainable"
    assert calls == ["policy"]  # the quota script never ran


def test_a_quota_refusal_is_never_counted_at_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=None)
    the_door, calls = _door(monkeypatch, gate,
                            quota_error=APIError(429, "over", code="rate_limit"))
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(the_door))
    assert refused.value.code == "rate_limit"
    assert calls == ["policy", "reserve+hand-off"] and gate.admitted == 0


def test_a_refusal_on_the_counted_look_refunds_the_quota(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    gate = FakeGate(retry=None, counted_retry=2)  # the pool filled while the quota answered
    the_door, calls = _door(monkeypatch, gate, quota_error=None,
                            placed=None)  # no ticket was lent
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(the_door))
    assert refused.value.code == "slo_unattainable"
    assert calls == ["policy", "reserve+hand-off", "refund"] and gate.admitted == 0


def test_a_placed_request_is_counted_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=None, counted_retry=2)  # a second look would refuse it
    the_door, calls = _door(monkeypatch, gate, quota_error=None)
    admitted = asyncio.run(_admit(the_door))  # its hand-off is out: the lender saw room
    assert calls == ["policy", "reserve+hand-off"] and gate.admitted == 1
    assert admitted.ticket is not None


def test_an_admitted_request_is_counted_and_placed(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=None)
    the_door, calls = _door(monkeypatch, gate, quota_error=None)
    admitted = asyncio.run(_admit(the_door))
    assert calls == ["policy", "reserve+hand-off"] and gate.admitted == 1
    assert admitted.ticket is not None and admitted.ticket.worker_id == "w1"  # for the insert
    assert admitted.classification.kind.value == "realtime"


def test_an_adapters_request_is_placed_by_the_policy_not_a_lent_ticket(
        monkeypatch: pytest.MonkeyPatch) -> None:
    name = "ft:m:acme:support"
    gate = FakeGate(retry=None, adapter=name)
    the_door, calls = _door(monkeypatch, gate, quota_error=None)
    admitted = asyncio.run(_admit(the_door, model=name))
    assert calls == ["policy", "reserve"] and admitted.ticket is None
    assert gate.admitted == 1  # judged and counted at the gate as any other


def test_without_express_tickets_nothing_is_handed_off(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    gate = FakeGate(retry=None)
    settings = Settings()
    settings.dispatcher.express_tickets = 0
    the_door, calls = _door(monkeypatch, gate, quota_error=None, settings=settings)
    asyncio.run(_admit(the_door))
    assert calls == ["policy", "reserve"]


def test_a_refusal_within_the_hint_ttl_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=None)
    the_door, calls = _door(monkeypatch, gate, quota_error=None)
    asyncio.run(_admit(the_door))  # admitted: the tenant's policy is now a hint
    gate.retry = gate.counted_retry = 3  # the pool is now overloaded
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(the_door, content="x" * 400))
    assert refused.value.code == "slo_unattainable"
    assert calls == ["policy", "reserve+hand-off"]  # the refusal read nothing, took nothing
    assert gate.prompts[-1] > 100  # judged with this request's prompt, not the hint's
    gate.retry = gate.counted_retry = None  # an admission always re-reads the policy
    asyncio.run(_admit(the_door))
    assert calls == ["policy", "reserve+hand-off"] * 2


def test_a_queueing_plan_is_judged_by_its_wait_budget_and_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=4)
    the_door, calls = _door(monkeypatch, gate, quota_error=None, policy=QUEUED)
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(the_door))
    assert refused.value.status == 429 and refused.value.code == "slo_unattainable"
    assert "longest queue wait (20 s)" in refused.value.message
    assert refused.value.reason == "queue_wait_exceeded" and calls == ["policy"]
    target_s, max_wait_s = gate.rules[-1]
    assert max_wait_s == 20.0 and target_s > 30  # the realtime deadline, not the 0.5 s target
    assert gate.due[-1] == 0.5  # yet ordered by the target among other tenants' jobs (EDF)


def test_a_shedding_plan_is_judged_by_its_ttft_target(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=None)
    the_door, _ = _door(monkeypatch, gate, quota_error=None)
    asyncio.run(_admit(the_door))
    assert gate.rules[0] == (0.5, None) and gate.due[0] == 0.5



def test_a_request_awaiting_its_quota_counts_on_the_way(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Between the gate's two looks a request is counted ahead of others' looks (a burst
    whose first looks all pass is refused before the quota script), and no longer after."""
    gate = FakeGate(retry=None)
    the_door, _ = _door(monkeypatch, gate, quota_error=None)
    seen: list[int] = []
    original = the_door.quotas.reserve

    async def reserve(*args: Any, **kwargs: Any) -> Any:
        seen.append(gate.moving)
        return await original(*args, **kwargs)

    the_door.quotas.reserve = reserve  # type: ignore[method-assign]
    admitted = asyncio.run(_admit(the_door))
    assert seen == [1] and gate.moving == 0
    assert admitted.predicted_ttft_s == 0.1  # kept for its job row


class RateLimitedQuotas(FakeQuotas):
    """The first ask is past a rate limit (or ``reason``); later asks are admitted."""

    def __init__(self, calls: list[str], reason: str) -> None:
        super().__init__(calls, None, None)
        self.reason = reason
        self.asks: list[QuotaAsk] = []

    async def reserve(self, session: Any, ask: QuotaAsk, door: DoorPolicy,
                      prompt_estimate: int) -> Any:
        self.asks.append(ask)
        if len(self.asks) == 1:
            self.calls.append("reserve")
            raise APIError(429, "past the limit", code="rate_limit_exceeded",
                           reason=self.reason)
        return await super().reserve(session, ask, door, prompt_estimate)


OVERFLOWING = replace(POLICY, over_quota="overflow",
                      limits=QuotaLimits(5, 1000, 2, None, 100_000))


@pytest.mark.parametrize("reason", ["requests_per_minute", "tokens_per_minute",
                                    "concurrent_requests"])
def test_past_a_rate_limit_an_overflowing_plan_runs_the_request_as_flex(
        monkeypatch: pytest.MonkeyPatch, reason: str) -> None:
    gate = FakeGate(retry=None)
    the_door, calls = _door(monkeypatch, gate, quota_error=None, policy=OVERFLOWING)
    quotas = RateLimitedQuotas(calls, reason)
    the_door.quotas = quotas  # type: ignore[assignment]
    admitted = asyncio.run(_admit(the_door))
    assert calls == ["policy", "reserve", "reserve"]
    assert admitted.classification.kind.value == "batch"
    assert admitted.classification.service_tier == "flex"
    again = quotas.asks[1]
    assert (again.policy.limits.requests_per_minute, again.policy.limits.tokens_per_minute,
            again.policy.limits.concurrent_requests) == (None, None, None)
    assert again.policy.limits.monthly_tokens == 100_000  # the month still binds
    assert not again.hold_slot and again.express is None
    assert gate.admitted == 0  # flex is not counted at the realtime gate


@pytest.mark.parametrize("policy, reason", [(POLICY, "requests_per_minute"),
                                            (OVERFLOWING, "monthly_tokens")])
def test_a_refusing_plan_or_the_month_still_answer_429(
        monkeypatch: pytest.MonkeyPatch, policy: TenantPolicy, reason: str) -> None:
    the_door, calls = _door(monkeypatch, FakeGate(retry=None), quota_error=None, policy=policy)
    the_door.quotas = RateLimitedQuotas(calls, reason)  # type: ignore[assignment]
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(the_door))
    assert refused.value.status == 429 and calls == ["policy", "reserve"]

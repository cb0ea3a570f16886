"""The door's order (service/api/door.py): a realtime request its SLO cannot admit is refused
before the quota script runs (so the refusal takes no quota and costs no Redis round trip);
the gate counts a request only once its quota admitted it (a tenant bursting past its own rate
limit must not make the pool look busy to others); a request the gate refuses on that second
look gets its quota back; the quota script gets the request's hand-off entry, for its job's
id, and a job it placed on a lent ticket is counted, never refused after it."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from service.api import door
from service.quotas.admission import DoorPolicy
from service.quotas.policy import TenantPolicy
from service.store.quota_limits import QuotaLimits
from service.store.settings import Settings
from service.web.errors import APIError


class FakeGate:
    def __init__(self, retry: int | None, counted_retry: int | None = None) -> None:
        self.retry = retry  # the answer to a look that counts nothing
        self.counted_retry = counted_retry  # the answer to a look that counts an admission
        self.admitted = 0
        self.prompts: list[int] = []

    async def check(self, model: str, *, prompt_tokens: int, target_s: float,
                    count: bool = True, tenant: str | None = None, weight: float = 1.0
                    ) -> int | None:
        assert tenant == str(TENANT.id) and weight == TENANT.weight  # judged as its tenant
        self.prompts.append(prompt_tokens)
        retry = self.counted_retry if count else self.retry
        if retry is None and count:
            self.admitted += 1
        return retry

    def count(self, model: str, tenant: str) -> None:
        assert tenant == str(TENANT.id)
        self.admitted += 1


def _door(monkeypatch: pytest.MonkeyPatch, gate: FakeGate, quota_error: APIError | None,
          placed: str | None = "w1|t1") -> list[str]:
    calls: list[str] = []
    policy = TenantPolicy("premium", QuotaLimits(0, 0, 0, 0, 0), ("default",), 500, 50)

    async def fake_policy(session: Any, *, tenant: Any, body: Any, **kwargs: Any) -> DoorPolicy:
        calls.append("policy")
        return DoorPolicy(policy, "default", 10)

    async def fake_reserve(session: Any, store: Any, **kwargs: Any) -> Any:
        express = kwargs["express"]
        calls.append("reserve+hand-off" if express is not None else "reserve")
        if express is not None:  # the entry is for the job the admission will create
            assert express.fields["job"] == str(kwargs["ticket"]) and express.model == "m"
        if quota_error is not None:
            raise quota_error

        async def refund() -> None:
            calls.append("refund")
        return SimpleNamespace(express_ticket=placed, refund=refund)

    async def no_session(session: Any) -> None:  # no database here: the reads are faked
        return None

    monkeypatch.setattr(door, "without_transaction", no_session)
    monkeypatch.setattr(door, "door_policy", fake_policy)
    monkeypatch.setattr(door, "reserve_request", fake_reserve)
    monkeypatch.setattr(door, "quota_store", lambda state: None)
    return calls


TENANT = SimpleNamespace(id=uuid.uuid4(), tier="premium", weight=2.0)


def _admit(gate: FakeGate, state: Any = None, content: str = "",
           settings: Settings | None = None) -> Any:
    state = state or SimpleNamespace(slo_gate=gate, redis=None)
    request = SimpleNamespace(app=SimpleNamespace(state=state))
    payload = {"messages": [{"role": "user", "content": content}]}
    return door.admit(request, None, settings or Settings(), TENANT,  # type: ignore[arg-type]
                      model="m",
                      endpoint="chat.completions", payload=payload, max_tokens=16,
                      deadline_ms=None)


def test_an_slo_refusal_takes_no_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=2)
    calls = _door(monkeypatch, gate, quota_error=None)
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(gate))
    assert refused.value.status == 429 and refused.value.code == "slo_unattainable"
    assert calls == ["policy"]  # the quota script never ran


def test_a_quota_refusal_is_never_counted_at_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=None)
    calls = _door(monkeypatch, gate, quota_error=APIError(429, "over", code="rate_limit"))
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(gate))
    assert refused.value.code == "rate_limit"
    assert calls == ["policy", "reserve+hand-off"] and gate.admitted == 0


def test_a_refusal_on_the_counted_look_refunds_the_quota(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    gate = FakeGate(retry=None, counted_retry=2)  # the pool filled while the quota answered
    calls = _door(monkeypatch, gate, quota_error=None, placed=None)  # no ticket was lent
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(gate))
    assert refused.value.code == "slo_unattainable"
    assert calls == ["policy", "reserve+hand-off", "refund"] and gate.admitted == 0


def test_a_placed_request_is_counted_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=None, counted_retry=2)  # a second look would refuse it
    calls = _door(monkeypatch, gate, quota_error=None)
    admitted = asyncio.run(_admit(gate))  # its hand-off is out: the lender saw room
    assert calls == ["policy", "reserve+hand-off"] and gate.admitted == 1
    assert admitted.ticket is not None


def test_an_admitted_request_is_counted_and_placed(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=None)
    calls = _door(monkeypatch, gate, quota_error=None)
    admitted = asyncio.run(_admit(gate))
    assert calls == ["policy", "reserve+hand-off"] and gate.admitted == 1
    assert admitted.ticket is not None and admitted.ticket.worker_id == "w1"  # for the insert
    assert admitted.classification.kind.value == "realtime"


def test_without_express_tickets_nothing_is_handed_off(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    gate = FakeGate(retry=None)
    calls = _door(monkeypatch, gate, quota_error=None)
    settings = Settings()
    settings.dispatcher.express_tickets = 0
    asyncio.run(_admit(gate, settings=settings))
    assert calls == ["policy", "reserve"]


def test_a_refusal_within_the_hint_ttl_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = FakeGate(retry=None)
    calls = _door(monkeypatch, gate, quota_error=None)
    state = SimpleNamespace(slo_gate=gate, redis=None)
    asyncio.run(_admit(gate, state))  # admitted: the tenant's policy is now a hint
    gate.retry = gate.counted_retry = 3  # the pool is now overloaded
    with pytest.raises(APIError) as refused:
        asyncio.run(_admit(gate, state, content="x" * 400))
    assert refused.value.code == "slo_unattainable"
    assert calls == ["policy", "reserve+hand-off"]  # the refusal read nothing, took nothing
    assert gate.prompts[-1] > 100  # judged with this request's prompt, not the hint's
    gate.retry = gate.counted_retry = None  # an admission always re-reads the policy
    asyncio.run(_admit(gate, state))
    assert calls == ["policy", "reserve+hand-off"] * 2

"""The API's door counts the requests it admitted since the last outlook as the policy will
order them: a request waits behind its own tenant's and behind the others' due no later than
it (EDF across tenants), not behind a looser plan's admitted a moment ago
(service/api/slo_gate.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from scheduler.outlook import RealtimeOutlook
from service.api.slo_gate import SloGate
from service.store.heartbeats import encode_outlook


class OneValueRedis:
    def __init__(self, value: str) -> None:
        self.value = value

    async def get(self, key: str) -> Any:
        return self.value


def outlook() -> str:
    """Two slots, each job a second: each admitted job past the slots is half a second of
    wait (less the few milliseconds the pool frees slots in while a test runs)."""
    return encode_outlook(RealtimeOutlook(
        model="m", at=time.time(), workers=1, slots_total=2, rt_load=0,
        rt_queued_prefill=0, mean_prompt_tokens=0, job_service_s=1.0, step_s=0.0,
        prefill_per_token_s=0.0, prefill_step_s=0.0, token_budget=512))


def approx(x: float) -> object:
    return pytest.approx(x, abs=0.05)


def predicted(gate: SloGate, tenant: str, due_in_s: float | None) -> float:
    verdict = asyncio.run(gate.judge("m", prompt_tokens=1, target_s=60.0, count=False,
                                     tenant=tenant, due_in_s=due_in_s))
    assert verdict is not None
    return verdict.predicted_ttft_s


def admit(gate: SloGate, tenant: str, due_in_s: float | None, n: int) -> None:
    for _ in range(n):
        verdict = asyncio.run(gate.judge("m", prompt_tokens=1, target_s=60.0, tenant=tenant,
                                         due_in_s=due_in_s))
        assert verdict is not None and verdict.retry_after is None


def test_a_tighter_request_overtakes_a_looser_tenants_admissions() -> None:
    gate = SloGate(OneValueRedis(outlook()))  # type: ignore[arg-type]
    admit(gate, "standard", 1.0, 3)
    # Standard's own: three ahead, one past the two slots -> two jobs' turn of slots.
    assert predicted(gate, "standard", 1.0) == approx(1.0)
    # Premium, due in 0.5 s, is served before standard's three (due in about 1 s).
    assert predicted(gate, "premium", 0.5) == approx(0.0)
    # A looser one waits behind all three.
    assert predicted(gate, "flexible", 5.0) == approx(1.0)


def test_without_a_deadline_every_admission_counts_ahead() -> None:
    gate = SloGate(OneValueRedis(outlook()))  # type: ignore[arg-type]
    admit(gate, "standard", 1.0, 3)
    assert predicted(gate, "premium", None) == approx(1.0)
    # One admitted with no deadline is served after those due (a placed express ticket).
    gate.count("m", "other")
    assert predicted(gate, "premium", 0.5) == approx(0.0)
    assert predicted(gate, "premium", None) == approx(1.5)

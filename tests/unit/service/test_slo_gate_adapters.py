"""The API's door counts a LoRA adapter's load from the outlook it already reads (no other
Redis read): a request for an adapter no worker holds is predicted ``adapter_load_s`` later
(service/api/slo_gate.py, service/api/door.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.outlook import RealtimeOutlook
from service.api.door import adapter_of
from service.api.slo_gate import SloGate
from service.jobs.door_request import DoorRequest
from service.store.heartbeats import encode_outlook


class OneValueRedis:
    def __init__(self, value: str) -> None:
        self.value = value
        self.gets = 0

    async def get(self, key: str) -> Any:
        self.gets += 1
        return self.value


OUTLOOK = encode_outlook(RealtimeOutlook(
    model="m", at=time.time() + 3600, workers=1, slots_total=4, rt_load=0,
    rt_queued_prefill=0, mean_prompt_tokens=50, job_service_s=1.0, step_s=0.02,
    prefill_per_token_s=1e-4, prefill_step_s=0.01, token_budget=512,
    warm_adapters=("ft:m:acme:warm",), adapter_load_s=0.3))


def test_a_cold_adapter_is_judged_with_its_load_from_the_same_read() -> None:
    async def run() -> None:
        redis = OneValueRedis(OUTLOOK)
        gate = SloGate(redis)  # type: ignore[arg-type]
        base = await gate.judge("m", prompt_tokens=50, target_s=1.0, count=False)
        warm = await gate.judge("m", prompt_tokens=50, target_s=1.0, count=False,
                                adapter="ft:m:acme:warm")
        cold = await gate.judge("m", prompt_tokens=50, target_s=0.3, count=False,
                                adapter="ft:m:acme:cold")
        assert base is not None and warm is not None and cold is not None
        assert warm.predicted_ttft_s == base.predicted_ttft_s
        assert cold.predicted_ttft_s == pytest.approx(base.predicted_ttft_s + 0.3)
        assert warm.retry_after is None and cold.retry_after is not None  # 0.34 s: past the bar
        assert redis.gets == 1  # one outlook read for all three
        predicted = gate.predicted_ttft_s("m", prompt_tokens=50, tenant="t",
                                          adapter="ft:m:acme:cold")
        assert predicted == pytest.approx(base.predicted_ttft_s + 0.3)

    asyncio.run(run())


def test_the_door_names_the_adapter_of_an_ft_request_only() -> None:
    tenant = SimpleNamespace(id=uuid.uuid4(), plan="premium", weight=1.0)

    def request(model: str) -> DoorRequest:
        payload = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        return DoorRequest(tenant, None, "m", "chat.completions", payload,  # type: ignore[arg-type]
                           16, None)

    assert adapter_of(request("ft:m:acme:support")) == "ft:m:acme:support"
    assert adapter_of(request("m")) is None

"""Admission counts an adapter load: a realtime job whose LoRA adapter no worker of its model
holds is predicted to wait ``adapter_load_s`` more, by the policy (scheduler/policies/
admission.py) and at the door, from the warm adapters the outlook lists (scheduler/outlook.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sched_helpers import rt, worker

from scheduler.outlook import (
    RealtimeOutlook,
    door_verdict,
    predict_new_ttft,
    warm_listing,
)
from scheduler.policies import FairwayConfig, FairwayPolicy
from scheduler.types import JobView, Reject, WorkerView
from service.store.heartbeats import decode_outlook, encode_outlook

CONFIG = FairwayConfig(headroom_enabled=False, adapter_load_s=0.3)
IDLE = RealtimeOutlook(model="m", at=0.0, workers=1, slots_total=8, rt_load=0,
                       rt_queued_prefill=0, mean_prompt_tokens=100, job_service_s=1.0,
                       step_s=0.02, prefill_per_token_s=1e-4, prefill_step_s=0.01,
                       token_budget=512, warm_adapters=("ft:m:t:warm",), adapter_load_s=0.3)


def lora_worker(worker_id: str, adapters: tuple[str, ...]) -> WorkerView:
    return replace(worker(worker_id, slots=8), adapters=adapters, max_loras=2, max_cpu_loras=4)


def on(job: JobView, adapter: str) -> JobView:
    job.adapter = adapter
    return job


def test_a_cold_adapter_adds_its_load_to_the_prediction() -> None:
    base = predict_new_ttft(IDLE, prompt_tokens=100)
    assert predict_new_ttft(IDLE, prompt_tokens=100, adapter="ft:m:t:warm") == base
    cold = predict_new_ttft(IDLE, prompt_tokens=100, adapter="ft:m:t:cold")
    assert cold == pytest.approx(base + 0.3)
    # An outlook that lists only part of the warm adapters, or from before adapters (no
    # load figure), adds nothing.
    assert predict_new_ttft(replace(IDLE, warm_adapters_all=False), prompt_tokens=100,
                            adapter="ft:m:t:cold") == base
    assert predict_new_ttft(replace(IDLE, adapter_load_s=0.0), prompt_tokens=100,
                            adapter="ft:m:t:cold") == base


def test_the_door_refuses_for_a_load_it_would_not_for_a_warm_adapter() -> None:
    target = (predict_new_ttft(IDLE, prompt_tokens=100) + 0.15) / 0.7  # a load past the bar
    warm = door_verdict(IDLE, prompt_tokens=100, target_s=target, adapter="ft:m:t:warm")
    cold = door_verdict(IDLE, prompt_tokens=100, target_s=target, adapter="ft:m:t:cold")
    assert warm.retry_after is None
    assert cold.retry_after is not None
    assert cold.predicted_ttft_s == pytest.approx(warm.predicted_ttft_s + 0.3)


def test_the_policy_outlook_lists_the_adapters_its_workers_hold() -> None:
    policy = FairwayPolicy(CONFIG)
    policy.on_worker_heartbeat(lora_worker("w1", ("ft:a", "ft:b")))
    policy.on_worker_heartbeat(lora_worker("w2", ("ft:c",)))
    (outlook,) = policy.outlook(0.0)
    assert set(outlook.warm_adapters) == {"ft:a", "ft:b", "ft:c"}
    assert outlook.warm_adapters_all and outlook.adapter_load_s == 0.3
    back = decode_outlook(encode_outlook(outlook))  # as the API reads it from Redis
    assert back is not None and back.warm_adapters == outlook.warm_adapters


def test_a_cut_listing_keeps_each_workers_most_recent_and_says_so() -> None:
    names, complete = warm_listing([["a1", "a2", "a3"], ["b1", "b2"]], listed=3)
    assert names == ("a1", "b1", "a2") and not complete
    assert warm_listing([["a", "b"], ["b"]], listed=3) == (("a", "b"), True)


def test_the_policy_refuses_a_cold_adapters_job_its_load_would_make_miss() -> None:
    policy = FairwayPolicy(CONFIG)
    policy.on_worker_heartbeat(lora_worker("w1", ("ft:warm",)))
    # An idle pool: the first token in a few tens of ms, a 0.2 s target, a 0.3 s load.
    policy.on_job_arrived(on(rt("warm", slo=0.2), "ft:warm"))
    policy.on_job_arrived(on(rt("cold", slo=0.2), "ft:cold"))
    refused = [d.job_id for d in policy.schedule(0.0) if isinstance(d, Reject)]
    assert refused == ["cold"]


def measured(view: WorkerView, load_s: float | None) -> WorkerView:
    return replace(view, adapter_load_s=load_s)


def test_the_engines_measured_load_replaces_the_configured_one() -> None:
    policy = FairwayPolicy(CONFIG)  # configured: 0.3 s
    policy.on_worker_heartbeat(measured(lora_worker("w1", ("ft:warm",)), 0.01))
    policy.on_worker_heartbeat(measured(lora_worker("w2", ()), 0.03))
    policy.on_worker_heartbeat(measured(lora_worker("w3", ()), 0.02))
    (outlook,) = policy.outlook(0.0)
    assert outlook.adapter_load_s == pytest.approx(0.02)  # the pool's median
    # Measured in tens of ms, the load no longer makes a cold adapter's job miss 0.2 s.
    policy.on_job_arrived(on(rt("cold", slo=0.2), "ft:cold"))
    assert not [d for d in policy.schedule(0.0) if isinstance(d, Reject)]
    # A worker that measured a slow load moves the median; one that leaves takes its own.
    policy.on_worker_heartbeat(measured(lora_worker("w2", ()), 2.0))
    policy.on_worker_heartbeat(measured(lora_worker("w4", ()), 3.0))
    assert policy.outlook(0.0)[0].adapter_load_s == pytest.approx(1.01)
    policy.on_worker_lost("w4")
    assert policy.outlook(0.0)[0].adapter_load_s == pytest.approx(0.02)
    policy.on_job_arrived(on(rt("slow", slo=0.2), "ft:slow"))
    policy.on_worker_heartbeat(measured(lora_worker("w1", ("ft:warm",)), 2.5))
    assert [d.job_id for d in policy.schedule(0.0) if isinstance(d, Reject)] == ["slow"]


def test_a_pool_without_measurements_keeps_the_configured_load() -> None:
    policy = FairwayPolicy(CONFIG)
    policy.on_worker_heartbeat(lora_worker("w1", ()))
    assert policy.outlook(0.0)[0].adapter_load_s == 0.3
    policy.on_worker_heartbeat(measured(lora_worker("w1", ()), 0.05))
    policy.on_worker_heartbeat(lora_worker("w1", ()))  # a restarted engine: nothing measured
    assert policy.outlook(0.0)[0].adapter_load_s == 0.3

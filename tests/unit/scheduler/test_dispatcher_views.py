"""The dispatcher's translation of heartbeats into WorkerView."""

from __future__ import annotations

import uuid

from scheduler.dispatcher.views import live_beats, worker_view


def test_heartbeat_job_ids_become_canonical_running_ids() -> None:
    job = uuid.uuid4()
    beat = {
        "worker_id": "w1",
        "models": ["m"],
        "max_slots": 4,
        "running": 2,
        "kv_usage": 0.5,
        "kv_capacity_tokens": 1000,
        "ts": 1.0,
        "job_ids": [job.hex, "not-a-uuid"],
    }
    view = worker_view(beat, {})
    assert view.running_ids == frozenset({str(job)})
    assert (view.running, view.kv_used_tokens) == (2, 500)
    del beat["job_ids"]  # an older worker: nothing reported
    assert worker_view(beat, {}).running_ids == frozenset()


def test_a_beat_reporting_lora_gives_its_adapters_and_slots() -> None:
    beat = {"worker_id": "w1", "models": ["m"], "max_slots": 4, "kv_capacity_tokens": 1000,
            "adapters": ["a1", "a2"], "max_loras": 4, "max_cpu_loras": 16}
    view = worker_view(beat, {})
    assert (view.adapters, view.max_loras, view.max_cpu_loras) == (("a1", "a2"), 4, 16)
    for key in ("adapters", "max_loras", "max_cpu_loras"):
        del beat[key]  # a worker without LoRA: nothing reported, the policy's defaults
    view = worker_view(beat, {})
    assert (view.adapters, view.max_loras, view.max_cpu_loras) == ((), 0, 0)


def test_a_beat_with_load_times_gives_the_engines_median_load() -> None:
    beat = {"worker_id": "w1", "models": ["m"], "max_slots": 4, "kv_capacity_tokens": 1000,
            "adapters": ["ft:a"], "adapter_load_times": {
                "a": {"seconds": [0.01, 0.03], "at": 5.0},
                "b": {"seconds": [0.02, "x", -1, True], "at": 6.0},  # the bad ones skipped
                "c": "not an entry", "d": {"seconds": "nor this", "at": 1.0}}}
    assert worker_view(beat, {}).adapter_load_s == 0.02
    for published in ({}, {"a": {"seconds": [], "at": 1.0}}, None, ["a"]):
        beat["adapter_load_times"] = published
        assert worker_view(beat, {}).adapter_load_s is None


def test_a_system_prompt_becomes_prefix_key_and_its_length_estimate() -> None:
    import datetime as dt
    from types import SimpleNamespace

    from scheduler.dispatcher.views import job_view
    from service.store.job_queries import _to_queued

    system = {"role": "system", "content": "You are terse. " * 40}
    row = SimpleNamespace(
        id=uuid.uuid4(), seq=1, tenant_id=uuid.uuid4(), weight=1.0, kind="realtime",
        priority=1, model="m", created_at=dt.datetime.now(dt.UTC), deadline_at=None,
        max_tokens=16, generated=0, ttft_slo_ms=500, max_wait_ms=None, attempt=0,
        endpoint="chat.completions",
        request={"messages": [system, {"role": "user", "content": "hi"}]},
    )
    view = job_view(_to_queued(row))  # type: ignore[arg-type]
    assert view.prefix_key is not None
    assert 140 <= view.prefix_tokens <= 160  # ~4 characters a token of the 600-character prompt
    assert view.prompt_tokens > view.prefix_tokens
    assert view.ttft_slo_s == 0.5  # the tenant's plan's target, not the request's deadline
    assert view.max_wait_s is None  # the plan sheds by its target
    row.request = {"messages": [{"role": "user", "content": "hi"}]}  # no shared prefix
    assert job_view(_to_queued(row)).prefix_tokens == 0  # type: ignore[arg-type]
    row.max_wait_ms = 20_000  # a plan that queues: its wait budget reaches the policy
    assert job_view(_to_queued(row)).max_wait_s == 20.0  # type: ignore[arg-type]
    row.kind = "batch"  # batch is never judged at the door
    assert job_view(_to_queued(row)).max_wait_s is None  # type: ignore[arg-type]
    assert job_view(_to_queued(row)).adapter is None  # type: ignore[arg-type]
    row.request = {"model": "ft:m:acme:support-v2", "messages": []}  # a tenant's adapter
    assert job_view(_to_queued(row)).adapter == "ft:m:acme:support-v2"  # type: ignore[arg-type]


def test_a_worker_silent_while_others_beat_is_dead() -> None:
    beats = [{"worker_id": "a", "ts": 100.0}, {"worker_id": "b", "ts": 97.0}]
    assert [b["worker_id"] for b in live_beats(beats, silence_s=1.5)] == ["a"]


def test_a_pool_silent_all_together_is_not_declared_dead() -> None:
    # Both beats are old by the clock (a starved box): nobody is singled out.
    beats = [{"worker_id": "a", "ts": 10.0}, {"worker_id": "b", "ts": 9.5}]
    assert [b["worker_id"] for b in live_beats(beats, silence_s=1.5)] == ["a", "b"]
    assert live_beats([], silence_s=1.5) == []

"""Layer 1 on vLLM's real scheduler: a waiting realtime request preempts running batch ones.

These drive vLLM's own `Scheduler` (and our subclasses) directly on the CPU, without a model:
a config.json for a tiny Llama is enough for `ModelConfig`, the KV cache is a bare
`KVCacheConfig`, and a fake model step samples one token per request. They pin the parts of
vLLM's private interface that `worker.engine.vllm_preempt` uses: if vLLM moves them, the module
import (and so this file) fails, or these assertions do. Only a missing vLLM skips them.
"""

from __future__ import annotations

import types
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed")

from vllm.utils.import_utils import resolve_obj_by_qualname
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from tests.unit.worker.engine.vllm_sched_support import (
    BATCH,
    FLEX,
    REALTIME,
    MakeSched,
    batch_pool,
    fill,
    kv_full,
    make_sched,
    model_dir,
    output_for,
    request,
    step,
)
from worker.engine import vllm_preempt
from worker.engine.vllm_preempt import (
    ASYNC_QUALNAME,
    GAP_KEY,
    SYNC_QUALNAME,
    PreemptiveAsyncScheduler,
    PreemptiveScheduler,
)

__all__ = ["make_sched", "model_dir"]  # fixtures, imported for pytest


# ---- the interface we pin ------------------------------------------------------------------


def test_pinned_interface_is_there(make_sched: MakeSched) -> None:
    import vllm

    assert vllm.__version__.startswith(vllm_preempt.SUPPORTED_VLLM_SERIES)
    assert vllm_preempt.interface_problems() == []
    for cls in (Scheduler, PreemptiveScheduler, PreemptiveAsyncScheduler):
        assert vllm_preempt.instance_problems(make_sched(cls)) == []


def test_guard_names_what_moved(monkeypatch: pytest.MonkeyPatch, make_sched: MakeSched) -> None:
    monkeypatch.delattr(Scheduler, "_preempt_request")
    assert vllm_preempt.interface_problems() == ["Scheduler._preempt_request is missing"]
    monkeypatch.undo()

    def moved(self: Any, req: Any, when: float) -> None: ...

    monkeypatch.setattr(Scheduler, "_preempt_request", moved)
    assert "Scheduler._preempt_request takes" in vllm_preempt.interface_problems()[0]
    monkeypatch.undo()

    sched = make_sched(Scheduler)
    del sched.kv_cache_manager
    assert vllm_preempt.instance_problems(sched) == ["Scheduler().kv_cache_manager is missing"]


def test_classes_resolve_by_name_and_follow_async_scheduling() -> None:
    # The engine core runs in a spawned process and imports the class by its qualname.
    assert resolve_obj_by_qualname(SYNC_QUALNAME) is PreemptiveScheduler
    assert resolve_obj_by_qualname(ASYNC_QUALNAME) is PreemptiveAsyncScheduler
    assert issubclass(PreemptiveAsyncScheduler, AsyncScheduler)
    for is_async, name in ((False, SYNC_QUALNAME), (True, ASYNC_QUALNAME)):
        cfg = types.SimpleNamespace(
            scheduler_config=types.SimpleNamespace(
                policy="priority", async_scheduling=is_async, scheduler_cls=None
            ),
            additional_config={},
        )
        assert vllm_preempt.install(cfg, priority_gap=2) == name
        assert cfg.scheduler_config.scheduler_cls == name
        assert cfg.additional_config == {GAP_KEY: 2}
    cfg.scheduler_config.policy = "fcfs"
    with pytest.raises(ValueError, match="priority"):
        vllm_preempt.install(cfg)


def test_vllm_engine_plugs_the_scheduler_into_the_resolved_config(make_sched: MakeSched) -> None:
    from worker.engine import VllmEngineConfig
    from worker.engine.vllm_engine import VllmEngine

    vllm_cfg = make_sched(Scheduler).vllm_config  # CPU platform: async scheduling is off
    vllm_cfg.scheduler_config.scheduler_cls = None
    engine = VllmEngine(VllmEngineConfig("unused", "m", kv_cache_gib=1, preempt_priority_gap=2))
    assert engine._plug_scheduler(vllm_cfg) == SYNC_QUALNAME
    assert vllm_cfg.additional_config[GAP_KEY] == 2
    vllm_cfg.scheduler_config.scheduler_cls = None
    stock = VllmEngine(VllmEngineConfig("unused", "m", kv_cache_gib=1,
                                        preempt_for_priority=False))
    assert stock._plug_scheduler(vllm_cfg) is None


# ---- slots full ----------------------------------------------------------------------------


def running_mix() -> list[Request]:
    """Four running requests; the worst by vLLM's key (priority, arrival) is b-late."""
    return [
        request("b-early", BATCH, 40, arrival=0.0),
        request("b-mid", BATCH, 40, arrival=1.0),
        request("b-late", BATCH, 40, arrival=3.0),
        request("flex", FLEX, 40, arrival=4.0),  # later, but a better priority
    ]


def test_stock_scheduler_keeps_realtime_waiting_vllm_issue_40004(make_sched: MakeSched) -> None:
    sched = make_sched(Scheduler)
    fill(sched, running_mix())
    sched.add_request(request("rt", REALTIME, 30, arrival=5.0))
    for _ in range(5):
        out = step(sched)
        assert "rt" not in out.num_scheduled_tokens and not out.preempted_req_ids
    assert sched.requests["rt"].status == RequestStatus.WAITING


def test_realtime_preempts_exactly_the_worst_running_request(make_sched: MakeSched) -> None:
    sched = make_sched()
    fill(sched, running_mix())
    victim = sched.requests["b-late"]
    kept = list(victim.output_token_ids)
    assert kept  # it has generated tokens that must survive the preemption

    sched.add_request(request("rt", REALTIME, 30, arrival=5.0, max_tokens=3))
    out = step(sched)

    assert out.num_scheduled_tokens["rt"] == 30  # admitted, whole prompt, in this very step
    assert out.preempted_req_ids == {"b-late"}
    assert sched.num_priority_preemptions == 1
    assert victim.status == RequestStatus.PREEMPTED and victim not in sched.running
    assert victim.num_computed_tokens == 0 and list(victim.output_token_ids) == kept
    assert {r.request_id for r in sched.running} == {"b-early", "b-mid", "flex", "rt"}

    # Recompute: once realtime finishes, the victim resumes from prompt + its output so far.
    for _ in range(4):
        step(sched)
    assert "rt" not in sched.requests
    assert victim.status == RequestStatus.RUNNING
    assert list(victim.output_token_ids)[: len(kept)] == kept
    assert victim.num_preemptions == 1 and sched.num_priority_preemptions == 1


def test_two_realtime_requests_take_two_victims_in_one_step(make_sched: MakeSched) -> None:
    sched = make_sched()
    fill(sched, running_mix())
    sched.add_request(request("rt1", REALTIME, 30, arrival=5.0))
    sched.add_request(request("rt2", 1, 30, arrival=6.0))
    out = step(sched)
    assert {"rt1", "rt2"} <= set(out.num_scheduled_tokens)
    # b-late first; then the next worst, b-mid (priority 3 before flex's 2).
    assert out.preempted_req_ids == {"b-late", "b-mid"}


def test_equal_priority_never_preempts(make_sched: MakeSched) -> None:
    sched = make_sched()
    fill(sched, batch_pool(4))
    sched.add_request(request("late-batch", BATCH, 30, arrival=9.0))
    for _ in range(3):
        out = step(sched)
        assert "late-batch" not in out.num_scheduled_tokens and not out.preempted_req_ids
    assert sched.num_priority_preemptions == 0


def test_only_requests_worse_than_the_head_by_the_gap_are_victims(make_sched: MakeSched) -> None:
    # A flex request (2) against running batch (3): preempts with gap 1, not with gap 2.
    for gap, preempts in ((1, True), (2, False)):
        sched = make_sched(gap=gap)
        fill(sched, batch_pool(4))
        sched.add_request(request("flex", FLEX, 30, arrival=9.0))
        out = step(sched)
        assert ("flex" in out.num_scheduled_tokens) is preempts
        assert out.preempted_req_ids == ({"b3"} if preempts else set())

    # Realtime (0) against running realtime (1) and flex (2): only flex may go, with gap 2.
    sched = make_sched(gap=2)
    fill(sched, [request(f"r{i}", 1, 40, arrival=float(i)) for i in range(3)])
    sched.add_request(request("f", FLEX, 40, arrival=3.0))
    step(sched)
    sched.add_request(request("rt", REALTIME, 30, arrival=9.0))
    out = step(sched)
    assert out.preempted_req_ids == {"f"} and "rt" in out.num_scheduled_tokens
    sched.add_request(request("rt2", REALTIME, 30, arrival=10.0))
    out = step(sched)
    assert not out.preempted_req_ids and "rt2" not in out.num_scheduled_tokens


# ---- KV cache full -------------------------------------------------------------------------


def test_kv_full_stock_scheduler_keeps_realtime_waiting(make_sched: MakeSched) -> None:
    sched = kv_full(make_sched, Scheduler)
    sched.add_request(request("rt", REALTIME, 100, arrival=9.0))
    for _ in range(3):
        out = step(sched)
        assert "rt" not in out.num_scheduled_tokens and not out.preempted_req_ids


def test_kv_full_preempts_until_the_realtime_request_fits(make_sched: MakeSched) -> None:
    sched = kv_full(make_sched, PreemptiveScheduler)
    sched.add_request(request("rt", REALTIME, 100, arrival=9.0))  # 7 blocks: one victim
    out = step(sched)
    assert out.num_scheduled_tokens["rt"] == 100
    assert out.preempted_req_ids == {"b3"}

    sched = kv_full(make_sched, PreemptiveScheduler)
    sched.add_request(request("rt", REALTIME, 250, arrival=9.0))  # 17 blocks: two victims
    out = step(sched)
    assert out.num_scheduled_tokens["rt"] == 250
    assert out.preempted_req_ids == {"b3", "b2"}
    assert sched.num_priority_preemptions == 2


def test_a_request_that_cannot_fit_preempts_nobody(make_sched: MakeSched) -> None:
    sched = kv_full(make_sched, PreemptiveScheduler)
    sched.add_request(request("huge", REALTIME, 700, arrival=9.0))  # 44 blocks > 39 in all
    out = step(sched)
    assert not out.preempted_req_ids and "huge" not in out.num_scheduled_tokens
    assert len(sched.running) == 4


# ---- async scheduling (the GPU default) ------------------------------------------------------


def test_async_scheduler_preempts_with_a_step_in_flight(make_sched: MakeSched) -> None:
    """AsyncScheduler schedules step N+1 before step N's output arrives; the victim has
    output in flight when it is preempted, which vLLM marks stale and delivers later."""
    sched = make_sched(PreemptiveAsyncScheduler)
    for r in running_mix():
        sched.add_request(r)
    inflight: list[Any] = []

    def async_step() -> Any:
        out = sched.schedule()
        inflight.append((out, output_for(sched, out)))
        if len(inflight) > 1:  # one step in flight, like the engine core's batch queue
            sched.update_from_output(*inflight.pop(0))
        return out

    for _ in range(4):
        async_step()
    victim = sched.requests["b-late"]
    assert victim.num_output_placeholders > 0  # a token of it is in flight
    sched.add_request(request("rt", REALTIME, 30, arrival=5.0, max_tokens=3))
    out = async_step()
    assert out.num_scheduled_tokens["rt"] == 30 and out.preempted_req_ids == {"b-late"}
    for _ in range(8):
        async_step()
    while inflight:
        sched.update_from_output(*inflight.pop(0))
    assert "rt" not in sched.requests  # finished
    assert victim.status == RequestStatus.RUNNING and victim.num_preemptions == 1

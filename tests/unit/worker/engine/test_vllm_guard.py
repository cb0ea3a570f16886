"""The realtime guard (worker.engine.vllm_guard) on vLLM's real scheduler, on the CPU: a
realtime prefill step runs alone, batch prefill is capped while realtime is around, and
batch is never stalled or starved by it."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed")

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus

from tests.unit.worker.engine.vllm_sched_support import (
    BATCH,
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
from worker.engine import vllm_guard
from worker.engine.vllm_preempt import PreemptiveAsyncScheduler, PreemptiveScheduler

__all__ = ["make_sched", "model_dir"]  # fixtures, imported for pytest


def guarded_mix(make_sched: MakeSched, cls: type = PreemptiveScheduler) -> Any:
    """Three batch requests decoding, then a realtime and a new batch request arrive."""
    sched = make_sched(cls, max_num_seqs=8, guard_chunk=32)
    fill(sched, batch_pool(3), steps=6)  # an engine starts guarded: 32-token batch chunks
    assert all(r.num_output_tokens for r in sched.running)
    sched.add_request(request("rt", REALTIME, 30, arrival=5.0, max_tokens=4))
    sched.add_request(request("b-new", BATCH, 100, arrival=6.0))
    return sched


def test_guard_gives_a_realtime_prefill_step_to_realtime_alone(make_sched: MakeSched) -> None:
    sched = guarded_mix(make_sched)
    before = {r.request_id: r.next_decode_eligible_step for r in sched.running}
    out = step(sched)
    assert out.num_scheduled_tokens == {"rt": 30}  # no batch decode, no batch admission
    assert sched.requests["b-new"].status == RequestStatus.WAITING
    # Everything the guard changed for the step is back.
    assert sched.max_num_active_reqs == 8 and sched.max_num_scheduled_tokens == 2048
    assert sched.scheduler_config.long_prefill_token_threshold == 0
    assert {r: sched.requests[r].next_decode_eligible_step for r in before} == before
    assert sched.num_guard_realtime_steps == 1

    # Realtime decodes now: batch is back, and the new batch prompt gets the chunk only.
    out = step(sched)
    assert {"rt", "b0", "b1", "b2"} <= set(out.num_scheduled_tokens)
    assert out.num_scheduled_tokens["b-new"] == 32
    out = step(sched)
    assert out.num_scheduled_tokens["b-new"] == 32  # still capped while realtime is around


def test_without_the_guard_realtime_shares_its_step_with_batch(make_sched: MakeSched) -> None:
    sched = make_sched(max_num_seqs=8)  # guard_chunk 0: off
    fill(sched, batch_pool(3))
    sched.add_request(request("rt", REALTIME, 30, arrival=5.0, max_tokens=4))
    sched.add_request(request("b-new", BATCH, 100, arrival=6.0))
    out = step(sched)
    assert out.num_scheduled_tokens["rt"] == 30
    assert out.num_scheduled_tokens["b-new"] == 100 and "b0" in out.num_scheduled_tokens


def test_guard_cap_is_total_batch_prefill_and_lapses_after_the_hold(
    make_sched: MakeSched,
) -> None:
    sched = guarded_mix(make_sched)
    for _ in range(6):
        step(sched)  # realtime done; b-new still prefilling in 32-token chunks
    assert "rt" not in sched.requests
    sched.add_request(request("b-x", BATCH, 200, arrival=7.0))
    out = step(sched)
    batch_prefill = sum(n for r, n in out.num_scheduled_tokens.items() if n > 1)
    assert batch_prefill == 32  # b-new's last piece and b-x share one chunk
    b_x = sched.requests["b-x"]
    left = b_x.num_tokens - b_x.num_computed_tokens
    assert left > 32
    sched.guard_hold_s = 0.0  # realtime was last seen longer ago than the hold
    out = step(sched)
    assert out.num_scheduled_tokens["b-x"] == left
    assert sched.num_guard_capped_steps >= 6


def test_guard_never_stops_batch_for_realtime_that_cannot_fit(make_sched: MakeSched) -> None:
    # KV full of batch; a realtime prompt larger than all KV can never be admitted. Batch
    # must keep going (its finishing is what frees KV), not sit out steps for it.
    sched = kv_full(make_sched, PreemptiveScheduler)
    sched.guard_chunk_tokens = 32  # the guard from here on
    sched.add_request(request("huge", REALTIME, 700, arrival=9.0))
    for _ in range(3):
        out = step(sched)
        assert {"b0", "b1", "b2", "b3"} <= set(out.num_scheduled_tokens)
        assert "huge" not in out.num_scheduled_tokens
    assert sched.num_guard_realtime_steps == 0


def test_guard_lets_batch_move_after_eight_realtime_steps_in_a_row(
    make_sched: MakeSched,
) -> None:
    sched = make_sched(max_num_seqs=16, guard_chunk=32)
    fill(sched, batch_pool(2), steps=6)
    batch_steps = []
    for k in range(18):  # a new realtime prompt every step: every step wants to be alone
        sched.add_request(request(f"rt{k}", REALTIME, 30, arrival=10.0 + k, max_tokens=2))
        out = step(sched)
        batch_steps.append("b0" in out.num_scheduled_tokens)
    assert batch_steps == ([False] * vllm_guard.MAX_ALONE_STEPS + [True]) * 2


def test_guard_on_the_async_scheduler(make_sched: MakeSched) -> None:
    sched = guarded_mix(make_sched, PreemptiveAsyncScheduler)
    inflight: list[Any] = []
    outs = []
    for _ in range(3):
        out = sched.schedule()
        outs.append(out)
        inflight.append((out, output_for(sched, out)))
        if len(inflight) > 1:
            sched.update_from_output(*inflight.pop(0))
    assert outs[0].num_scheduled_tokens == {"rt": 30}
    assert outs[1].num_scheduled_tokens.get("b-new", 0) <= 32
    assert {"b0", "b1", "b2"} <= set(outs[1].num_scheduled_tokens)


def test_vllm_engine_turns_the_guard_on_by_default(make_sched: MakeSched) -> None:
    from worker.engine import VllmEngineConfig
    from worker.engine.vllm_engine import VllmEngine

    vllm_cfg = make_sched(Scheduler).vllm_config
    vllm_cfg.scheduler_config.scheduler_cls = None
    VllmEngine(VllmEngineConfig("unused", "m", kv_cache_gib=1))._plug_scheduler(vllm_cfg)
    assert vllm_cfg.additional_config[vllm_guard.CHUNK_KEY] == vllm_guard.CPU_CHUNK_TOKENS
    vllm_cfg = make_sched(Scheduler).vllm_config
    vllm_cfg.scheduler_config.scheduler_cls = None
    off = VllmEngineConfig("unused", "m", kv_cache_gib=1, guard_chunk_tokens=0)
    VllmEngine(off)._plug_scheduler(vllm_cfg)
    assert vllm_guard.CHUNK_KEY not in vllm_cfg.additional_config

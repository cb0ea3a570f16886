"""Layer 1 on vLLM's real scheduler: a waiting realtime request preempts running batch ones.

These drive vLLM's own `Scheduler` (and our subclasses) directly on the CPU, without a model:
a config.json for a tiny Llama is enough for `ModelConfig`, the KV cache is a bare
`KVCacheConfig`, and a fake model step samples one token per request. They pin the parts of
vLLM's private interface that `worker.engine.vllm_preempt` uses: if vLLM moves them, the module
import (and so this file) fails, or these assertions do. Only a missing vLLM skips them.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed")

import torch
from transformers import LlamaConfig
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.utils.import_utils import resolve_obj_by_qualname
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from worker.engine import vllm_guard, vllm_preempt
from worker.engine.vllm_preempt import (
    ASYNC_QUALNAME,
    GAP_KEY,
    SYNC_QUALNAME,
    PreemptiveAsyncScheduler,
    PreemptiveScheduler,
)

BLOCK = 16
MAX_LEN = 1024
BATCH, FLEX, REALTIME = 3, 2, 0  # Fairway's vLLM priorities (lower runs first)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # ModelConfig only reads config.json: no weights, no tokenizer, no network.
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=MAX_LEN,
    ).save_pretrained(path)
    init_none_hash(sha256)
    return path


MakeSched = Callable[..., Any]


@pytest.fixture
def make_sched(model_dir: Path) -> MakeSched:
    def make(
        cls: type = PreemptiveScheduler,
        max_num_seqs: int = 4,
        num_blocks: int = 400,
        gap: int | None = None,
        guard_chunk: int = 0,
    ) -> Any:
        sched_cfg = SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=2048,
            max_model_len=MAX_LEN,
            enable_chunked_prefill=True,
            policy="priority",
            is_encoder_decoder=False,
        )
        model_cfg = ModelConfig(
            model=str(model_dir),
            dtype="float32",
            seed=0,
            skip_tokenizer_init=True,
            max_model_len=MAX_LEN,
        )
        cache_cfg = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
        vllm_cfg = VllmConfig(
            scheduler_config=sched_cfg, model_config=model_cfg, cache_config=cache_cfg
        )
        if gap is not None:
            vllm_cfg.additional_config[GAP_KEY] = gap
        if guard_chunk:
            vllm_cfg.additional_config[vllm_guard.CHUNK_KEY] = guard_chunk
        spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32)
        kv_cfg = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
        )
        cache_cfg.num_gpu_blocks = num_blocks
        return cls(
            vllm_config=vllm_cfg,
            kv_cache_config=kv_cfg,
            structured_output_manager=StructuredOutputManager(vllm_cfg),
            block_size=BLOCK,
            log_stats=True,
        )

    return make


def request(rid: str, priority: int, n: int, arrival: float, max_tokens: int = 200) -> Request:
    seed = sum(map(ord, rid))
    return Request(
        request_id=rid,
        prompt_token_ids=[(seed * 131 + j * 7) % 997 + 1 for j in range(n)],
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        priority=priority,
        arrival_time=arrival,
        block_hasher=get_request_block_hasher(BLOCK, sha256),
    )


def output_for(sched: Any, out: Any) -> ModelRunnerOutput:
    """A fake forward pass: one token for each request whose context is now all computed."""
    ids = list(out.num_scheduled_tokens)
    sampled = [
        [5] if sched.requests[r].num_computed_tokens >= sched.requests[r].num_tokens else []
        for r in ids
    ]
    return ModelRunnerOutput(
        req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
    )


def step(sched: Any) -> Any:
    out = sched.schedule()
    sched.update_from_output(out, output_for(sched, out))
    return out


def fill(sched: Any, reqs: list[Request], steps: int = 3) -> None:
    for r in reqs:
        sched.add_request(r)
    for _ in range(steps):
        step(sched)
    assert {r.request_id for r in sched.running} == {r.request_id for r in reqs}


def batch_pool(n: int, prompt: int = 40) -> list[Request]:
    return [request(f"b{i}", BATCH, prompt, arrival=float(i)) for i in range(n)]


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
    from worker.engine.vllm_engine import VllmEngine

    vllm_cfg = make_sched(Scheduler).vllm_config  # CPU platform: async scheduling is off
    vllm_cfg.scheduler_config.scheduler_cls = None
    engine = VllmEngine("unused", "m", kv_cache_gib=1, preempt_priority_gap=2)
    assert engine._plug_scheduler(vllm_cfg) == SYNC_QUALNAME
    assert vllm_cfg.additional_config[GAP_KEY] == 2
    vllm_cfg.scheduler_config.scheduler_cls = None
    stock = VllmEngine("unused", "m", kv_cache_gib=1, preempt_for_priority=False)
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


def kv_full(make_sched: MakeSched, cls: type) -> Any:
    # 8 slots but 40 blocks (one is vLLM's null block): four 150-token batch requests hold
    # 10 blocks each, so KV, not slots, is what is full.
    sched = make_sched(cls, max_num_seqs=8, num_blocks=40)
    fill(sched, [*batch_pool(3, prompt=150), request("b3", BATCH, 120, arrival=3.0)])
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() < 4
    return sched


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


# ---- the realtime guard (worker.engine.vllm_guard) --------------------------------------------


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
    from worker.engine.vllm_engine import VllmEngine

    vllm_cfg = make_sched(Scheduler).vllm_config
    vllm_cfg.scheduler_config.scheduler_cls = None
    VllmEngine("unused", "m", kv_cache_gib=1)._plug_scheduler(vllm_cfg)
    assert vllm_cfg.additional_config[vllm_guard.CHUNK_KEY] == vllm_guard.CPU_CHUNK_TOKENS
    vllm_cfg = make_sched(Scheduler).vllm_config
    vllm_cfg.scheduler_config.scheduler_cls = None
    VllmEngine("unused", "m", kv_cache_gib=1, guard_chunk_tokens=0)._plug_scheduler(vllm_cfg)
    assert vllm_guard.CHUNK_KEY not in vllm_cfg.additional_config

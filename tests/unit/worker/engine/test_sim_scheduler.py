"""SimScheduler on its own, step by step: admission, the token budget, KV growth and
preemption (for KV and for priority), prefix caching, and when it hands a request to be
sampled."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from worker.engine.base import EngineRequest, SamplingSpec
from worker.engine.sim_sched import SimRequest, SimScheduler

BS = 4  # tokens a block
NEXT_TOKEN = 7


class Sampled:
    """The sampling callback: appends one token and records who sampled, in order."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def __call__(self, r: SimRequest) -> None:
        r.tokens.append(NEXT_TOKEN)
        self.order.append(r.req.request_id)


def scheduler(sample: Sampled, **overrides: Any) -> SimScheduler:
    args: dict[str, Any] = {
        "max_num_seqs": 8, "token_budget": 64, "block_size": BS, "kv_blocks": 32,
        "enable_prefix_caching": True, "preempt_for_priority": False,
        "preempt_priority_gap": 2} | overrides
    return SimScheduler(**args, sample=sample)


_arrivals = iter(range(10**6))


def request(rid: str, prompt: list[int], priority: int = 0) -> SimRequest:
    req = EngineRequest(rid, prompt, SamplingSpec(max_tokens=100), priority)
    return SimRequest(req=req, arrival=next(_arrivals), queue=asyncio.Queue(),
                      tokens=list(prompt), num_prompt=len(prompt))


def step(s: SimScheduler) -> dict[str, int]:
    """One whole step: plan, then apply. Returns request id -> tokens scheduled."""
    planned = s.schedule()
    s.apply(planned)
    return {r.req.request_id: n for r, n in planned}


def test_admits_in_priority_order_and_chunks_prefill_by_the_budget() -> None:
    sampled = Sampled()
    s = scheduler(sampled, token_budget=10)
    late, early = request("late", [1] * 8, priority=5), request("early", [2] * 8, priority=1)
    s.add(late)
    s.add(early)
    # The better priority is admitted first and takes 8; the other gets the 2 left.
    assert step(s) == {"early": 8, "late": 2}
    assert sampled.order == ["early"]  # late's prefill is not done: nothing to sample yet
    assert (early.num_computed, late.num_computed) == (8, 2)
    assert [r.req.request_id for r in s.running] == ["early", "late"]
    # Running requests come first: early decodes one, late's prefill takes the rest it needs.
    assert step(s) == {"early": 1, "late": 6}
    assert sampled.order == ["early", "early", "late"]
    assert s.is_decode(early, 1) and not s.is_decode(late, 6)


def test_a_waiting_head_that_does_not_fit_blocks_the_queue() -> None:
    s = scheduler(Sampled(), kv_blocks=4)
    s.add(request("big", [1] * 24, priority=0))  # 6 blocks: never fits in 4
    s.add(request("small", [2] * 4, priority=1))
    assert step(s) == {}
    assert s.running == [] and len(s.waiting) == 2 and s.pool.used == 0


def test_no_more_running_than_max_num_seqs() -> None:
    s = scheduler(Sampled(), max_num_seqs=2)
    for i in range(3):
        s.add(request(f"r{i}", [i + 1] * 4))
    assert set(step(s)) == {"r0", "r1"}
    assert len(s.running) == 2 and [w[2].req.request_id for w in s.waiting] == ["r2"]


def test_kv_pressure_preempts_the_worst_running_request_by_recompute() -> None:
    sampled = Sampled()
    s = scheduler(sampled, kv_blocks=4, enable_prefix_caching=False)
    a, b = request("a", [1] * 4, priority=0), request("b", [2] * 4, priority=3)
    s.add(a)
    s.add(b)
    step(s)  # both prefill a whole block and sample their first token
    assert s.pool.used == 2 and len(a.tokens) == len(b.tokens) == 5
    step(s)  # the decodes each take a second block: KV full
    assert s.pool.used == 4 and s.num_preemptions == 0
    a.tokens += [1] * 3  # a's context grows past its second block
    planned = step(s)
    # a needs a third block: b (worse priority) is preempted, its blocks freed, its output
    # kept, and it waits again from nothing computed; no admission in that step.
    assert planned == {"a": 4}
    assert s.num_preemptions == 1 and s.num_priority_preemptions == 0
    assert s.running == [a] and [w[2] for w in s.waiting] == [b]
    assert b.num_computed == 0 and b.blocks == [] and len(b.tokens) == 6
    assert s.pool.used == 3


def test_a_request_that_cannot_grow_even_alone_preempts_itself() -> None:
    s = scheduler(Sampled(), kv_blocks=2, enable_prefix_caching=False)
    a = request("a", [1] * 8)
    s.add(a)
    step(s)
    a.tokens += [1] * 4  # now needs 3 blocks of 2
    assert step(s) == {}
    assert s.num_preemptions == 1 and s.running == [] and s.pool.used == 0


@pytest.mark.parametrize("enabled", [True, False])
def test_a_better_waiting_request_preempts_by_the_gap(enabled: bool) -> None:
    s = scheduler(Sampled(), max_num_seqs=2, preempt_for_priority=enabled)
    batch = [request("b0", [1] * 4, priority=3), request("b1", [2] * 4, priority=4)]
    for r in batch:
        s.add(r)
    step(s)
    s.add(request("rt", [3] * 4, priority=0))
    planned = step(s)
    if enabled:  # the worst running one (b1) makes room, and rt runs in this very step
        assert planned == {"b0": 1, "rt": 4}
        assert s.num_priority_preemptions == 1 == s.num_preemptions
        assert [w[2].req.request_id for w in s.waiting] == ["b1"]
    else:
        assert "rt" not in planned and s.num_preemptions == 0


def test_within_the_gap_nobody_is_preempted() -> None:
    s = scheduler(Sampled(), max_num_seqs=1, preempt_for_priority=True, preempt_priority_gap=3)
    s.add(request("b", [1] * 4, priority=2))
    step(s)
    s.add(request("rt", [2] * 4, priority=0))
    assert step(s) == {"b": 1}
    assert s.num_preemptions == 0


def test_a_repeated_prompt_is_served_from_the_prefix_cache() -> None:
    s = scheduler(Sampled())
    prompt = list(range(1, 11))  # 10 tokens: 2 full blocks and 2 more
    first = request("first", prompt)
    s.add(first)
    step(s)
    s.remove(first)  # its full blocks stay cached, evictable
    assert s.pool.used == 0 and len(s.pool.evictable) == 2
    again = request("again", prompt)
    s.add(again)
    assert step(s) == {"again": 2}  # only what the cache did not hold
    assert again.num_cached == 8 and again.blocks[:2] == first.block_hashes[:2]


def test_without_prefix_caching_nothing_is_cached() -> None:
    s = scheduler(Sampled(), enable_prefix_caching=False)
    prompt = list(range(1, 11))
    first = request("first", prompt)
    s.add(first)
    step(s)
    s.remove(first)
    again = request("again", prompt)
    s.add(again)
    assert step(s) == {"again": 10} and again.num_cached == 0


def test_apply_skips_requests_finished_or_preempted_while_the_step_ran() -> None:
    sampled = Sampled()
    s = scheduler(sampled)
    a, b = request("a", [1] * 4), request("b", [2] * 4)
    s.add(a)
    s.add(b)
    planned = s.schedule()
    b.finished = True  # aborted during the "forward pass"
    s.remove(b)
    s.apply(planned)
    assert sampled.order == ["a"] and b.num_computed == 0


def test_remove_takes_a_waiting_request_out_and_frees_its_blocks() -> None:
    s = scheduler(Sampled(), max_num_seqs=1)
    a, b, c = request("a", [1] * 4), request("b", [2] * 4), request("c", [3] * 4)
    for r in (a, b, c):
        s.add(r)
    step(s)
    s.remove(b)
    assert [w[2] for w in s.waiting] == [c] and not s.idle
    s.remove(a)
    s.remove(c)
    assert s.idle and s.pool.used == 0

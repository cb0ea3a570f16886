"""The simulator's two preemption costs: recompute re-prefills prompt + generated (less a
prefix-cache hit fraction), swap pays a KV transfer each way; a profile that cannot offload
falls back to recompute and says why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.cost_model import DEFAULT_COST, CostModel
from scheduler.cost_profiles import profile
from scheduler.sim.engine_model import EngineModel
from scheduler.sim.report import summarize, table
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario
from scheduler.sim.seq import Seq

# One slot, so a realtime arrival must take it from the batch sequence.
COST = CostModel(0.01, 0.001, 0.0, 0.0001, max_slots=1, token_budget=100,
                 kv_capacity_tokens=10**6, swap_per_token_s=1e-5)


def _preempt_once(engine: EngineModel) -> tuple[Seq, float]:
    """Batch b (prompt 150, 20 tokens) prefills, decodes; 4.5 decode steps in (0.011 s each),
    realtime r takes its slot. Runs to idle; returns b and the time it finished."""
    b = Seq("b", "t", False, 0.0, 150, 20, 170)
    engine.add(b, 0.0)
    now, end = 0.0, engine.start(0.0)
    while end is not None and not b.decoding:  # two prefill steps
        engine.finish_step()
        now, end = end, engine.start(end)
    arrival = now + 0.0495
    engine.add(Seq("r", "t", True, arrival, 10, 2, 12), arrival)  # cuts the decode jump
    finished_at = 0.0
    end = engine.step_end
    while end is not None:
        if any(s.job_id == "b" for s in engine.finish_step().finished):
            finished_at = end
        end = engine.start(end)
    return b, finished_at


def test_cost_model_swap_is_per_token_and_absent_on_the_cpu_profile() -> None:
    assert COST.swap_s(1000) == pytest.approx(0.01)
    cpu = profile("cpu-smollm2-135m")
    assert not cpu.can_swap
    with pytest.raises(ValueError):
        cpu.swap_s(1)
    h200 = profile("h200-llama3-8b")
    assert h200.swap_per_token_s == pytest.approx(128 * 1024 / 64e9, rel=0.01)
    # On the GPU profile moving 4k tokens of KV out and back is far cheaper than prefilling it.
    assert 2 * h200.swap_s(4096) < h200.prefill_s(4096) / 4


def test_recompute_resume_pays_prompt_plus_generated_prefill() -> None:
    engine = EngineModel(COST)
    b, _ = _preempt_once(engine)
    kv = 150 + b.done_before
    assert b.done_before == 1 + 5  # the token the prefill sampled, then 5 decode steps
    assert engine.recomputed_tokens == kv and engine.swapped_tokens == 0
    assert b.total_output == 20


def test_recompute_prefix_hit_fraction_saves_part_of_the_prefill() -> None:
    engine = EngineModel(COST, prefix_hit_fraction=0.5)
    b, _ = _preempt_once(engine)
    kv = 150 + b.done_before
    assert engine.recomputed_tokens == kv - int(0.5 * kv)


def test_swap_pays_the_transfer_both_ways_and_no_prefill() -> None:
    recompute = EngineModel(COST)
    _, t_recompute = _preempt_once(recompute)
    engine = EngineModel(COST, preemption_mode="swap")
    b, t_swap = _preempt_once(engine)
    kv = 150 + b.done_before
    assert engine.mode == "swap" and engine.mode_fallback is None
    assert engine.recomputed_tokens == 0
    assert engine.swapped_tokens == 2 * kv  # out, then back in
    assert engine.swap_s == pytest.approx(2 * kv * 1e-5)
    assert b.total_output == 20
    # Re-prefilling kv tokens (2 steps of 0.01 + kv * 1e-4) costs more than moving them.
    assert t_swap < t_recompute


def test_swap_falls_back_to_recompute_where_the_profile_cannot_offload() -> None:
    engine = EngineModel(replace(COST, swap_per_token_s=None), preemption_mode="swap")
    assert engine.mode == "recompute" and engine.mode_fallback is not None
    b, _ = _preempt_once(engine)
    assert engine.recomputed_tokens == 150 + b.done_before and engine.swapped_tokens == 0


def _scenario(mode: str, profile_name: str) -> Scenario:
    """One worker, a batch flood and realtime arrivals: the policy takes batch back."""
    return Scenario.from_dict({
        "name": f"modes-{mode}", "duration_s": 30, "seed": 3, "model": "m",
        "workers": [{"count": 1, "profile": profile_name, "max_slots": 4}],
        "tenants": {"rt": 1, "b": 1},
        "traffic": [
            {"kind": "poisson", "tenant": "rt", "rate": 1.0, "prompt": 200, "max_tokens": 64,
             "slo_ttft_s": 1.0},
            {"kind": "batch", "tenant": "b", "count": 40, "window_s": 60, "prompt": 1000,
             "output": 300, "max_tokens": 300}],
        "preemption_mode": mode, "drain_s": 600, "policies": ["fairway"]})


def test_scenario_mode_shows_in_the_report() -> None:
    recompute = summarize(run_variant(_scenario("recompute", "h200-llama3-8b"), "fairway"), 1)
    swap = summarize(run_variant(_scenario("swap", "h200-llama3-8b"), "fairway"), 1)
    assert recompute["preemptions"] > 0 and swap["preemptions"] > 0
    assert recompute["work_lost_tokens"] > 0 and recompute["recomputed_tokens"] > 0
    assert recompute["swapped_tokens"] == 0
    # One worker: every victim resumes where its KV waits, so nothing is lost or recomputed.
    assert swap["preemption_mode_used"] == "swap"
    assert swap["work_lost_tokens"] == 0 and swap["recomputed_tokens"] == 0
    assert swap["swapped_tokens"] > 0 and swap["swap_s"] > 0
    assert "mode=swap" in table([swap])
    cpu = summarize(run_variant(_scenario("swap", "cpu-smollm2-135m"), "fairway"), 1)
    assert cpu["preemption_mode_used"] == "recompute" and cpu["preemption_fallbacks"]
    assert cpu["swapped_tokens"] == 0
    assert "mode=swap->recompute(fallback)" in table([cpu])


def test_scenario_rejects_an_unknown_mode() -> None:
    with pytest.raises(ValueError):
        _scenario("teleport", "h200-llama3-8b")
    assert DEFAULT_COST.can_swap

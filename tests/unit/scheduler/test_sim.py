"""The simulator: engine timing, abort, calibration, the CLI, and the headline comparisons
on small scenarios (seconds, not minutes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.cost_model import CostModel
from scheduler.sim.cli import main
from scheduler.sim.engine_model import EngineModel
from scheduler.sim.metrics import cumulative_service
from scheduler.sim.report import summarize
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario
from scheduler.sim.seq import Seq

SCENARIOS = Path(__file__).resolve().parents[3] / "bench" / "scenarios"
COST = CostModel(0.01, 0.001, 0.0, 0.0001, max_slots=4, token_budget=100, kv_capacity_tokens=10**6)


def seq(job_id: str, prompt: int = 150, target: int = 10, rt: bool = False) -> Seq:
    return Seq(job_id, "t", rt, 0.0, prompt, target, prompt + target)


def run_to_idle(engine: EngineModel, now: float = 0.0) -> tuple[float, list[str]]:
    finished: list[str] = []
    end = engine.start(now)
    while end is not None:
        finished += [s.job_id for s in engine.finish_step().finished]
        now, end = end, engine.start(end)
    return now, finished


def test_one_sequence_takes_prefill_chunks_then_decode_steps() -> None:
    engine = EngineModel(COST)
    engine.add(seq("a"), 0.0)
    end, finished = run_to_idle(engine)
    # two prefill steps (100 + 50 tokens, the last samples token 1), then 9 decode steps
    expected = 2 * 0.01 + 150 * 0.0001 + 9 * (0.01 + 0.001)
    assert finished == ["a"]
    assert end == pytest.approx(expected)


def test_abort_during_a_decode_jump_keeps_the_progress_so_far() -> None:
    engine = EngineModel(COST)
    engine.add(seq("a", prompt=50, target=1000), 0.0)
    end = engine.start(0.0)
    assert end is not None
    engine.finish_step()  # prefill + first token
    engine.start(end)
    _, restart = engine.abort("a", end + 0.05)  # ~4.5 decode steps in
    assert restart
    result = engine.finish_step()
    assert [s.job_id for s in result.aborted] == ["a"]
    assert result.aborted[0].generated == 1 + 5


def _prefill_step_with_decoding_batch(guard: bool) -> tuple[EngineModel, float]:
    engine = EngineModel(COST, realtime_guard=guard, guard_chunk_tokens=30)
    engine.add(seq("b0", prompt=50, target=100), 0.0)
    end = 0.0
    while not (engine.running and engine.running[0].decoding):
        # An engine starts guarded, so with the guard b0 prefills in 30-token chunks.
        step_end = engine.start(end)
        assert step_end is not None
        engine.finish_step()
        end = step_end
    engine.add(seq("b1", prompt=90, target=5), end)
    engine.add(seq("r", prompt=40, target=5, rt=True), end)
    return engine, end


def test_guard_gives_a_realtime_prefill_step_to_realtime_alone() -> None:
    engine, now = _prefill_step_with_decoding_batch(guard=True)
    end = engine.start(now)
    assert end == pytest.approx(now + 0.01 + 40 * 0.0001)  # no batch decode, no batch prefill
    result = engine.finish_step()
    assert [s.job_id for s in result.first_tokens] == ["r"]
    b0, b1 = (next(s for s in engine.running if s.job_id == j) for j in ("b0", "b1"))
    assert (b0.generated, b1.prefilled) == (1, 0)  # batch waited the step out
    # Next step: realtime is decoding, so batch is back, its prefill capped at the chunk.
    end2 = engine.start(end)
    assert end2 == pytest.approx(end + 0.01 + 2 * 0.001 + 30 * 0.0001)


def test_guard_shares_a_step_with_batch_after_eight_alone() -> None:
    from scheduler.engine_rules import MAX_ALONE_STEPS

    cost = CostModel(0.01, 0.001, 0.0, 0.0001, max_slots=64, token_budget=100)
    engine = EngineModel(cost, realtime_guard=True, guard_chunk_tokens=30)
    engine.add(seq("b", prompt=10, target=1000), 0.0)
    now = engine.start(0.0)
    assert now is not None
    engine.finish_step()
    moved = []
    for k in range(2 * (MAX_ALONE_STEPS + 1)):  # a realtime prompt arrives every step
        engine.add(seq(f"r{k}", prompt=20, target=1, rt=True), now)
        before = engine.running[0].generated
        end = engine.start(now)
        assert end is not None
        engine.finish_step()
        moved.append(engine.running[0].generated > before)
        now = end
    assert moved == ([False] * MAX_ALONE_STEPS + [True]) * 2


def test_without_the_guard_realtime_shares_its_prefill_step_with_batch() -> None:
    engine, now = _prefill_step_with_decoding_batch(guard=False)
    end = engine.start(now)
    assert end == pytest.approx(now + 0.01 + 0.001 + (40 + 59) * 0.0001)


def test_guard_chunk_applies_only_while_realtime_was_seen_recently() -> None:
    engine = EngineModel(COST, realtime_guard=True, guard_chunk_tokens=30, guard_hold_s=5.0)
    engine.add(seq("r", prompt=10, target=1, rt=True), 0.0)
    now, _ = run_to_idle(engine)
    engine.add(seq("b", prompt=90, target=1), now)
    end = engine.start(now)  # realtime seen just now: batch prefill capped
    assert end == pytest.approx(now + 0.01 + 30 * 0.0001)
    engine.finish_step()
    later = now + 10.0  # past the hold: the whole budget again
    end = engine.start(later)
    assert end == pytest.approx(later + 0.01 + 60 * 0.0001)


def test_guard_chunk_follows_the_profile() -> None:
    from scheduler.cost_profiles import profile

    assert profile("h200-llama3-8b").guard_chunk_tokens() == 480
    assert profile("cpu-smollm2-135m").guard_chunk_tokens() == 64


def test_engine_preempts_batch_for_waiting_realtime_only_when_allowed() -> None:
    for allowed in (True, False):
        engine = EngineModel(COST, preempt_for_realtime=allowed)
        for i in range(4):
            engine.add(seq(f"b{i}"), 0.0)
        engine.start(0.0)
        engine.finish_step()
        engine.add(seq("r", rt=True), 0.1)
        engine.start(0.1)
        assert any(s.job_id == "r" for s in engine.running) is allowed


def test_cpu_profile_reproduces_the_vllm_calibration() -> None:
    scenario = Scenario.load(SCENARIOS / "sched_calibrate_cpu.json")
    result = run_variant(scenario, "fcfs")
    s = summarize(result, 1000.0)["all"]
    out_tok_s = sum(r.output for r in result.metrics.records.values()) / result.end_s
    assert out_tok_s == pytest.approx(148, rel=0.1)
    assert s["ttft_p50"] == pytest.approx(4.0, rel=0.15)
    assert s["tpot_p50"] == pytest.approx(0.372, rel=0.15)


def test_fairway_keeps_realtime_fast_under_a_flood_where_vllm_priority_does_not() -> None:
    scenario = Scenario.load(SCENARIOS / "sched_rt_under_batch.json")
    scenario.duration_s = 200
    fairway = summarize(run_variant(scenario, "fairway"), 2.0)["class"]
    vllm = summarize(run_variant(scenario, "vllm-priority"), 2.0)["class"]
    assert fairway["realtime"]["ttft_p99"] < vllm["realtime"]["ttft_p99"] / 3
    assert fairway["batch"]["out_tok_s"] > 0.9 * vllm["batch"]["out_tok_s"]


def test_realtime_lane_brings_realtime_near_alone_at_a_batch_cost() -> None:
    scenario = Scenario.load(SCENARIOS / "sched_rt_under_batch.json")  # 600 s: ~1 s to run
    shared = summarize(run_variant(scenario, "fairway"), 2.0)["class"]
    scenario.fairway = {"rt_lane": True, "lane_min_workers": 1}
    lane = summarize(run_variant(scenario, "fairway"), 2.0)["class"]
    # With the realtime guard and earliest-start placement the shared pool is already close
    # (its p99 beats the lane's on some traffic draws); the lane's typical TTFT still wins.
    assert lane["realtime"]["ttft_p50"] < shared["realtime"]["ttft_p50"]
    # The trade-off, pinned: one of the two workers is realtime's, so batch gets about half.
    assert 0.4 < lane["batch"]["out_tok_s"] / shared["batch"]["out_tok_s"] < 0.7


def test_weighted_shares_follow_the_weights() -> None:
    scenario = Scenario.load(SCENARIOS / "sched_fairness.json")
    scenario.duration_s = 300
    result = run_variant(scenario, "fairway")
    s = summarize(result, 2.0)
    series = cumulative_service(result.metrics, result.end_s)
    first = int(60 / scenario.bin_s)  # after the start-up burst: everyone backlogged
    raw = {t: (series[t][-1] - series[t][first]) * w for t, w in scenario.tenants.items()}
    total, total_w = sum(raw.values()), sum(scenario.tenants.values())
    for tenant, weight in scenario.tenants.items():
        assert raw[tenant] / total == pytest.approx(weight / total_w, rel=0.05)
    assert s["max_charged_gap"] <= 2 * s["max_request_cost"]


def test_cli_runs_a_scenario_and_writes_plots(tmp_path: Path, capsys) -> None:
    data = json.loads((SCENARIOS / "sched_rt_under_batch.json").read_text())
    data["duration_s"] = 60
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    assert (
        main(
            [
                "run",
                str(path),
                "--policy",
                "fairway",
                "--policy",
                "fcfs",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    assert "fairway" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "rt-under-batch-service.png",
        "rt-under-batch-ttft-cdf.png",
        "summary.json",
    ]


def test_earliest_start_placement_cuts_the_realtime_tail_under_a_flood() -> None:
    """Realtime placed by the engines' step clocks (rt_start.py) against least loaded."""
    scenario = Scenario.load(SCENARIOS / "sched_rt_under_batch.json")
    timed = summarize(run_variant(scenario, "fairway"), 2.0)["class"]
    scenario.fairway = {"rt_earliest_start": False}
    blind = summarize(run_variant(scenario, "fairway"), 2.0)["class"]
    assert timed["realtime"]["ttft_p99"] < 0.9 * blind["realtime"]["ttft_p99"]
    assert timed["batch"]["out_tok_s"] > 0.97 * blind["batch"]["out_tok_s"]

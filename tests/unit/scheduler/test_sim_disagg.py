"""Prefill/decode disaggregation in the simulator (scheduler.sim.disagg, kv_transfer): the
transfer arithmetic, the roles of the two kinds of worker, and TTFT/TPOT known by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.sim.cli import main
from scheduler.sim.disagg import DisaggSimulation
from scheduler.sim.engine_model import EngineModel
from scheduler.sim.kv_transfer import LLAMA3_8B_KV_BYTES, Disaggregation, kv_bytes_per_token
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario
from scheduler.sim.seq import StepResult
from scheduler.sim.traffic import SimJob
from scheduler.types import JobClass

# A step costs 10 ms plus 0.1 ms per prefill token; decode adds nothing per sequence.
ENGINE = {"step_base_s": 0.01, "decode_per_seq_s": 0.0, "decode_per_ctx_token_s": 0.0,
          "prefill_per_token_s": 0.0001, "token_budget": 4096, "max_slots": 8,
          "kv_capacity_tokens": 100_000}
# 1000 B per token over 0.08 Gb/s (10 MB/s) = 0.1 ms per token, plus 50 ms per transfer.
SPLIT = {"prefill_workers": 1, "decode_workers": 1, "link_gbps": 0.08,
         "transfer_latency_ms": 50.0, "kv_bytes_per_token": 1000}


def job(n: int, at: float = 0.0, prompt: int = 1000, output: int = 5,
        max_tokens: int | None = None) -> SimJob:
    return SimJob(f"j{n}", "rt", JobClass.REALTIME, 1, "m", at, None, prompt,
                  max_tokens or output, output, ttft_slo_s=30.0)


def scenario(split: dict[str, Any] | None, workers: int = 2, **engine: Any) -> Scenario:
    data: dict[str, Any] = {
        "name": "tiny", "duration_s": 10.0, "drain_s": 60.0, "model": "m", "traffic": [],
        "schedule_delay_s": 0.0, "default_ttft_slo_s": 30.0,
        "workers": [{"count": workers, "profile": "h200-llama3-8b", "models": ["m"],
                     **ENGINE, **engine}],
    }
    if split is not None:
        data["disaggregation"] = split
    return Scenario.from_dict(data)


def test_kv_bytes_per_token_from_the_model_shape() -> None:
    assert kv_bytes_per_token(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2) == 131072
    assert LLAMA3_8B_KV_BYTES == 128 * 1024
    shaped = Disaggregation.from_dict({"prefill_workers": 1, "decode_workers": 1,
                                       "model_shape": {"layers": 2, "kv_heads": 4,
                                                       "head_dim": 64, "dtype_bytes": 1}})
    assert shaped.kv_bytes_per_token == 2 * 2 * 4 * 64


def test_transfer_time_is_latency_plus_bytes_over_the_link() -> None:
    split = Disaggregation(1, 1)  # defaults: 400 Gb/s, 1 ms, Llama-3-8B BF16
    assert split.link_bytes_per_s == 50e9
    assert split.wire_s(1000) == pytest.approx(1000 * 131072 / 50e9)  # 2.62 ms
    assert split.transfer_s(1000) == pytest.approx(0.001 + 1000 * 131072 / 50e9)
    assert split.transfer_s(0) == pytest.approx(0.001)
    tiny = Disaggregation.from_dict(SPLIT)
    assert tiny.transfer_s(1000) == pytest.approx(0.05 + 0.1)


@pytest.mark.parametrize("bad", [
    {"prefill_workers": 0, "decode_workers": 2},
    {"prefill_workers": 1, "decode_workers": 1, "link_gbps": 0},
    {"prefill_workers": 1, "decode_workers": 1, "transfer_latency_ms": -1},
    {"prefill_workers": 1, "decode_workers": 1, "bandwidth": 5},
    {"prefill_workers": 1},
])
def test_bad_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Disaggregation.from_dict(bad)


def test_the_split_must_cover_the_scenarios_workers() -> None:
    with pytest.raises(ValueError, match="3 workers"):
        scenario({**SPLIT, "decode_workers": 1}, workers=3)


@pytest.mark.parametrize("variant", ["fcfs", "fairway"])
def test_ttft_and_tpot_known_by_hand(variant: str) -> None:
    # Mixed: prefill 1000 tokens in one step (10 + 100 ms), then 4 decode steps of 10 ms.
    mixed = run_variant(scenario(None), variant, [job(0)]).metrics.records["j0"]
    assert mixed.ttft == pytest.approx(0.11)
    assert mixed.tpot == pytest.approx(0.01)
    # Split: the same prefill gives the first token; the KV moves in 50 + 100 ms; then the
    # same 4 decode steps: TPOT = (0.15 + 4 * 0.01) / 4.
    split = run_variant(scenario(SPLIT), variant, [job(0)]).metrics.records["j0"]
    assert split.ttft == pytest.approx(0.11)
    assert split.finished == pytest.approx(0.11 + 0.15 + 0.04)
    assert split.tpot == pytest.approx(0.19 / 4)
    assert split.output == 5


def test_a_one_token_request_ends_at_its_prefill_without_a_transfer() -> None:
    sim = DisaggSimulation(scenario(SPLIT), "fcfs", [job(0, output=1)])
    sim.run()
    record = sim.metrics.records["j0"]
    assert record.finished == pytest.approx(0.11) and record.output == 1
    assert sim.handoffs == {}


Steps = list[tuple[EngineModel, StepResult, dict[str, int]]]


def _watch(sim: DisaggSimulation) -> dict[str, Steps]:
    """Record every step of every engine, with each running sequence's output before it."""
    log: dict[str, Steps] = {"prefill": [], "decode": []}
    for role, engines in (("prefill", sim.engines), ("decode", sim.decoders)):
        for engine in engines.values():
            def finish(engine: EngineModel = engine, role: str = role,
                       original: Any = engine.finish_step) -> StepResult:
                before = {s.job_id: s.generated for s in engine.running}
                result = original()
                log[role].append((engine, result, before))
                return result
            engine.finish_step = finish  # type: ignore[method-assign]
    return log


def _traffic(n: int = 40) -> list[SimJob]:
    return [job(i, at=0.02 * i, prompt=200 + 97 * (i % 7), output=1 + 13 * (i % 5))
            for i in range(n)]


def test_prefill_workers_never_decode_and_decode_workers_never_prefill() -> None:
    sim = DisaggSimulation(scenario({**SPLIT, "prefill_workers": 2, "decode_workers": 2},
                                    workers=4), "fairway", _traffic())
    log = _watch(sim)
    sim.run()
    assert log["prefill"] and log["decode"]
    for _, result, _ in log["prefill"]:
        out = sum(o for _, _, o in result.served)
        assert out == len(result.first_tokens)  # the only token a prefill worker samples
    for _, result, _ in log["decode"]:
        assert all(tokens_in == 0 for _, tokens_in, _ in result.served)
        assert not result.first_tokens
    records = sim.metrics.records.values()
    assert all(r.finished is not None and r.output == r.job.output_tokens for r in records)


def test_a_decode_workers_first_token_comes_after_prefill_end_plus_transfer() -> None:
    sim = DisaggSimulation(scenario({**SPLIT, "prefill_workers": 2, "decode_workers": 2},
                                    workers=4), "fairway", _traffic())
    log = _watch(sim)
    sim.run()
    # The step (or jump of decode steps) in which a request's second token is made starts
    # once its KV is there, and that token comes at least one step later.
    began: dict[str, float] = {}
    for engine, result, before in log["decode"]:
        for seq in engine.running + result.finished:
            if seq.job_id in before and seq.generated > before[seq.job_id]:
                began.setdefault(seq.job_id, result.start)
    assert set(began) == set(sim.handoffs)
    for job_id, handoff in sim.handoffs.items():
        first = sim.metrics.records[job_id].first_token
        assert first is not None
        assert began[job_id] >= first + sim.split.transfer_s(handoff.tokens) - 1e-9


def test_decode_room_is_bounded_and_a_waiting_kv_holds_its_prefill_room() -> None:
    # One decode slot: the second request's KV waits on the prefill worker until the first
    # request's decode ends, and only then moves.
    sim = DisaggSimulation(scenario({**SPLIT, "decode_max_slots": 1}), "fcfs",
                           [job(0, output=20), job(1, output=20)])
    sim.run()
    first, second = sim.handoffs["j0"], sim.handoffs["j1"]
    done0 = sim.metrics.records["j0"].finished
    assert done0 is not None and second.start is not None
    assert second.start == pytest.approx(done0)
    assert second.start > second.ready
    # j0's prefill step starts as it is placed, j1's prefill takes the next step.
    assert sim.metrics.records["j1"].ttft == pytest.approx(2 * 0.11)
    assert first.dest == second.dest


def test_decode_kv_capacity_bounds_the_decode_batch() -> None:
    # Two decode workers of 1500 KV tokens: each request reserves 1000 + 300, so one each;
    # the third waits for the first to finish.
    sim = DisaggSimulation(scenario({**SPLIT, "prefill_workers": 1, "decode_workers": 2},
                                    workers=3, kv_capacity_tokens=1500),
                           "fcfs", [job(i, output=300) for i in range(3)])
    sim.run()
    h = sim.handoffs
    assert h["j0"].dest != h["j1"].dest
    finished = [sim.metrics.records[j].finished for j in ("j0", "j1")]
    assert h["j2"].start == pytest.approx(min(f for f in finished if f is not None))


def test_the_cli_runs_a_split_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "split.json"
    path.write_text(json.dumps({
        "name": "split", "duration_s": 5, "drain_s": 30, "model": "m", "policies": ["fairway"],
        "workers": [{"count": 3, "profile": "h200-llama3-8b", "models": ["m"]}],
        "traffic": [{"kind": "poisson", "tenant": "rt", "rate": 20, "prompt": 512,
                     "max_tokens": 64, "slo_ttft_s": 1.0}],
        "disaggregation": {"prefill_workers": 1, "decode_workers": 2}}))
    assert main(["run", str(path), "--json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert summary["all"]["n"] > 50 and summary["all"]["tpot_p50"] > 0

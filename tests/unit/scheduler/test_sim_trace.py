"""The simulator's ``trace`` traffic kind: the three trace formats, the window, rate scale,
caps and tenant/class mapping, and shared prefixes (``hash_ids``) in the engines' cache.
Fixture traces are written here; the public ones are never read by the tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.cost_model import CostModel
from scheduler.sim.engine_model import EngineModel
from scheduler.sim.report import summarize
from scheduler.sim.runner import run_variant
from scheduler.sim.scenario import Scenario
from scheduler.sim.seq import Seq
from scheduler.sim.trace import load_trace
from scheduler.sim.traffic import generate
from scheduler.types import JobClass

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:48.0000000,1200,7
2023-11-16 18:16:46.6805900,9000,3000
"""

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
0,ChatGPT,1087,0,1087,Conversation log
7,GPT-4,300,200,500,API log
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def mooncake(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    return write(tmp_path, "trace.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def test_azure_csv_is_read_sorted_from_zero_with_its_fractional_seconds(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "azure.csv", AZURE))
    assert [r.at for r in trace] == pytest.approx([0.0, 1.31941, 4.314579, 60.0])
    assert [(r.prompt_tokens, r.output_tokens) for r in trace] == [
        (374, 44), (1200, 7), (396, 109), (9000, 3000)
    ]


def test_burstgpt_keeps_failed_requests_with_one_token_and_its_model(tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "burst.csv", BURSTGPT))
    assert [(r.at, r.prompt_tokens, r.output_tokens, r.model) for r in trace] == [
        (0.0, 1087, 1, "ChatGPT"), (5.0, 472, 18, "ChatGPT"), (7.0, 300, 200, "GPT-4")
    ]


def test_jsonl_reads_hash_ids_in_milliseconds_by_default(tmp_path: Path) -> None:
    path = mooncake(tmp_path, [
        {"timestamp": 1500, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 500, "input_length": 10, "output_length": 3},
    ])
    trace = load_trace(path)
    assert [(r.at, r.hash_ids) for r in trace] == [(0.0, ()), (1.0, (1, 2))]
    assert [r.at for r in load_trace(path, time_unit="s")] == [0.0, 1000.0]


def test_the_path_may_name_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "azure.csv", AZURE)
    monkeypatch.setenv("FAIRWAY_TEST_TRACES", str(tmp_path))
    assert len(load_trace("$FAIRWAY_TEST_TRACES/azure.csv")) == 4


def test_a_bad_row_names_its_line_and_a_missing_file_its_path(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nx,1,2\n")
    with pytest.raises(ValueError, match=r"bad\.csv:2"):
        load_trace(bad)
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(ValueError, match="cannot tell"):
        load_trace(write(tmp_path, "other.csv", "a,b\n1,2\n"))


def jobs_of(spec: dict[str, Any], seed: int = 1, duration: float = 1e9) -> list[Any]:
    return generate([{"kind": "trace", **spec}], {}, duration, seed, "m")


def test_window_rate_scale_and_caps_shape_the_replay(tmp_path: Path) -> None:
    path = str(write(tmp_path, "azure.csv", AZURE))
    jobs = jobs_of({
        "path": path, "trace_window_s": [1.0, 100.0], "rate_scale": 2.0, "start": 10.0,
        "max_prompt": 2000, "max_output": 100, "tenant": "rt", "slo_ttft_s": 0.5,
    })
    # the window drops the first request; times are halved from the window's first one
    assert [j.arrival for j in jobs] == pytest.approx([10.0, 10 + 2.995169 / 2, 10 + 58.68059 / 2])
    assert [(j.prompt_tokens, j.output_tokens, j.max_tokens) for j in jobs] == [
        (1200, 7, 7), (396, 100, 100), (2000, 100, 100)
    ]
    assert all(j.job_class is JobClass.REALTIME and j.ttft_slo_s == 0.5 for j in jobs)
    # the scenario's end cuts the replay
    assert len(jobs_of({"path": path, "tenant": "rt", "start": 10.0}, duration=12.0)) == 2


def test_the_mix_maps_shares_deterministically_by_seed(tmp_path: Path) -> None:
    rows = [{"timestamp": i * 10, "input_length": 100, "output_length": 10} for i in range(2000)]
    spec = {
        "path": str(mooncake(tmp_path, rows)), "slo_ttft_s": 0.5,
        "mix": [
            {"share": 3, "tenants": ["a", "b"]},
            {"share": 1, "tenant": "c", "class": "batch", "window_s": 60.0, "priority": 7},
        ],
    }
    jobs = jobs_of(spec, seed=3)
    assert [(j.job_id, j.tenant) for j in jobs] == [(j.job_id, j.tenant) for j in jobs_of(spec, 3)]
    assert [j.tenant for j in jobs] != [j.tenant for j in jobs_of(spec, seed=4)]
    batch = [j for j in jobs if j.tenant == "c"]
    assert 0.2 < len(batch) / len(jobs) < 0.3
    assert all(j.job_class is JobClass.BATCH and j.priority == 7 for j in batch)
    assert all(j.deadline == pytest.approx(j.arrival + 60.0) for j in batch)
    realtime = [j for j in jobs if j.tenant != "c"]
    assert {j.tenant for j in realtime} == {"a", "b"}
    assert all(j.job_class is JobClass.REALTIME and j.ttft_slo_s == 0.5 for j in realtime)


def test_a_flood_cycles_the_window_at_its_start(tmp_path: Path) -> None:
    path = str(write(tmp_path, "azure.csv", AZURE))
    jobs = jobs_of({"path": path, "arrivals": "flood", "count": 10, "tenant": "b", "start": 5})
    assert len(jobs) == 10 and {j.arrival for j in jobs} == {5.0}
    assert all(j.job_class is JobClass.BATCH for j in jobs)
    assert sorted(j.prompt_tokens for j in jobs)[:3] == [374, 374, 374]


def test_hash_ids_give_the_policy_a_key_and_what_earlier_requests_share(tmp_path: Path) -> None:
    path = mooncake(tmp_path, [
        {"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 1, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 9]},
        {"timestamp": 2, "input_length": 600, "output_length": 5, "hash_ids": [4, 2]},
        {"timestamp": 3, "input_length": 300, "output_length": 5, "hash_ids": [1, 2, 3]},
    ])
    jobs = jobs_of({"path": str(path), "tenant": "t"})
    assert [j.prefix_key for j in jobs] == ["blk-1", "blk-1", "blk-4", "blk-1"]
    # shared leading blocks seen before x 512, at most prompt - 1; non-leading 2 not counted
    assert [j.prefix_tokens for j in jobs] == [0, 1024, 0, 299]
    assert jobs[3].hash_ids == (1,)  # blocks past the (capped) prompt dropped
    deeper = jobs_of({"path": str(path), "tenant": "t", "affinity_blocks": 2})
    assert [j.prefix_key for j in deeper] == ["blk-2", "blk-2", "blk-2", "blk-1"]


COST = CostModel(0.01, 0.001, 0.0, 0.0001, max_slots=8, token_budget=10_000,
                 kv_capacity_tokens=100_000)


def block_seq(job_id: str, prompt: int, hashes: tuple[int, ...]) -> Seq:
    return Seq(job_id, "t", False, 0.0, prompt, 2, prompt + 2, hash_ids=hashes, block_tokens=100)


def test_the_engine_reuses_only_the_leading_run_of_cached_blocks() -> None:
    engine = EngineModel(COST)
    engine.add(block_seq("a", 300, (1, 2, 3)), 0.0)
    engine.start(0.0)
    second = block_seq("b", 350, (1, 2, 7, 8))
    third = block_seq("c", 300, (5, 2, 3))
    fourth = block_seq("d", 150, (1, 2))
    for s in (second, third, fourth):
        engine.add(s, 0.0)
    engine.finish_step()
    engine.start(0.0)  # admits b, c, d
    assert (second.prefilled, third.prefilled, fourth.prefilled) == (200, 0, 149)
    assert engine.prefix_hit_tokens == 200 + 149


def test_the_block_cache_evicts_least_recent_blocks_past_its_room() -> None:
    engine = EngineModel(COST, prefix_cache_tokens=300)
    for name, hashes in (("a", (1, 2)), ("b", (3, 4)), ("c", (1, 9))):
        engine.add(block_seq(name, 200, hashes), 0.0)
        engine.start(0.0)
        engine.finish_step()
    # room for 3 blocks: b evicts 1, c brings 1 back and evicts 2 and 3; 4, 1, 9 remain
    late = block_seq("d", 200, (1, 2))
    engine.add(late, 0.0)
    engine.start(0.0)
    assert late.prefilled == 100


def test_shared_prefixes_in_a_trace_save_prefill_in_the_simulation(tmp_path: Path) -> None:
    def scenario(shared: bool) -> Scenario:
        rows = [
            {"timestamp": i * 50, "input_length": 4000, "output_length": 20,
             "hash_ids": [1, 2, 3, 4, 5, 6, 7, 100 + i] if shared else [100 * i + k
                                                                          for k in range(8)]}
            for i in range(200)
        ]
        path = write(tmp_path, f"t{shared}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        return Scenario.from_dict({
            "name": "prefix", "duration_s": 20, "model": "m", "default_ttft_slo_s": 0.5,
            "workers": [{"count": 2, "profile": "h200-llama3-8b", "models": ["m"]}],
            "traffic": [{"kind": "trace", "path": str(path), "tenant": "t"}],
        })

    hit = summarize(run_variant(scenario(True), "fairway"), 0.5)
    cold = summarize(run_variant(scenario(False), "fairway"), 0.5)
    assert cold["prefix_hit_tokens"] == 0
    # 7 of 8 blocks shared (3584 tokens): nearly all of it saved after each worker's first
    assert hit["prefix_hit_tokens"] > 0.9 * 198 * 3584
    assert hit["class"]["realtime"]["ttft_p50"] < cold["class"]["realtime"]["ttft_p50"]


def overloaded(tmp_path: Path, door: bool, gap_ms: int = 4, **options: Any) -> Scenario:
    rows = [{"timestamp": i * gap_ms, "input_length": 2000, "output_length": 200}
            for i in range(3000)]
    return Scenario.from_dict({
        "name": "door", "duration_s": 15, "drain_s": 5, "model": "m", "default_ttft_slo_s": 0.5,
        "door_admission": door, **options,
        "workers": [{"count": 1, "profile": "h200-llama3-8b", "models": ["m"]}],
        "traffic": [{"kind": "trace", "path": str(mooncake(tmp_path, rows)), "tenant": "t"}],
    })


def test_the_door_refuses_realtime_the_outlook_says_would_miss(tmp_path: Path) -> None:
    """250 requests/s of 2000-token prompts on one H200: far past what it sustains. Without
    the door the policy's own pass refuses them; with it they are refused before the policy
    sees them, on the published outlook."""
    records = {}
    for door in (False, True):
        result = run_variant(overloaded(tmp_path, door), "fairway")
        records[door] = list(result.metrics.records.values())

    def refused(door: bool, reason: str) -> list[Any]:
        return [r for r in records[door] if r.rejected == reason]

    assert not refused(False, "ttft_slo_door")
    assert len(refused(True, "ttft_slo_door")) > len(records[True]) / 2
    assert all(r.first_token is None for r in refused(True, "ttft_slo_door"))
    policy_refused = len(refused(False, "ttft_slo_unreachable"))
    assert len(refused(True, "ttft_slo_unreachable")) < policy_refused / 10


def test_policies_without_an_outlook_pass_the_door(tmp_path: Path) -> None:
    result = run_variant(overloaded(tmp_path, True), "fcfs")
    assert not any(r.rejected for r in result.metrics.records.values())


def test_queue_mode_admits_what_waits_within_its_budget(tmp_path: Path) -> None:
    """A load past what the pool sustains (25 requests/s of 2000-token prompts) with a plan
    that queues: far fewer refusals than shedding by the 0.5 s target, each one for its wait
    (never its target)."""
    def records(**options: Any) -> list[Any]:
        result = run_variant(overloaded(tmp_path, True, gap_ms=40, **options), "fairway")
        return list(result.metrics.records.values())

    shed = records()
    queued = records(door_mode="queue", max_queue_wait_s=5.0)
    refused = [r for r in queued if r.rejected]
    assert len(refused) < len([r for r in shed if r.rejected]) / 2
    assert {r.rejected for r in refused} <= {"ttft_slo_door", "queue_wait_exceeded",
                                             "queue_wait_expired", "deadline_unreachable"}
    served = [r.ttft for r in queued if r.ttft is not None]
    assert max(served) > 0.5  # the target is a goal now, not the admission's bar


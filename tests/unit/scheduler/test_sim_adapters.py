"""LoRA adapters in the simulator (scheduler/sim/adapters.py and the engine model): slots per
batch, the load and its LRU cache, Zipf popularity, and aware against blind placement."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from scheduler.cost_model import CostModel
from scheduler.sim.adapters import AdapterCache, LoraSettings, ZipfAdapters
from scheduler.sim.engine_model import EngineModel
from scheduler.sim.runner import Simulation, run_variant
from scheduler.sim.scenario import Scenario
from scheduler.sim.seq import Seq

COST = CostModel(0.01, 0.001, 0.0, 0.0001, max_slots=8, token_budget=1000,
                 kv_capacity_tokens=10**6)


def seq(job_id: str, adapter: str | None, prompt: int = 100, target: int = 10) -> Seq:
    return Seq(job_id, "t", False, 0.0, prompt, target, prompt + target, adapter=adapter)


def run(engine: EngineModel, now: float = 0.0) -> dict[str, float]:
    """Step the engine until idle: each job's first-token time. Checks the adapter slots
    at every step."""
    first: dict[str, float] = {}
    end = engine.start(now)
    while end is not None:
        running = {s.adapter for s in engine.running if s.adapter is not None}
        assert engine.adapters is None or len(running) <= engine.adapters.settings.max_loras
        result = engine.finish_step()
        first.update({s.job_id: result.end for s in result.first_tokens})
        end = engine.start(end)
    return first


def test_a_cold_adapter_holds_its_requests_for_the_load_only() -> None:
    engine = EngineModel(COST, lora=LoraSettings(max_loras=2, load_s=0.5))
    for job_id, adapter in (("a1", "a"), ("a2", "a"), ("base", None)):
        engine.add(seq(job_id, adapter), 0.0)
    first = run(engine)
    assert first["base"] < 0.1  # the base model's request does not wait for the load
    assert first["a1"] == pytest.approx(first["a2"])
    assert 0.5 <= first["a1"] < 0.6
    assert engine.adapters is not None and engine.adapters.loads == 1
    # Two runs of ~0.13 s of work; the wait for the load (~0.38 s) is idle time.
    assert engine.busy_s == pytest.approx(0.257, abs=0.01)


def test_at_most_max_loras_adapters_run_in_one_batch() -> None:
    engine = EngineModel(COST, lora=LoraSettings(max_loras=1, load_s=0.0))
    engine.add(seq("a", "x", target=50), 0.0)
    engine.add(seq("b", "y", target=5), 0.0)
    first = run(engine)  # run() asserts the slot bound at every step
    assert first["b"] > first["a"] + 49 * 0.011  # y waited for x's sequence to finish


def test_the_cache_evicts_the_least_recently_used_adapter() -> None:
    cache = AdapterCache(LoraSettings(max_loras=1, max_cpu_loras=2, load_s=0.1))
    now = 0.0
    for adapter in ("a", "b", "a", "c", "a", "b"):
        while not cache.admits(adapter, set(), now):
            now += 0.1
        now += 0.01
    assert cache.loads == 4  # a, b, c, then b again: c's load evicted b, not a
    assert cache.warm(now) == ("a", "b")


def test_zipf_popularity_is_deterministic_and_skewed() -> None:
    first, second = (ZipfAdapters({"count": 100}, random.Random(7)) for _ in range(2))
    assert [first.draw() for _ in range(50)] == [second.draw() for _ in range(50)]
    zipf = ZipfAdapters({"count": 100, "zipf_s": 1.1}, random.Random(1))
    counts = Counter(zipf.draw() for _ in range(5000))
    assert counts.most_common(1)[0][0] == "lora-0"
    # s = 1.1 over 100: the top adapter takes ~1/H(100, 1.1) ~ 23% of requests
    assert 0.18 < counts["lora-0"] / 5000 < 0.28
    assert counts["lora-0"] > counts["lora-1"] > counts["lora-9"]


def scenario(aware: bool, **extra: Any) -> Scenario:
    data: dict[str, Any] = {
        "name": "lora", "duration_s": 8, "drain_s": 10, "seed": 3, "model": "m",
        "workers": [{"count": 3, "profile": "h200-llama3-8b", "models": ["m"]}],
        "lora": {"max_loras": 4, "max_cpu_loras": 8, "load_s": 0.3},
        "fairway": {"adapter_aware": aware},
        "traffic": [{"kind": "poisson", "tenant": "a", "rate": 40, "prompt": 256,
                     "max_tokens": 64, "adapters": {"count": 50, "zipf_s": 1.1}}],
    }
    data.update(extra)
    return Scenario.from_dict(data)


def test_aware_placement_loads_fewer_adapters_than_blind() -> None:
    aware, blind = (run_variant(scenario(flag), "fairway") for flag in (True, False))
    for result in (aware, blind):
        records = result.metrics.records.values()
        assert all(r.finished is not None for r in records)
    assert aware.metrics.adapter_loads < 0.75 * blind.metrics.adapter_loads
    assert len(aware.metrics.records) == len(blind.metrics.records) > 250


def test_heartbeats_report_the_warm_adapters_and_slots() -> None:
    sim = Simulation(scenario(True), "fairway")
    sim.run()
    views = [sim._view(worker_id) for worker_id in sim.engines]
    assert all(v.max_loras == 4 and v.max_cpu_loras == 8 for v in views)
    assert all(0 < len(v.adapters) <= 8 for v in views)


def test_traffic_with_adapters_needs_lora_settings() -> None:
    with pytest.raises(ValueError, match="lora settings"):
        scenario(True, lora=None)
    with pytest.raises(ValueError, match="unknown lora keys"):
        scenario(True, lora={"slots": 4})

"""Adapter loads on an engine, without services: one load per cold adapter under a burst,
bounded and timed loads, least-recently-used residency, and the sim engine's adapters."""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from worker.engine.base import EngineRequest, SamplingSpec, UnsupportedParameter
from worker.engine.config import SimEngineConfig
from worker.engine.lora import (
    LOAD_SAMPLES,
    LOADS_KEPT,
    AdapterLoadFailed,
    AdapterLoads,
    LoraConfig,
    LoraSpec,
)
from worker.engine.sim import SimEngine


def in_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())
    return run


A = LoraSpec("lora-" + "a" * 32, "/nowhere/a", 8)
B = LoraSpec("lora-" + "b" * 32, "/nowhere/b", 8)
C = LoraSpec("lora-" + "c" * 32, "/nowhere/c", 8)


class Recorder:
    def __init__(self, delay_s: float = 0.05) -> None:
        self.delay_s = delay_s
        self.loaded: list[str] = []
        self.unloaded: list[str] = []
        self.concurrent = self.peak = 0

    async def load(self, spec: LoraSpec) -> None:
        self.concurrent += 1
        self.peak = max(self.peak, self.concurrent)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.concurrent -= 1
        self.loaded.append(spec.adapter_id)

    async def unload(self, spec: LoraSpec) -> None:
        self.unloaded.append(spec.adapter_id)


def loads_for(rec: Recorder, **config: float) -> AdapterLoads:
    seconds: list[float] = []
    loads = AdapterLoads(LoraConfig(**config),  # type: ignore[arg-type]
                         load=rec.load, unload=rec.unload, observe=seconds.append)
    loads.seconds = seconds  # type: ignore[attr-defined]
    return loads


@in_loop
async def test_a_burst_for_a_cold_adapter_loads_it_once() -> None:
    rec = Recorder()
    loads = loads_for(rec)
    await asyncio.gather(*(loads.ensure(A) for _ in range(20)))
    assert rec.loaded == [A.adapter_id] and loads.loads == 1
    assert len(loads.seconds) == 1 and loads.seconds[0] >= 0.04  # type: ignore[attr-defined]
    await loads.ensure(A)  # warm: no load
    assert loads.loads == 1


@in_loop
async def test_loads_are_bounded_and_timed() -> None:
    rec = Recorder(delay_s=0.05)
    loads = loads_for(rec, concurrent_loads=1)
    await asyncio.gather(loads.ensure(A), loads.ensure(B), loads.ensure(C))
    assert rec.peak == 1 and sorted(rec.loaded) == sorted(
        s.adapter_id for s in (A, B, C))
    slow = loads_for(Recorder(delay_s=1.0), load_timeout_s=0.05)
    with pytest.raises(AdapterLoadFailed, match=r"longer than 0\.05 s"):
        await slow.ensure(A)
    assert slow.resident() == []


@in_loop
async def test_least_recently_used_adapter_is_unloaded_past_capacity() -> None:
    rec = Recorder(delay_s=0)
    loads = loads_for(rec, max_loras=1, max_cpu_loras=2)
    await loads.ensure(A)
    await loads.ensure(B)
    await loads.ensure(A)  # A is now the most recent
    await loads.ensure(C)
    assert rec.unloaded == [B.adapter_id]
    assert loads.resident() == [A.adapter_id, C.adapter_id]


@in_loop
async def test_load_times_are_kept_per_adapter_evicted_ones_included() -> None:
    rec = Recorder(delay_s=0.02)
    loads = loads_for(rec, max_loras=1, max_cpu_loras=1)
    before = time.time()
    for spec in (A, B, A):  # each evicts the other: A is loaded twice
        await loads.ensure(spec)
    times = loads.load_times()
    assert list(times) == [B.adapter_id, A.adapter_id]  # the most recently loaded last
    assert [len(times[x.adapter_id]["seconds"]) for x in (A, B)] == [2, 1]  # type: ignore[arg-type]
    for entry in times.values():
        assert all(s >= 0.015 for s in entry["seconds"])  # type: ignore[attr-defined]
        assert before - 0.001 <= entry["at"] <= time.time() + 0.001  # type: ignore[operator]
    # The same loads the histogram observed, to the millisecond.
    assert sorted(round(s, 3) for s in loads.seconds) == sorted(  # type: ignore[attr-defined]
        s for e in times.values() for s in e["seconds"])  # type: ignore[attr-defined]


@in_loop
async def test_load_times_stay_small() -> None:
    loads = loads_for(Recorder(delay_s=0), max_loras=1, max_cpu_loras=1)
    for _ in range(LOAD_SAMPLES + 3):  # A and B evict each other: a load each time
        await loads.ensure(A)
        await loads.ensure(B)
    assert len(loads.load_times()[A.adapter_id]["seconds"]) == LOAD_SAMPLES  # type: ignore[arg-type]
    many = [LoraSpec(f"lora-{i:032x}", "/nowhere", 8) for i in range(LOADS_KEPT + 4)]
    for spec in many:
        await loads.ensure(spec)
    assert list(loads.load_times()) == [s.adapter_id for s in many[-LOADS_KEPT:]]


def test_int_ids_are_stable_and_positive() -> None:
    assert A.int_id == LoraSpec(A.adapter_id, "/elsewhere", 4).int_id > 0
    assert A.int_id != B.int_id


async def _text(engine: SimEngine, rid: str, lora: LoraSpec | None) -> str:
    request = EngineRequest(rid, [5, 6, 7, 8], SamplingSpec(max_tokens=12, ignore_eos=True),
                            lora=lora)
    return "".join([d.text async for d in engine.generate(request)])


@in_loop
async def test_sim_engine_adapters_change_the_output_and_load_once() -> None:
    engine = SimEngine(SimEngineConfig(speed=math.inf, lora=LoraConfig(sim_load_s=0.05)))
    await engine.start()
    try:
        base = await _text(engine, "base", None)
        with_a = await asyncio.gather(*(_text(engine, f"a{i}", A) for i in range(20)))
        assert len(set(with_a)) == 1 and with_a[0] != base
        assert await _text(engine, "b", B) not in (base, with_a[0])
        assert engine.adapter_loads is not None and engine.adapter_loads.loads == 2
    finally:
        await engine.shutdown()


@in_loop
async def test_sim_engine_without_lora_refuses_an_adapter() -> None:
    engine = SimEngine(SimEngineConfig(speed=math.inf))
    await engine.start()
    try:
        with pytest.raises(UnsupportedParameter, match="no LoRA adapters"):
            await _text(engine, "x", A)
    finally:
        await engine.shutdown()

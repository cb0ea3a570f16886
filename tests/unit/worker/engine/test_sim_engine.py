"""SimEngine behaves like an engine: batching, KV budget, priority, abort, determinism."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from worker.engine import (
    Engine,
    EngineRequest,
    PromptTooLong,
    SamplingSpec,
    SimEngine,
    SimEngineConfig,
    TokenDelta,
    build_engine,
)
from worker.engine.sim_tokenizer import WORD_BASE

T = TypeVar("T")
FAST: dict[str, Any] = {"speed": math.inf}  # no sleeping: steps only yield to the loop


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await asyncio.wait_for(coro, timeout=5)

    return asyncio.run(main())


def req(
    rid: str, prompt: list[int], max_tokens: int = 8, priority: int = 0, **sampling: Any
) -> EngineRequest:
    sampling.setdefault("ignore_eos", True)
    return EngineRequest(rid, prompt, SamplingSpec(max_tokens=max_tokens, **sampling), priority)


def prompt_of(engine: SimEngine, i: int, words: int = 20) -> list[int]:
    """A distinct prompt per i, one token per word, like ordinary English."""
    tok = engine.tokenizer
    vocab = [tok.id_text[WORD_BASE + k] for k in range(tok.num_output_words)]
    return engine.encode("".join(vocab[(i * 31 + j * 7) % len(vocab)] for j in range(words)))


async def collect(engine: SimEngine, request: EngineRequest) -> list[TokenDelta]:
    return [d async for d in engine.generate(request)]


def ids(deltas: list[TokenDelta]) -> list[int]:
    return [t for d in deltas for t in d.token_ids]


def text(deltas: list[TokenDelta]) -> str:
    return "".join(d.text for d in deltas)


def test_is_an_engine() -> None:
    engine = build_engine(SimEngineConfig(model_name="m"))
    assert isinstance(engine, SimEngine) and isinstance(engine, Engine)
    assert engine.model_name == "m"
    assert SimEngine().config == SimEngineConfig()
    with pytest.raises(TypeError):
        build_engine("sim")  # type: ignore[arg-type]


def test_continuous_batching_runs_requests_together() -> None:
    async def main() -> tuple[SimEngine, list[list[TokenDelta]]]:
        engine = SimEngine(SimEngineConfig(**FAST))
        await engine.start()
        reqs = [req(f"r{i}", prompt_of(engine, i), max_tokens=16) for i in range(32)]
        outs = await asyncio.gather(*(collect(engine, r) for r in reqs))
        await engine.shutdown()
        return engine, outs

    engine, outs = run(main())
    for deltas in outs:
        assert deltas[-1].finished and deltas[-1].finish_reason == "length"
        assert len(ids(deltas)) == 16
        assert all(not d.finished for d in deltas[:-1])
    # Sequentially this takes >= 32 * 16 steps; batched, one prefill step plus 15 decodes.
    assert engine.num_steps <= 20
    assert engine.peak_running == 32
    assert engine.stats().num_running == 0 and engine.stats().kv_usage == 0


def test_kv_budget_is_respected_and_requests_wait() -> None:
    async def main() -> tuple[SimEngine, list[list[TokenDelta]], list[Any]]:
        engine = SimEngine(SimEngineConfig(kv_capacity_tokens=256, max_model_len=128, **FAST))
        await engine.start()
        seen = []

        async def watch() -> None:
            while True:
                seen.append(engine.stats())
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        reqs = [req(f"r{i}", prompt_of(engine, i, 40), max_tokens=30) for i in range(8)]
        outs = await asyncio.gather(*(collect(engine, r) for r in reqs))
        watcher.cancel()
        await engine.shutdown()
        return engine, outs, seen

    engine, outs, seen = run(main())
    assert all(len(ids(d)) == 30 and d[-1].finish_reason == "length" for d in outs)
    assert engine.peak_kv_blocks <= 256 // 16
    assert all(s.kv_usage <= 1.0 and s.kv_capacity_tokens == 256 for s in seen)
    # A prompt takes 3 of the 16 blocks, so at most 5 of 8 are admitted; as they grow to 5
    # blocks each, KV runs out and the latest are preempted (recompute) back to waiting.
    assert any(s.num_waiting > 0 and s.kv_usage > 0.5 for s in seen)
    assert max(s.num_running for s in seen) <= 5
    assert engine.num_preemptions > 0

    # Preemption by recompute must not change what a request generates.
    async def alone() -> list[TokenDelta]:
        big = SimEngine(SimEngineConfig(**FAST))
        await big.start()
        return await collect(big, req("r3", prompt_of(big, 3, 40), max_tokens=30))

    assert ids(run(alone())) == ids(outs[3])


@pytest.mark.parametrize(
    ("preempt", "expected"),
    [
        # vLLM priority alone: "d" jumps the queue but waits for the running "a"
        # (vllm-project/vllm#40004).
        (False, ["a", "d", "b", "c"]),
        # Fairway's engine: "d" preempts "a" at once; "a" resumes before the worse "b", "c".
        (True, ["d", "a", "b", "c"]),
    ],
)
def test_waiting_request_with_better_priority_overtakes(preempt: bool, expected: list[str]) -> None:
    async def main() -> list[str]:
        engine = SimEngine(SimEngineConfig(
            max_num_seqs=1,
            step_base_s=0.001,
            per_prefill_token_s=0.0,
            preempt_for_priority=preempt,
        ))
        await engine.start()
        order: list[str] = []

        async def go(r: EngineRequest) -> None:
            await collect(engine, r)
            order.append(r.request_id)

        first = asyncio.create_task(go(req("a", prompt_of(engine, 0), max_tokens=10)))
        while engine.stats().num_running == 0:
            await asyncio.sleep(0.001)
        later = [asyncio.create_task(go(req(n, prompt_of(engine, 1)))) for n in ("b", "c")]
        await asyncio.sleep(0.005)
        assert engine.stats().num_waiting == 2
        urgent = asyncio.create_task(go(req("d", prompt_of(engine, 2), priority=-1)))
        await asyncio.gather(first, urgent, *later)
        await engine.shutdown()
        return order

    assert run(main()) == expected


def test_abort_frees_the_slot_at_once() -> None:
    async def main() -> None:
        engine = SimEngine(SimEngineConfig(max_num_seqs=1, step_base_s=0.001,
                                           per_prefill_token_s=0.0))
        await engine.start()
        long = asyncio.create_task(collect(engine, req("long", prompt_of(engine, 0), 10_000)))
        short = asyncio.create_task(collect(engine, req("short", prompt_of(engine, 1), 4)))
        while engine.stats().num_running == 0:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)
        assert engine.stats().num_waiting == 1
        await engine.abort("long")
        s = engine.stats()  # no step has run since: the abort itself freed everything
        assert (s.num_running, s.num_waiting, s.kv_usage) == (0, 1, 0.0)
        deltas = await long
        assert deltas[-1].finished and deltas[-1].finish_reason == "abort"
        assert (await short)[-1].finish_reason == "length"
        await engine.abort("long")  # unknown or finished ids are a no-op
        await engine.shutdown()

    run(main())


def test_consumer_going_away_aborts_the_request() -> None:
    async def main() -> None:
        engine = SimEngine(SimEngineConfig(**FAST))
        await engine.start()
        gen = engine.generate(req("r", prompt_of(engine, 0), max_tokens=1000))
        await gen.__anext__()
        assert engine.stats().num_running == 1
        await gen.aclose()  # type: ignore[attr-defined]
        assert engine.stats().num_running == 0 and engine.stats().kv_usage == 0
        await engine.shutdown()

    run(main())


def test_same_prompt_same_tokens_and_resume_continues_exactly() -> None:
    async def main() -> tuple[list[TokenDelta], ...]:
        e1, e2 = SimEngine(SimEngineConfig(**FAST)), SimEngine(SimEngineConfig(**FAST))
        await e1.start()
        await e2.start()
        p, q = prompt_of(e1, 7), prompt_of(e1, 8)
        a = await collect(e1, req("a", p, 12))
        b = await collect(e2, req("b", p, 12))
        c = await collect(e1, req("c", q, 12))
        # Resuming from prompt + the first 5 tokens continues like one uninterrupted run.
        d = await collect(e2, req("d", p + ids(a)[:5], 7))
        seeded = [await collect(e1, req(f"s{s}", p, 12, temperature=0.8, seed=s)) for s in (1, 2)]
        return a, b, c, d, *seeded

    a, b, c, d, s1, s2 = run(main())
    assert ids(a) == ids(b) and text(a) == text(b) and text(a)
    assert ids(a) != ids(c)
    assert ids(d) == ids(a)[5:]
    assert ids(s1) != ids(s2)


def test_finish_reasons_length_eos_and_stop() -> None:
    async def main() -> None:
        engine = SimEngine(SimEngineConfig(**FAST))
        await engine.start()
        p = prompt_of(engine, 3)
        full = await collect(engine, req("full", p, 40))
        assert full[-1].finish_reason == "length" and len(ids(full)) == 40
        assert text(full) == engine.decode(ids(full))

        words = text(full).split()
        stop = " " + words[len(words) // 2]
        cut = text(full).index(stop)
        stopped = await collect(engine, req("stop", p, 40, stop=[stop, "zzz-never"]))
        assert stopped[-1].finish_reason == "stop"
        assert text(stopped) == text(full)[:cut]
        assert ids(stopped) == ids(full)[: len(ids(stopped))]

        # The context window caps generation too, as in vLLM.
        capped = await collect(engine, req("cap", p, 10_000))
        assert capped[-1].finish_reason == "length"
        assert len(p) + len(ids(capped)) == engine.max_model_len

        with pytest.raises(PromptTooLong):
            await collect(engine, req("long", [5] * engine.max_model_len))
        await engine.shutdown()

        eos_engine = SimEngine(SimEngineConfig(eos_probability=1.0, **FAST))
        await eos_engine.start()
        eos = await collect(eos_engine, req("eos", p, 10, ignore_eos=False))
        assert eos[-1].finish_reason == "stop"
        assert ids(eos) == [eos_engine.tokenizer.eos_id] and text(eos) == ""
        ignored = await collect(eos_engine, req("ign", p, 10, ignore_eos=True))
        assert ignored[-1].finish_reason == "length" and len(ids(ignored)) == 10
        await eos_engine.shutdown()

    run(main())


def test_prefix_cache_serves_a_repeated_prompt() -> None:
    async def main() -> tuple[list[TokenDelta], list[TokenDelta]]:
        engine = SimEngine(SimEngineConfig(**FAST))
        await engine.start()
        p = prompt_of(engine, 4, 60)
        return await collect(engine, req("a", p, 4)), await collect(engine, req("b", p, 4))

    first, second = run(main())
    n = second[-1].num_prompt_tokens
    assert first[-1].num_cached_tokens == 0
    assert 0 < second[-1].num_cached_tokens < n and second[-1].num_cached_tokens % 16 == 0
    assert ids(first) == ids(second)


def test_step_time_cost_model() -> None:
    async def main() -> SimEngine:
        engine = SimEngine(SimEngineConfig(step_base_s=0.01, per_prefill_token_s=0.001,
                                           per_decode_seq_s=0.002))
        engine.speed = 1000.0  # 1000x faster than the modelled time
        await engine.start()
        await asyncio.gather(*(collect(engine, req(f"r{i}", [20] * 10, 3)) for i in range(2)))
        return engine

    engine = run(main())
    # One prefill step (20 tokens) and two decode steps (2 sequences each).
    assert engine.num_steps == 3
    assert engine.sim_time_s == pytest.approx(0.01 + 0.02 + 2 * (0.01 + 0.004))


def test_tokenizer_round_trip_and_chat_template() -> None:
    engine = SimEngine()
    s = "Hello, the model sees unicode: café ✓ and numbers 12345.\n"
    assert engine.decode(engine.encode(s)) == s
    assert engine.encode(s)[0] == engine.tokenizer.bos_id
    chat = engine.encode_chat([{"role": "user", "content": "What is the capital of France?"}])
    assert engine.tokenizer.decode(chat, skip_special_tokens=False).endswith(
        "<|im_start|>assistant\n"
    )
    assert len(chat) < len(engine.encode("What is the capital of France?")) + 12


# ---- a waiting, better request preempts running ones (the engine's own layer) ----------------

BATCH, FLEX, REALTIME = 3, 2, 0


async def first_token_step(engine: SimEngine, request: EngineRequest) -> tuple[int, list[int]]:
    """Submit `request`; return (engine steps until its first token, all its tokens)."""
    submitted = engine.num_steps
    gen = engine.generate(request)
    first = await gen.__anext__()
    steps = engine.num_steps - submitted
    rest = [d async for d in gen]
    return steps, ids([first, *rest])


def fill_then_send(
    rt: Callable[[SimEngine], EngineRequest],
    batch_priorities: list[int],
    kv_usage: float = 0.0,
    **engine_kwargs: Any,
) -> tuple[SimEngine, int, list[int], list[list[int]]]:
    """Fill the engine with long batch requests, then send `rt` once they all run (and hold
    at least `kv_usage` of the KV cache)."""

    async def main() -> tuple[SimEngine, int, list[int], list[list[int]]]:
        engine = SimEngine(SimEngineConfig(**FAST, **engine_kwargs))
        await engine.start()
        batch = [
            asyncio.create_task(
                collect(engine, req(f"b{i}", prompt_of(engine, i, 40), 200, priority=p))
            )
            for i, p in enumerate(batch_priorities)
        ]
        while (
            engine.stats().num_running < len(batch)
            or engine.num_steps < 5
            or engine.stats().kv_usage < kv_usage
        ):
            await asyncio.sleep(0)
        steps, rt_ids = await first_token_step(engine, rt(engine))
        outs = [ids(d) for d in await asyncio.gather(*batch)]
        await engine.shutdown()
        return engine, steps, rt_ids, outs

    return run(main())


def alone(request: EngineRequest) -> list[int]:
    async def main() -> list[int]:
        engine = SimEngine(SimEngineConfig(**FAST))
        await engine.start()
        return ids(await collect(engine, request))

    return run(main())


def realtime(engine: SimEngine, words: int = 30, priority: int = REALTIME) -> EngineRequest:
    return req("rt", prompt_of(engine, 99, words), 5, priority=priority)


def test_realtime_preempts_the_worst_batch_request_when_slots_are_full() -> None:
    engine, steps, rt_ids, outs = fill_then_send(
        realtime, [BATCH, BATCH, FLEX, BATCH], max_num_seqs=4
    )
    # The step in progress when it arrived, then the step that admits and prefills it.
    assert steps <= 2
    assert engine.num_priority_preemptions == 1 == engine.num_preemptions
    assert engine.stats().num_preemptions == 1
    # Recompute preemption: the victim's greedy output equals an uninterrupted run's.
    for i, out in enumerate(outs):
        assert out == alone(req(f"b{i}", prompt_of(engine, i, 40), 200))
    assert rt_ids == alone(realtime(engine))


def test_without_the_flag_realtime_waits_for_a_batch_request_to_finish() -> None:
    engine, steps, _, _ = fill_then_send(
        realtime, [BATCH] * 4, max_num_seqs=4, preempt_for_priority=False
    )
    assert steps > 150  # ~195 remaining batch decode steps before a slot frees
    assert engine.num_preemptions == 0


def test_realtime_preempts_when_kv_is_full() -> None:
    # 8 slots, but 4 batch requests of 40 + 200 tokens grow to hold 48 of the 64 blocks before
    # a ~300-token realtime prompt (19 blocks) arrives: KV, not slots, is what is short.
    kv: dict[str, Any] = {
        "max_num_seqs": 8,
        "kv_capacity_tokens": 1024,
        "max_model_len": 512,
        "kv_usage": 0.75,
    }
    engine, steps, _, outs = fill_then_send(lambda e: realtime(e, words=300), [BATCH] * 4, **kv)
    assert steps <= 2 and engine.num_priority_preemptions == 1
    for i, out in enumerate(outs):
        assert out == alone(req(f"b{i}", prompt_of(engine, i, 40), 200))

    engine, steps, _, _ = fill_then_send(
        lambda e: realtime(e, words=300), [BATCH] * 4, preempt_for_priority=False, **kv
    )
    assert steps > 2 and engine.num_priority_preemptions == 0


def test_equal_priority_or_within_the_gap_never_preempts() -> None:
    for priority, gap in ((BATCH, 1), (FLEX, 2)):
        engine, steps, _, _ = fill_then_send(
            lambda e, p=priority: realtime(e, priority=p),  # type: ignore[misc]
            [BATCH] * 4,
            max_num_seqs=4,
            preempt_priority_gap=gap,
        )
        assert steps > 150 and engine.num_priority_preemptions == 0
    with pytest.raises(ValueError):
        SimEngineConfig(preempt_priority_gap=0)


def test_cache_salts_keep_prefix_caches_apart() -> None:
    """Same prompt, same salt: a cache hit; another salt (another tenant): none."""
    async def main() -> list[int]:
        engine = SimEngine(SimEngineConfig(**FAST))
        await engine.start()
        p = prompt_of(engine, 4, 60)
        cached = []
        for rid, salt in (("a", "tenant-1"), ("b", "tenant-1"), ("c", "tenant-2"), ("d", None)):
            request = dataclasses.replace(req(rid, p, 4), cache_salt=salt)
            cached.append((await collect(engine, request))[-1].num_cached_tokens)
        return cached

    first, same, other, unsalted = run(main())
    assert first == 0 and same > 0
    assert other == 0 and unsalted == 0

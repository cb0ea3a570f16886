"""Layer 1 on the real engine: realtime TTFT while batch fills every slot, stock vs preemptive.

Three engine starts, one after the other, in one run (never two engines at once):

- "vLLM priority alone": vLLM's own scheduler with the priority policy. A waiting realtime
  request never preempts running batch (vllm-project/vllm#40004): it waits for a batch
  request to end.
- "Fairway, guard off": the same engine with `worker.engine.vllm_preempt.PreemptiveScheduler`
  (layer 1: waiting realtime preempts running batch) and the realtime guard off;
- "Fairway": the same with the realtime guard (`worker.engine.vllm_guard`): the realtime
  prefill step runs alone, batch prefill is capped per step (the platform's default chunk:
  64 tokens on CPU, 480 on a GPU);
- "Fairway, swap" (only with --kv-offload-gib > 0): "Fairway" plus vLLM's KV offloading
  connector, the worker's "swap" preemption mode (docs/preemption.md): a preempted batch
  request's KV is in CPU memory when it resumes. CUDA builds only; elsewhere the engine says
  so and the setup runs as "Fairway" (its `kv_connector` is then null in the JSON).

Each setup first measures realtime TTFT on the idle engine, then runs a few rounds: 8 long
batch requests (priority 3, ignore_eos, greedy) fill all 8 slots; once each has some tokens, one
realtime request (priority 0) arrives and its TTFT is taken; the round ends when the batch
does. Batch prompts are the same in both setups, and the stock setup never preempts them, so its
outputs are the uninterrupted greedy reference for the preempted ones.

    python bench/engine_preemption.py [--rounds 3] [--batch-tokens 256] [--out FILE]
        [--setups stock,noguard,guard] [--kv-offload-gib 0] [--model DIR]

Needs vLLM and the default model (worker.model_prep). Not a test: it prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # allow `python bench/engine_preemption.py` without installing
    sys.path.insert(0, str(ROOT))

from bench.harness import bench_model, on_cpu, raise_interrupt  # noqa: E402
from worker.engine import VllmEngineConfig  # noqa: E402
from worker.engine.base import EngineRequest, SamplingSpec  # noqa: E402
from worker.engine.vllm_engine import VllmEngine  # noqa: E402
from worker.engine.vllm_guard import default_chunk_tokens  # noqa: E402

BATCH_PRIORITY, REALTIME_PRIORITY = 3, 0
SLOTS = 8
TOPICS = [
    "a lighthouse",
    "a desert city",
    "a clockmaker",
    "a river barge",
    "an orchard",
    "a night train",
    "a mountain pass",
    "a tide pool",
    "a glass factory",
    "a beekeeper",
]
QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "How many legs does a spider have?",
    "What is two plus two?",
    "Which planet is closest to the sun?",
    "What language is spoken in Brazil?",
]


@dataclass
class Setup:
    name: str
    preempt: bool
    guard: int = 0  # realtime guard chunk tokens (worker.engine.vllm_guard); 0: off
    kv_offload_gib: float = 0.0  # the swap mode's CPU KV (GiB); 0: off
    kv_connector: str | None = None  # what the engine started with (None: no offloading)
    scheduler_cls: str | None = None
    start_s: float = 0.0
    idle_ttft_s: list[float] = field(default_factory=list)
    busy_ttft_s: list[float] = field(default_factory=list)
    batch_tok_s: list[float] = field(default_factory=list)  # per round, batch tokens / wall
    preemptions: int = 0
    batch_outputs: dict[str, list[int]] = field(default_factory=dict)
    realtime_outputs: dict[str, list[int]] = field(default_factory=dict)


def batch_request(engine: VllmEngine, rnd: int, i: int, max_tokens: int) -> EngineRequest:
    topic = TOPICS[(rnd * SLOTS + i) % len(TOPICS)]
    text = f"Write a long, detailed story (part {rnd}.{i}) about {topic}, chapter by chapter."
    prompt = engine.encode_chat([{"role": "user", "content": text}])
    spec = SamplingSpec(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    return EngineRequest(f"batch-{rnd}-{i}", prompt, spec, BATCH_PRIORITY)


def realtime_request(engine: VllmEngine, tag: str, k: int) -> EngineRequest:
    prompt = engine.encode_chat([{"role": "user", "content": QUESTIONS[k % len(QUESTIONS)]}])
    spec = SamplingSpec(max_tokens=16, temperature=0.0, ignore_eos=True)
    return EngineRequest(f"rt-{tag}-{k}", prompt, spec, REALTIME_PRIORITY)


async def timed(engine: VllmEngine, req: EngineRequest) -> tuple[float, list[int]]:
    """(TTFT seconds, all output token ids) of one request."""
    t0 = time.perf_counter()
    ttft = float("nan")
    out: list[int] = []
    async for delta in engine.generate(req):
        if delta.token_ids and not out:
            ttft = time.perf_counter() - t0
        out += delta.token_ids
    return ttft, out


async def run_batch(engine: VllmEngine, req: EngineRequest, progress: dict[str, int]) -> list[int]:
    out: list[int] = []
    async for delta in engine.generate(req):
        out += delta.token_ids
        progress[req.request_id] = len(out)
    return out


async def measure(setup: Setup, model: Path, rounds: int, batch_tokens: int) -> None:
    engine = VllmEngine(VllmEngineConfig(
        model_path=str(model),
        model_name="SmolLM2-135M-Instruct",
        kv_cache_gib=1,
        max_num_seqs=SLOTS,
        dtype="float32",
        preempt_for_priority=setup.preempt,
        guard_chunk_tokens=setup.guard,
        kv_offload_gib=setup.kv_offload_gib or None,
    ))
    await engine.start()
    setup.scheduler_cls, setup.start_s = engine.scheduler_cls, engine.start_seconds or 0.0
    setup.kv_connector = engine.kv_connector
    try:
        await timed(engine, realtime_request(engine, "warmup", 0))
        for k in range(rounds):
            ttft, out = await timed(engine, realtime_request(engine, "idle", k))
            setup.idle_ttft_s.append(ttft)
        for rnd in range(rounds):
            progress: dict[str, int] = {}
            reqs = [batch_request(engine, rnd, i, batch_tokens) for i in range(SLOTS)]
            t0 = time.perf_counter()
            tasks = [asyncio.create_task(run_batch(engine, r, progress)) for r in reqs]
            # Every slot busy and decoding: each batch request has streamed some tokens.
            while len(progress) < SLOTS or min(progress.values()) < 16:
                await asyncio.sleep(0.01)
            rt = realtime_request(engine, "busy", rnd)
            ttft, out = await timed(engine, rt)
            setup.busy_ttft_s.append(ttft)
            setup.realtime_outputs[rt.request_id] = out
            outs = await asyncio.gather(*tasks)
            wall = time.perf_counter() - t0
            setup.batch_tok_s.append(sum(map(len, outs)) / wall)
            setup.batch_outputs.update({r.request_id: o for r, o in zip(reqs, outs, strict=True)})
            print(
                f"  {setup.name} round {rnd}: realtime TTFT {ttft:.3f} s, "
                f"batch {setup.batch_tok_s[-1]:.0f} tok/s, "
                f"preemptions so far {engine.stats().num_preemptions}",
                flush=True,
            )
        setup.preemptions = engine.stats().num_preemptions
    finally:
        await engine.shutdown()


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def short(qualname: str | None) -> str:
    return qualname.rsplit(".", 1)[-1] if qualname else "vLLM Scheduler"


def report(stock: Setup, *others: Setup) -> dict[str, object]:
    """Columns: the stock engine, then each Fairway setup; outputs compared with stock's."""
    setups = (stock, *others)
    rows: list[tuple[str, ...]] = [
        ("scheduler", *(short(s.scheduler_cls) for s in setups)),
        ("realtime guard chunk", *("off" if not s.guard else str(s.guard) for s in setups)),
        ("engine start (s)", *(f"{s.start_s:.1f}" for s in setups)),
        ("idle realtime TTFT p50 (s)", *(f"{med(s.idle_ttft_s):.3f}" for s in setups)),
        ("busy realtime TTFT p50 (s)", *(f"{med(s.busy_ttft_s):.3f}" for s in setups)),
        ("busy realtime TTFT max (s)", *(f"{max(s.busy_ttft_s):.3f}" for s in setups)),
        (
            "busy / idle TTFT (p50s)",
            *(f"{med(s.busy_ttft_s) / med(s.idle_ttft_s):.2f}x" for s in setups),
        ),
        ("batch tok/s p50 (per round)", *(f"{med(s.batch_tok_s):.0f}" for s in setups)),
        ("engine preemptions", *(str(s.preemptions) for s in setups)),
        ("KV offload connector", *(s.kv_connector or "-" for s in setups)),
    ]
    width = max(len(r[0]) for r in rows)
    print("\n" + f"{'':<{width}}" + "".join(f"  {s.name[-24:]:>24}" for s in setups))
    for label, *cells in rows:
        print(f"{label:<{width}}" + "".join(f"  {c[-24:]:>24}" for c in cells))
    figures: dict[str, object] = {
        "stock": {k: v for k, v in asdict(stock).items() if not k.endswith("outputs")}
    }
    for setup in others:
        same = sum(setup.batch_outputs[k] == v for k, v in stock.batch_outputs.items())
        rt_same = sum(setup.realtime_outputs[k] == v for k, v in stock.realtime_outputs.items())
        speedup = med(stock.busy_ttft_s) / med(setup.busy_ttft_s)
        print(
            f"\n{setup.name}: busy TTFT p50 stock / this {speedup:.1f}x; batch outputs "
            f"identical to the uninterrupted (stock) run {same}/{len(stock.batch_outputs)}, "
            f"realtime {rt_same}/{len(stock.realtime_outputs)}"
        )
        for k, v in stock.batch_outputs.items():
            got = setup.batch_outputs[k]
            if got != v:
                at = next(
                    (i for i, (x, y) in enumerate(zip(v, got, strict=False)) if x != y),
                    min(len(v), len(got)),
                )
                print(f"  {k}: first differs at token {at} of {len(v)}")
        figures[setup.name] = {
            **{k: v for k, v in asdict(setup).items() if not k.endswith("outputs")},
            "busy_ttft_speedup": speedup,
            "batch_identical": [same, len(stock.batch_outputs)],
            "realtime_identical": [rt_same, len(stock.realtime_outputs)],
        }
    return figures


SETUP_KEYS = ("stock", "noguard", "guard", "swap")


def setups(keys: list[str], kv_offload_gib: float) -> list[Setup]:
    """The setups named (stock, the reference, always first), in SETUP_KEYS order."""
    unknown = set(keys) - set(SETUP_KEYS)
    if unknown:
        raise SystemExit(f"unknown setups {sorted(unknown)}; choose from {SETUP_KEYS}")
    if "swap" in keys and kv_offload_gib <= 0:
        raise SystemExit("the swap setup needs --kv-offload-gib > 0")
    guard = default_chunk_tokens(cuda_alike=not on_cpu())
    made = {
        "stock": Setup("vLLM priority alone", preempt=False),
        "noguard": Setup("Fairway, guard off", preempt=True),
        "guard": Setup("Fairway", preempt=True, guard=guard),
        "swap": Setup("Fairway, swap", preempt=True, guard=guard, kv_offload_gib=kv_offload_gib),
    }
    return [made[k] for k in SETUP_KEYS if k == "stock" or k in keys]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="realtime samples per setup")
    parser.add_argument("--batch-tokens", type=int, default=256)
    parser.add_argument("--out", help="also write the figures as JSON here")
    parser.add_argument("--setups", default="stock,noguard,guard",
                        help=f"comma-separated, of {','.join(SETUP_KEYS)} (stock always runs)")
    parser.add_argument("--kv-offload-gib", type=float, default=0.0,
                        help="CPU memory for the swap setup's KV offloading (GiB)")
    parser.add_argument("--model", default=None,
                        help="HF model folder (default: $FAIRWAY_MODEL_PATH, else the packaged "
                             "SmolLM2-135M-Instruct)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, raise_interrupt)  # shut the engine down on kill too
    chosen = setups(args.setups.split(","), args.kv_offload_gib)
    model = bench_model(args.model)
    for setup in chosen:  # sequentially: one engine at a time
        print(f"{setup.name}: starting the engine", flush=True)
        await measure(setup, model, args.rounds, args.batch_tokens)
    figures = report(*chosen)
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

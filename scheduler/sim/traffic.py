"""Traffic generators: Poisson and bursty (on/off) realtime per tenant, batch floods with a
completion window, heavy-tailed lengths, shared system prompts, and public traces replayed
(``"kind": "trace"``, scheduler.sim.trace_traffic). A generator's ``adapters``
(``{"count": N, "zipf_s": 1.1}``) gives each of its jobs a LoRA adapter of N, by Zipf
popularity (scheduler.sim.adapters); a ``prefix`` is then the adapter's own (cache salt).

Every generator is deterministic given its seed, so a scenario replays exactly.
"""

from __future__ import annotations

import math
import random
from typing import Any

from scheduler.sim.adapters import ZipfAdapters
from scheduler.sim.jobs import SimJob
from scheduler.sim.trace_traffic import trace_jobs
from scheduler.tiers import BATCH_TIER, DEFAULT_TIER
from scheduler.types import JobClass

__all__ = ["SimJob", "generate", "sample_length"]


def sample_length(spec: Any, rng: random.Random) -> int:
    """A length from ``{"dist": fixed|uniform|lognormal|pareto, ...}`` or a plain int."""
    if isinstance(spec, int | float):
        return max(1, int(spec))
    dist = spec.get("dist", "fixed")
    if dist == "fixed":
        value = float(spec["value"])
    elif dist == "uniform":
        value = rng.uniform(spec["min"], spec["max"])
    elif dist == "lognormal":  # heavy right tail, parameterized by its median
        value = rng.lognormvariate(math.log(spec["median"]), spec.get("sigma", 1.0))
    elif dist == "pareto":  # heavier still: alpha ~1.2-2 gives the long-prompt tail
        value = spec.get("scale", 1.0) * rng.paretovariate(spec.get("alpha", 1.5))
    else:
        raise ValueError(f"unknown length distribution {dist!r}")
    low, high = spec.get("min", 1), spec.get("max", 1 << 20)
    return int(min(max(value, low), high))


def _arrivals_poisson(rate: float, start: float, end: float, rng: random.Random) -> list[float]:
    times, t = [], start
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= end:
            break
        times.append(t)
    return times


def _arrivals_bursty(
    spec: dict[str, Any], start: float, end: float, rng: random.Random
) -> list[float]:
    """On/off modulated Poisson: exponential on and off periods with their own rates."""
    times: list[float] = []
    t, on = start, True
    while t < end:
        length = rng.expovariate(1.0 / spec["mean_on_s" if on else "mean_off_s"])
        rate = spec["rate_on" if on else "rate_off"]
        times += _arrivals_poisson(rate, t, min(end, t + length), rng)
        t += length
        on = not on
    return times


def _arrival_times(spec: dict[str, Any], duration: float, rng: random.Random) -> list[float]:
    start, end = float(spec.get("start", 0.0)), float(spec.get("end", duration))
    kind = spec["kind"]
    if kind == "poisson":
        return _arrivals_poisson(float(spec["rate"]), start, end, rng)
    if kind == "bursty":
        return _arrivals_bursty(spec, start, end, rng)
    if kind == "batch":  # a flood: count jobs submitted at once or spread over spread_s
        spread = float(spec.get("spread_s", 0.0))
        count = int(spec["count"])
        return sorted(start + (rng.uniform(0, spread) if spread else 0.0) for _ in range(count))
    raise ValueError(f"unknown traffic kind {kind!r}")


def generate(
    specs: list[dict[str, Any]], weights: dict[str, float], duration: float, seed: int, model: str
) -> list[SimJob]:
    jobs: list[SimJob] = []
    for index, spec in enumerate(specs):
        if spec["kind"] == "trace":  # a public trace's requests (scheduler.sim.trace_traffic)
            jobs += trace_jobs(spec, index, weights, duration, seed, model)
            continue
        rng = random.Random(f"{seed}:{index}")
        tenant = spec["tenant"]
        job_class = JobClass(spec.get("class", "batch" if spec["kind"] == "batch" else "realtime"))
        default_priority = BATCH_TIER if job_class is JobClass.BATCH else DEFAULT_TIER
        priority = int(spec.get("priority", default_priority))
        window = spec.get("window_s")
        prefix = spec.get("prefix")
        max_tokens = int(spec.get("max_tokens", 256))
        # Its own stream, so that adding adapters leaves the lengths and arrivals alone.
        adapters = (ZipfAdapters(spec["adapters"], random.Random(f"{seed}:{index}:adapters"))
                    if spec.get("adapters") else None)
        for n, at in enumerate(_arrival_times(spec, duration, rng)):
            prompt = sample_length(spec.get("prompt", 128), rng)
            output = min(max_tokens, sample_length(spec.get("output", max_tokens), rng))
            prefix_tokens = min(prompt, int(prefix["tokens"])) if prefix else 0
            adapter = adapters.draw() if adapters is not None else None
            prefix_key = prefix["key"] if prefix else None
            if prefix_key is not None and adapter is not None:
                prefix_key = f"{prefix_key}@{adapter}"
            jobs.append(
                SimJob(
                    job_id=f"{tenant}-{index}-{n}",
                    tenant=tenant,
                    job_class=job_class,
                    priority=priority,
                    model=spec.get("model", model),
                    arrival=at,
                    deadline=at + float(window) if window is not None else None,
                    prompt_tokens=prompt,
                    max_tokens=max_tokens,
                    output_tokens=max(1, output),
                    weight=weights.get(tenant, 1.0),
                    prefix_key=prefix_key,
                    prefix_tokens=prefix_tokens,
                    ttft_slo_s=spec.get("slo_ttft_s"),
                    tpot_slo_s=spec.get("slo_tpot_s"),
                    adapter=adapter,
                )
            )
    jobs.sort(key=lambda j: (j.arrival, j.job_id))
    return jobs

"""The ``trace`` traffic kind: a public trace's requests (``scheduler.sim.trace``) replayed as
simulator jobs, with a time window, a rate scale, length caps and a mapping of requests to
tenants, tiers and classes.

Spec keys (all optional but ``path``)::

    {"kind": "trace", "path": "$FAIRWAY_TRACE_DIR/azure_llm_2023_conv.csv",
     "format": "auto",              # azure | burstgpt | jsonl | auto
     "time_unit": null,             # for numeric timestamps: s | ms | us (format default)
     "trace_window_s": [0, 600],    # the part of the trace to use (trace seconds)
     "rate_scale": 2.0,             # arrival rate x2: trace time / 2 (time compressed)
     "start": 0, "end": null,       # where the window lands in simulated time (end: duration)
     "arrivals": "trace",           # or "flood": every request at ``start`` (+ spread_s),
     "count": null,                 #   cycling over the window up to ``count`` jobs
     "max_prompt": 8192, "max_output": 1024,   # length caps (clip)
     "max_tokens": null,            # what a request asks for; default its (capped) output
     "trace_models": ["ChatGPT"],   # keep only these models (BurstGPT's Model column)
     "block_tokens": 512,           # tokens per hash_ids block (Mooncake: 512)
     "affinity_blocks": 1,          # prefix_key = the block that many blocks in
     "mix": [{"share": 0.8, "tenant": "rt", "class": "realtime", "slo_ttft_s": 0.5},
             {"share": 0.2, "tenants": ["b1", "b2"], "class": "batch", "window_s": 3600}]}

Without ``mix``, every request goes to the spec's own ``tenant``/``class``/``priority``/
``window_s``/``slo_ttft_s``/``slo_tpot_s``; a mix entry inherits those it does not set. The
mapping draws one number per request from ``random.Random(f"{seed}:{index}")``, so a
scenario replays exactly and a different seed maps the same requests differently.

Shared prefixes (``hash_ids``): the engine model caches those blocks (LRU) and a request
reuses the longest run of leading blocks it holds. The policy sees ``prefix_key`` (the block
``affinity_blocks`` in, what a router hashing the prompt's head would route on) and
``prefix_tokens``, the leading blocks an earlier request of the trace already carried: what
a cache could save, known from the past only.
"""

from __future__ import annotations

import random
from typing import Any

from scheduler.sim.jobs import SimJob
from scheduler.sim.trace import TraceRequest, load_trace
from scheduler.tiers import BATCH_TIER, DEFAULT_TIER
from scheduler.types import JobClass

_ENTRY_KEYS = ("tenant", "class", "priority", "window_s", "slo_ttft_s", "slo_tpot_s", "model")


def trace_jobs(
    spec: dict[str, Any],
    index: int,
    weights: dict[str, float],
    duration: float,
    seed: int,
    model: str,
) -> list[SimJob]:
    requests = select(load_trace(spec["path"], spec.get("format", "auto"),
                                 spec.get("time_unit")), spec)
    flood = spec.get("arrivals", "trace") == "flood"
    start = float(spec.get("start", 0.0))
    end = float(spec.get("end", duration))
    scale = float(spec.get("rate_scale", 1.0))
    if scale <= 0:
        raise ValueError("rate_scale must be > 0")
    entries = _mix(spec)
    rng = random.Random(f"{seed}:{index}")
    block = int(spec.get("block_tokens", 512))
    depth = max(1, int(spec.get("affinity_blocks", 1)))
    max_prompt = int(spec.get("max_prompt", 1 << 30))
    max_output = int(spec.get("max_output", 1 << 30))
    ask = spec.get("max_tokens")
    seen: set[int] = set()  # blocks some earlier request carried
    jobs: list[SimJob] = []
    t0 = requests[0].at if requests else 0.0
    count = int(spec.get("count", len(requests))) if flood else len(requests)
    spread = float(spec.get("spread_s", 0.0))
    for n in range(count if requests else 0):
        req = requests[n % len(requests)]
        if flood:
            at = start + (rng.uniform(0, spread) if spread else 0.0)
        else:
            at = start + (req.at - t0) / scale
            if at >= end:
                break
        entry = _pick(entries, rng)
        tenant = entry["tenant"]
        if isinstance(tenant, list):
            tenant = rng.choice(tenant)
        job_class = JobClass(entry.get("class", "batch" if flood else "realtime"))
        default_priority = BATCH_TIER if job_class is JobClass.BATCH else DEFAULT_TIER
        prompt = min(req.prompt_tokens, max_prompt)
        output = min(req.output_tokens, max_output)
        max_tokens = output if ask is None else int(ask)
        output = min(output, max_tokens)
        hashes = req.hash_ids[: -(-prompt // block)] if req.hash_ids else ()
        shared = 0
        while shared < len(hashes) and hashes[shared] in seen:
            shared += 1
        seen.update(hashes)
        window = entry.get("window_s")
        jobs.append(SimJob(
            job_id=f"{tenant}-{index}-{n}",
            tenant=tenant,
            job_class=job_class,
            priority=int(entry.get("priority", default_priority)),
            model=entry.get("model", model),
            arrival=at,
            deadline=at + float(window) if window is not None else None,
            prompt_tokens=prompt,
            max_tokens=max_tokens,
            output_tokens=max(1, output),
            weight=weights.get(tenant, 1.0),
            prefix_key=f"blk-{hashes[min(depth, len(hashes)) - 1]}" if hashes else None,
            prefix_tokens=max(0, min(shared * block, prompt - 1)),
            ttft_slo_s=entry.get("slo_ttft_s"),
            tpot_slo_s=entry.get("slo_tpot_s"),
            hash_ids=hashes,
            block_tokens=block if hashes else 0,
        ))
    return jobs


def select(requests: tuple[TraceRequest, ...], spec: dict[str, Any]) -> list[TraceRequest]:
    """The requests inside ``trace_window_s`` (trace seconds) of the wanted models."""
    lo, hi = spec.get("trace_window_s", (0.0, float("inf")))
    models = spec.get("trace_models")
    return [
        r for r in requests
        if lo <= r.at < hi and (models is None or r.model in models)
    ]


def _mix(spec: dict[str, Any]) -> list[tuple[float, dict[str, Any]]]:
    """(cumulative share, entry) with the spec's own keys as each entry's defaults."""
    base = {k: spec[k] for k in _ENTRY_KEYS if k in spec}
    raw = spec.get("mix") or [{"share": 1.0}]
    total = sum(float(e.get("share", 1.0)) for e in raw)
    if total <= 0:
        raise ValueError("trace mix shares must add up to more than 0")
    out, acc = [], 0.0
    for e in raw:
        entry = {**base, **{k: v for k, v in e.items() if k != "share"}}
        if "tenant" not in entry and "tenants" not in entry:
            raise ValueError("a trace mix entry needs a tenant (or tenants)")
        if "tenants" in entry:
            entry["tenant"] = list(entry.pop("tenants"))
        acc += float(e.get("share", 1.0)) / total
        out.append((acc, entry))
    return out


def _pick(entries: list[tuple[float, dict[str, Any]]], rng: random.Random) -> dict[str, Any]:
    u = rng.random()
    for cumulative, entry in entries:
        if u < cumulative:
            return entry
    return entries[-1][1]

"""The trace mapped to what the replay sends: realtime requests (tenant, service tier, TTFT
target) and batch files (a tenant's batch lines grouped by submission time). Pure: the trace
file is read by the simulator's reader (`scheduler.sim.trace`), nothing here does I/O.

A mix entry (JSON), as the simulator's ``mix`` but with the API's words::

    {"share": 0.5, "tenant": "rt-a", "tier": "premium", "service_tier": "priority"}
    {"share": 0.2, "tenant": "bulk", "tier": "standard", "batch": true}

``tier`` is the tenant's plan, named as the admin API names it (its TTFT SLO, unless
``slo_ttft_s`` says otherwise);
``service_tier`` the request's (priority, default or flex); ``batch`` sends the entry's
requests as lines of batch files. One number per request from
``random.Random(f"{seed}:{index}")``: a replay maps the same requests the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from scheduler.sim.trace import TraceRequest
from scheduler.tiers import BATCH_LINE, tier_rule

DEFAULT_MIX: tuple[dict[str, Any], ...] = (
    {"share": 0.3, "tenant": "replay-premium", "tier": "premium", "service_tier": "priority"},
    {"share": 0.3, "tenant": "replay-standard", "tier": "standard", "service_tier": "default"},
    {"share": 0.4, "tenant": "replay-batch", "tier": "standard", "batch": True},
)
_KEYS = {"share", "tenant", "tier", "service_tier", "batch", "slo_ttft_s"}


@dataclass(frozen=True, slots=True)
class Entry:
    tenant: str
    tenant_plan: str = "standard"  # the mix's "tier" (``Plan``, here, is the whole replay)
    service_tier: str = "default"
    batch: bool = False
    slo_ttft_s: float | None = None  # None: the tenant plan's target

    @property
    def priority(self) -> int:
        """What bare vLLM gets (lower runs first): the service tier's priority, batch lines last."""
        return BATCH_LINE.priority if self.batch else tier_rule(self.service_tier).priority


@dataclass(frozen=True, slots=True)
class Request:
    index: int  # in the trace window
    at: float  # seconds from the replay's start
    entry: Entry
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class BatchFile:
    tenant: str
    at: float  # submitted at its first line's time
    lines: tuple[Request, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    realtime: tuple[Request, ...]
    batches: tuple[BatchFile, ...]
    duration_s: float  # the replayed span (arrivals fall in [0, duration_s))


def parse_mix(raw: list[dict[str, Any]]) -> list[tuple[float, Entry]]:
    """(cumulative share, entry); a clear ValueError for a bad entry."""
    if not raw:
        raise ValueError("the mix is empty")
    out: list[tuple[float, Entry]] = []
    total = sum(float(e.get("share", 1.0)) for e in raw)
    if total <= 0:
        raise ValueError("mix shares must add up to more than 0")
    acc = 0.0
    for e in raw:
        unknown = set(e) - _KEYS
        if unknown:
            raise ValueError(f"unknown mix key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
        if not e.get("tenant"):
            raise ValueError("a mix entry needs a tenant")
        entry = Entry(str(e["tenant"]), str(e.get("tier", "standard")),
                      str(e.get("service_tier", "default")), bool(e.get("batch", False)),
                      None if e.get("slo_ttft_s") is None else float(e["slo_ttft_s"]))
        tier_rule(entry.service_tier)  # ValueError for an unknown one
        acc += float(e.get("share", 1.0)) / total
        out.append((acc, entry))
    return out


def build_plan(requests: list[TraceRequest] | tuple[TraceRequest, ...], mix: list[dict[str, Any]],
               *, window: tuple[float, float] = (0.0, float("inf")), rate_scale: float = 1.0,
               max_prompt: int = 256, max_output: int = 64, batch_every_s: float = 30.0,
               seed: int = 0) -> Plan:
    """The requests of ``window`` (trace seconds), times divided by ``rate_scale`` and shifted
    to start at 0, lengths clipped, each mapped to a mix entry. A batch tenant's lines are cut
    into files every ``batch_every_s`` seconds of replay time."""
    if rate_scale <= 0:
        raise ValueError("rate scale must be > 0")
    if batch_every_s <= 0:
        raise ValueError("batch interval must be > 0")
    entries = parse_mix(mix)
    lo, hi = window
    chosen = [r for r in requests if lo <= r.at < hi]
    realtime: list[Request] = []
    files: dict[tuple[str, int], list[Request]] = {}
    for n, r in enumerate(chosen):
        u = random.Random(f"{seed}:{n}").random()
        entry = next((e for cum, e in entries if u < cum), entries[-1][1])
        req = Request(n, (r.at - lo) / rate_scale, entry, min(r.prompt_tokens, max_prompt),
                      min(r.output_tokens, max_output))
        if entry.batch:
            files.setdefault((entry.tenant, int(req.at // batch_every_s)), []).append(req)
        else:
            realtime.append(req)
    batches = tuple(sorted((BatchFile(t, lines[0].at, tuple(lines))
                            for (t, _), lines in files.items()), key=lambda b: b.at))
    if hi == float("inf"):
        end = (chosen[-1].at - lo) / rate_scale if chosen else 0.0
    else:
        end = (hi - lo) / rate_scale
    return Plan(tuple(realtime), batches, end)


_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while",
          "seven", "bright", "stars", "shine", "above", "quiet", "green", "hills", "near",
          "an", "old", "river", "town")


def prompt_text(index: int, tokens: int) -> str:
    """About ``tokens`` tokens of text (one short common word is about one token), opening
    with the request's index so no two prompts share a cached prefix."""
    words = [f"{index}:"] + [_WORDS[(index + i) % len(_WORDS)] for i in range(max(0, tokens - 2))]
    return " ".join(words)

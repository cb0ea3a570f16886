"""The replay's figures from its outcomes (pure arithmetic) and the tables that print them.

Per realtime group (tenant, tenant plan, service tier): TTFT and TPOT p50/p99 of the requests
that finished; SLO attainment = requests whose first token came within the plan's TTFT target,
of all sent (a refusal, an error or a request unfinished when the run stopped is a miss);
goodput = those requests per second of the replayed span. Per batch tenant: lines done of
lines sent, output tokens per second of wall time (from the first file's submission to the
last one's end), and the median time a file took to finish."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.cli.replay.load import BatchOutcome, Outcomes, RealtimeOutcome


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def tpot(o: RealtimeOutcome) -> float | None:
    """Seconds per output token after the first; None with fewer than two tokens."""
    if o.status != "ok" or o.ttft_s is None or o.e2e_s is None or o.output_tokens < 2:
        return None
    return (o.e2e_s - o.ttft_s) / (o.output_tokens - 1)


def met_slo(o: RealtimeOutcome, slo_s: float) -> bool:
    return o.status == "ok" and o.ttft_s is not None and o.ttft_s <= slo_s


@dataclass(frozen=True)
class RealtimeRow:
    group: str
    sent: int
    ok: int
    refused: int
    ttft_p50: float
    ttft_p99: float
    tpot_p50: float
    tpot_p99: float
    slo_s: float
    attainment: float  # of all sent
    goodput: float  # requests/s meeting the SLO


@dataclass(frozen=True)
class BatchRow:
    tenant: str
    files: int
    files_done: int
    lines: int
    lines_done: int
    output_tokens: int
    tokens_per_s: float
    completion_p50_s: float


def slo_of(o: RealtimeOutcome, plan_slo_s: Mapping[str, float]) -> float:
    e = o.request.entry
    if e.slo_ttft_s is not None:
        return e.slo_ttft_s
    if e.tenant_plan not in plan_slo_s:
        raise ValueError(f"no TTFT target for plan {e.tenant_plan!r}; "
                         f"known: {sorted(plan_slo_s)}")
    return plan_slo_s[e.tenant_plan]


def realtime_row(group: str, outs: Sequence[RealtimeOutcome], slo_s: float,
                 duration_s: float) -> RealtimeRow:
    ok = [o for o in outs if o.status == "ok"]
    ttfts = [o.ttft_s for o in ok if o.ttft_s is not None]
    tpots = [t for t in (tpot(o) for o in ok) if t is not None]
    met = sum(met_slo(o, slo_s) for o in outs)
    return RealtimeRow(
        group, len(outs), len(ok), sum(o.status == "refused" for o in outs),
        percentile(ttfts, 50), percentile(ttfts, 99), percentile(tpots, 50),
        percentile(tpots, 99), slo_s, met / len(outs) if outs else math.nan,
        met / duration_s if duration_s > 0 else math.nan)


def realtime_rows(out: Outcomes, plan_slo_s: Mapping[str, float]) -> list[RealtimeRow]:
    """One row per (tenant, plan, service tier), then "all" (each request against its own
    target)."""
    groups: dict[str, list[RealtimeOutcome]] = {}
    for o in out.realtime:
        e = o.request.entry
        groups.setdefault(f"{e.tenant} ({e.tenant_plan}, {e.service_tier})", []).append(o)
    rows = [realtime_row(g, os_, slo_of(os_[0], plan_slo_s), out.duration_s)
            for g, os_ in sorted(groups.items())]
    if len(groups) > 1:
        met = sum(met_slo(o, slo_of(o, plan_slo_s)) for o in out.realtime)
        whole = realtime_row("all realtime", out.realtime, math.nan, out.duration_s)
        n = len(out.realtime)
        rows.append(RealtimeRow(**{**whole.__dict__, "attainment": met / n,
                                   "goodput": met / out.duration_s if out.duration_s else
                                   math.nan}))
    return rows


def batch_rows(out: Outcomes) -> list[BatchRow]:
    groups: dict[str, list[BatchOutcome]] = {}
    for b in out.batches:
        groups.setdefault(b.file.tenant, []).append(b)
    rows = []
    for tenant, bs in sorted(groups.items()):
        start = min(b.file.at for b in bs)
        ends = [b.done_s for b in bs if b.done_s is not None]
        end = max(ends) if len(ends) == len(bs) else out.wall_s
        tokens = sum(b.output_tokens for b in bs)
        done = [b for b in bs if b.status == "completed"]
        rows.append(BatchRow(
            tenant, len(bs), len(done), sum(len(b.file.lines) for b in bs),
            sum(b.lines_done for b in bs), tokens,
            tokens / (end - start) if end > start else math.nan,
            percentile([b.done_s - b.file.at for b in done if b.done_s is not None], 50)))
    return rows


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 1000:.0f}"


def _pc(x: float) -> str:
    return "-" if math.isnan(x) else f"{x * 100:.1f}%"


def markdown(results: Sequence[tuple[str, Outcomes]], plan_slo_s: Mapping[str, float]
             ) -> str:
    """The side-by-side tables (one row per group and target), as Markdown."""
    lines = ["| group | target | sent | ok | refused | TTFT p50 ms | TTFT p99 ms | "
             "TPOT p50 ms | TPOT p99 ms | SLO ms | attainment | goodput req/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    per = [(name, realtime_rows(o, plan_slo_s)) for name, o in results]
    groups = list(dict.fromkeys(r.group for _, rows in per for r in rows))
    for g in groups:
        for name, rows in per:
            for r in (r for r in rows if r.group == g):
                lines.append(
                    f"| {g} | {name} | {r.sent} | {r.ok} | {r.refused} | {_ms(r.ttft_p50)} | "
                    f"{_ms(r.ttft_p99)} | {_ms(r.tpot_p50)} | {_ms(r.tpot_p99)} | "
                    f"{_ms(r.slo_s)} | {_pc(r.attainment)} | {r.goodput:.3f} |")
    lines += ["", "| batch tenant | target | files done | lines done | output tok/s | "
              "file completion p50 s |", "|---|---|---|---|---|---|"]
    for name, o in results:
        for b in batch_rows(o):
            p50 = "-" if math.isnan(b.completion_p50_s) else f"{b.completion_p50_s:.1f}"
            lines.append(f"| {b.tenant} | {name} | {b.files_done}/{b.files} | "
                         f"{b.lines_done}/{b.lines} | {b.tokens_per_s:.1f} | {p50} |")
    return "\n".join(lines)

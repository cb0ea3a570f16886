"""SLO attainment over time for the admin overview: the realtime jobs that finished in a
window, in time buckets, each judged by the one definition the metrics and /admin/live use
(service.store.telemetry.slo_rules: TTFT and TPOT separately, and both) against the targets
it was admitted under, with per-bucket
p50/p99 and the targets of the plans that had traffic (the lines worth drawing)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.live import (
    SloTally,
    admitted_targets_ms,
    ms,
    percentile,
    plan_targets_ms,
    slo_targets,
)
from service.store.telemetry.slo_rules import REALTIME_KINDS, SloTargets, judge, tpot_seconds

# As service.admin.live reads them, plus each job's bucket (by when it finished).
_FINISHED = text("""
SELECT floor(extract(epoch FROM j.finished_at) / :bucket) * :bucket AS bucket,
       coalesce(j.slo_plan, t.tier) AS tier, j.ttft_slo_ms, j.tpot_slo_ms,
       j.status = 'succeeded' AS succeeded,
       extract(epoch FROM j.first_token_at - j.created_at) AS ttft_s,
       extract(epoch FROM j.finished_at - j.created_at) AS e2e_s,
       j.completion_tokens
FROM jobs j JOIN tenants t ON t.id = j.tenant_id
WHERE j.kind = 'realtime' AND j.status IN ('succeeded', 'failed', 'cancelled')
  AND j.finished_at >= now() - make_interval(secs => :window)
""")

_PREEMPTIONS = text("""
SELECT count(*) AS jobs, coalesce(sum(preemptions), 0) AS preemptions,
       coalesce(sum(recomputed_tokens), 0) AS recomputed_tokens
FROM jobs WHERE preempted_at >= now() - make_interval(secs => :window)
""")


def _bucket_view(t: int, b: SloTally) -> dict[str, Any]:
    return {"t": t, "requests": b.requests,
            **{f"{k}_met": b.met[k] for k in REALTIME_KINDS},
            **{f"{k}_attainment": _ratio(b.met[k], b.requests) for k in REALTIME_KINDS},
            "ttft_p50_ms": ms(percentile(b.ttft_s, 0.5)),
            "ttft_p99_ms": ms(percentile(b.ttft_s, 0.99)),
            "tpot_p50_ms": ms(percentile(b.tpot_s, 0.5)),
            "tpot_p99_ms": ms(percentile(b.tpot_s, 0.99))}


def _ratio(met: int, n: int) -> float | None:
    return met / n if n else None


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


async def slo_series(session: AsyncSession, *, window_s: float, bucket_s: float
                     ) -> dict[str, Any]:
    targets = await slo_targets(session)
    by_plan = plan_targets_ms(targets)
    buckets: dict[int, SloTally] = defaultdict(SloTally)
    seen_plans: set[str] = set()
    rows = await session.execute(_FINISHED, {"window": window_s, "bucket": bucket_s})
    for r in rows.mappings():
        ttft_s, e2e_s = _float(r["ttft_s"]), _float(r["e2e_s"])
        succeeded = bool(r["succeeded"])
        verdict = judge("realtime", succeeded=succeeded, ttft_s=ttft_s, e2e_s=e2e_s,
                        completion_tokens=r["completion_tokens"],
                        targets=SloTargets.from_ms(*admitted_targets_ms(r, by_plan)))
        b = buckets[int(r["bucket"])]
        b.add(verdict, ttft_s, tpot_seconds(e2e_s=e2e_s, ttft_s=ttft_s,
                                            completion_tokens=r["completion_tokens"]), succeeded)
        seen_plans.add(r["tier"])
    views = [_bucket_view(t, buckets[t]) for t in sorted(buckets)]
    total = sum(b.requests for b in buckets.values())
    return {"window_s": window_s, "bucket_s": bucket_s, "requests": total,
            **{f"{k}_attainment": _ratio(sum(b.met[k] for b in buckets.values()), total)
               for k in REALTIME_KINDS},
            "combined_kind": "both", "buckets": views,
            "targets": [t for t in targets if t["tier"] in seen_plans]}


async def preemptions(session: AsyncSession, *, window_s: float) -> dict[str, Any]:
    """Jobs preempted within the window (by their latest preemption), and their totals."""
    row = (await session.execute(_PREEMPTIONS, {"window": window_s})).mappings().one()
    return {"window_s": window_s, "jobs": row["jobs"], "preemptions": int(row["preemptions"]),
            "recomputed_tokens": int(row["recomputed_tokens"])}

"""SLO attainment over time for the admin overview: per time bucket, how many finished
realtime requests met their tier's TTFT target and their TPOT target (counted separately),
their p50/p99, and the tier targets to draw. Definitions as in service/admin/live.py: TTFT is
created -> first token; TPOT is (finished - first token) / (completion tokens - 1), and a
request with one token has no TPOT (it counts as met)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

_DONE = """
WITH done AS (
  SELECT t.tier, floor(extract(epoch FROM j.finished_at) / :bucket) * :bucket AS bucket,
         extract(epoch FROM j.first_token_at - j.created_at) * 1000 AS ttft_ms,
         CASE WHEN j.completion_tokens > 1 THEN
           extract(epoch FROM j.finished_at - j.first_token_at) * 1000
             / (j.completion_tokens - 1) END AS tpot_ms,
         tr.ttft_slo_ms, tr.tpot_slo_ms
  FROM jobs j JOIN tenants t ON t.id = j.tenant_id JOIN tiers tr ON tr.name = t.tier
  WHERE j.kind = 'realtime' AND j.status = 'succeeded' AND j.first_token_at IS NOT NULL
    AND j.finished_at >= now() - make_interval(secs => :window)
)
"""

_SERIES = text(_DONE + """
SELECT bucket, count(*) AS n,
       count(*) FILTER (WHERE ttft_ms <= ttft_slo_ms) AS ttft_met,
       count(*) FILTER (WHERE tpot_ms IS NULL OR tpot_ms <= tpot_slo_ms) AS tpot_met,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms) AS ttft_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_ms) AS ttft_p99_ms,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY tpot_ms) AS tpot_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY tpot_ms) AS tpot_p99_ms
FROM done GROUP BY bucket ORDER BY bucket
""")

# The targets of the tiers that had requests in the window: the lines worth drawing.
_TARGETS = text(_DONE + """
SELECT DISTINCT tier AS name, ttft_slo_ms, tpot_slo_ms FROM done ORDER BY name
""")

_PREEMPTIONS = text("""
SELECT count(*) AS jobs, coalesce(sum(preemptions), 0) AS preemptions,
       coalesce(sum(recomputed_tokens), 0) AS recomputed_tokens
FROM jobs WHERE preempted_at >= now() - make_interval(secs => :window)
""")


def _ratio(met: int, n: int) -> float | None:
    return met / n if n else None


async def slo_series(session: AsyncSession, *, window_s: float, bucket_s: float
                     ) -> dict[str, Any]:
    rows = (await session.execute(_SERIES, {"window": window_s, "bucket": bucket_s})
            ).mappings().all()
    targets = (await session.execute(_TARGETS, {"window": window_s, "bucket": bucket_s})
               ).mappings().all()
    buckets = [{"t": int(r["bucket"]), "requests": r["n"], "ttft_met": r["ttft_met"],
                "tpot_met": r["tpot_met"],
                "ttft_attainment": _ratio(r["ttft_met"], r["n"]),
                "tpot_attainment": _ratio(r["tpot_met"], r["n"]),
                "ttft_p50_ms": r["ttft_p50_ms"], "ttft_p99_ms": r["ttft_p99_ms"],
                "tpot_p50_ms": r["tpot_p50_ms"], "tpot_p99_ms": r["tpot_p99_ms"]}
               for r in rows]
    total = sum(b["requests"] for b in buckets)
    return {"window_s": window_s, "bucket_s": bucket_s, "requests": total,
            "ttft_attainment": _ratio(sum(b["ttft_met"] for b in buckets), total),
            "tpot_attainment": _ratio(sum(b["tpot_met"] for b in buckets), total),
            "buckets": buckets,
            "targets": [{"tier": t["name"], "ttft_slo_ms": t["ttft_slo_ms"],
                         "tpot_slo_ms": t["tpot_slo_ms"]} for t in targets]}


async def preemptions(session: AsyncSession, *, window_s: float) -> dict[str, Any]:
    """Jobs preempted within the window (by their latest preemption), and their totals."""
    row = (await session.execute(_PREEMPTIONS, {"window": window_s})).mappings().one()
    return {"window_s": window_s, "jobs": row["jobs"], "preemptions": int(row["preemptions"]),
            "recomputed_tokens": int(row["recomputed_tokens"])}

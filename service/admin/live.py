"""Live state for the admin view: queues from the jobs table, SLO attainment from job
timestamps (TTFT and TPOT as vLLM's benchmark defines them)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

_QUEUES = text("""
SELECT j.kind, j.status, t.id AS tenant_id, t.name AS tenant, count(*) AS n
FROM jobs j JOIN tenants t ON t.id = j.tenant_id
WHERE j.status IN ('queued', 'assigned', 'running')
GROUP BY j.kind, j.status, t.id, t.name
ORDER BY j.kind, t.name
""")

# A realtime job meets its SLO when TTFT (created -> first token) and TPOT
# ((finished - first token) / (completion tokens - 1)) are within its tenant's tier targets.
_SLO = text("""
WITH done AS (
  SELECT t.id AS tenant_id, t.name AS tenant, t.tier,
         extract(epoch FROM j.first_token_at - j.created_at) * 1000 AS ttft_ms,
         CASE WHEN j.completion_tokens > 1 THEN
           extract(epoch FROM j.finished_at - j.first_token_at) * 1000
             / (j.completion_tokens - 1) END AS tpot_ms,
         tr.ttft_slo_ms, tr.tpot_slo_ms
  FROM jobs j JOIN tenants t ON t.id = j.tenant_id JOIN tiers tr ON tr.name = t.tier
  WHERE j.kind = 'realtime' AND j.status = 'succeeded' AND j.first_token_at IS NOT NULL
    AND j.finished_at >= now() - make_interval(secs => :window)
)
SELECT tenant_id, tenant, tier, count(*) AS n,
       count(*) FILTER (WHERE ttft_ms <= ttft_slo_ms
                          AND (tpot_ms IS NULL OR tpot_ms <= tpot_slo_ms)) AS met,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms) AS ttft_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_ms) AS ttft_p99_ms
FROM done GROUP BY tenant_id, tenant, tier ORDER BY tenant
""")


async def queue_depth(session: AsyncSession) -> dict[str, Any]:
    rows = (await session.execute(_QUEUES)).mappings().all()
    by_class: dict[str, dict[str, int]] = {}
    for r in rows:
        by_class.setdefault(r["kind"], {}).setdefault(r["status"], 0)
        by_class[r["kind"]][r["status"]] += r["n"]
    return {"by_class": by_class,
            "by_tenant": [{"class": r["kind"], "status": r["status"],
                           "tenant_id": str(r["tenant_id"]), "tenant": r["tenant"],
                           "count": r["n"]} for r in rows]}


async def slo_attainment(session: AsyncSession, *, window_s: float) -> dict[str, Any]:
    rows = (await session.execute(_SLO, {"window": window_s})).mappings().all()
    total = sum(r["n"] for r in rows)
    met = sum(r["met"] for r in rows)
    return {"window_s": window_s, "requests": total, "met": met,
            "attainment": (met / total) if total else None,
            "by_tenant": [{"tenant_id": str(r["tenant_id"]), "tenant": r["tenant"],
                           "tier": r["tier"], "requests": r["n"], "met": r["met"],
                           "attainment": r["met"] / r["n"],
                           "ttft_p50_ms": r["ttft_p50_ms"], "ttft_p99_ms": r["ttft_p99_ms"]}
                          for r in rows]}

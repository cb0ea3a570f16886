"""The query behind the fairness report (service.store.telemetry.fairness): per tenant and
class, the service of the jobs that ended in a window, their queue waits, and what is still
open. The dispatcher (sync) and /admin/live (async) run the same statement and read its rows
with ``tenant_services``.

Ended jobs are found through ``ix_jobs_finished_at`` and open ones through the status index,
so the cost follows the window's traffic and the open work, not the table's size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import text

from service.store.telemetry.fairness import INPUT_WEIGHT, OUTPUT_WEIGHT, TenantService

# A job's queue wait is queued -> placed (its last wait, for one that was preempted and
# queued again). Only succeeded jobs count as service; any ended job counts for its wait.
WINDOW_SQL = text("""
WITH ended AS (
    SELECT tenant_id, kind,
           sum(CASE WHEN status = 'succeeded'
                    THEN :w_in * coalesce(prompt_tokens, 0)
                       + :w_out * coalesce(completion_tokens, 0) ELSE 0 END) AS served,
           count(*) AS jobs,
           percentile_cont(0.5) WITHIN GROUP (
               ORDER BY extract(epoch FROM assigned_at - queued_at)) AS wait_p50,
           percentile_cont(0.99) WITHIN GROUP (
               ORDER BY extract(epoch FROM assigned_at - queued_at)) AS wait_p99
    FROM jobs
    WHERE finished_at >= now() - make_interval(secs => :window)
    GROUP BY tenant_id, kind
), open AS (
    SELECT tenant_id, kind, sum(:w_out * max_tokens) AS backlog,
           extract(epoch FROM now() - min(queued_at) FILTER (WHERE status = 'queued'))
               AS oldest_wait
    FROM jobs
    WHERE status IN ('queued', 'assigned', 'running')
    GROUP BY tenant_id, kind
)
SELECT t.id AS tenant_id, t.name AS tenant, t.weight,
       coalesce(e.kind, o.kind) AS kind, coalesce(e.served, 0) AS served,
       coalesce(o.backlog, 0) AS backlog, coalesce(e.jobs, 0) AS jobs,
       e.wait_p50, e.wait_p99, o.oldest_wait
FROM ended e
FULL JOIN open o ON o.tenant_id = e.tenant_id AND o.kind = e.kind
JOIN tenants t ON t.id = coalesce(e.tenant_id, o.tenant_id)
""")


def window_params(window_s: float) -> dict[str, float]:
    return {"window": window_s, "w_in": INPUT_WEIGHT, "w_out": OUTPUT_WEIGHT}


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def tenant_services(rows: Iterable[Any]) -> list[TenantService]:
    """The statement's rows (mappings) as the pure report's input."""
    return [TenantService(tenant_id=str(r["tenant_id"]), tenant=r["tenant"],
                          job_class=r["kind"], weight=float(r["weight"] or 1.0),
                          served=float(r["served"]), backlog=float(r["backlog"]),
                          jobs=int(r["jobs"]), wait_p50_s=_float(r["wait_p50"]),
                          wait_p99_s=_float(r["wait_p99"]),
                          oldest_wait_s=_float(r["oldest_wait"]))
            for r in rows]

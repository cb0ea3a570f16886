"""Live state for the admin view: queues from the jobs table, SLO attainment of the realtime
jobs that finished in a window, judged by the one definition the metrics use
(service.store.telemetry.slo_rules: TTFT and TPOT separately, and both together), with the
plans' targets beside it (a plan is a "tier" in this API's JSON, and in the tenants table)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from sqlalchemy import RowMapping, text
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.telemetry.slo_rules import REALTIME_KINDS, SloTargets, judge, tpot_seconds

_QUEUES = text("""
SELECT j.kind, j.status, t.id AS tenant_id, t.name AS tenant, count(*) AS n
FROM jobs j JOIN tenants t ON t.id = j.tenant_id
WHERE j.status IN ('queued', 'assigned', 'running')
GROUP BY j.kind, j.status, t.id, t.name
ORDER BY j.kind, t.name
""")

# Every realtime job that ended in the window: one that did not succeed misses every target.
# TTFT is created -> first token; E2E created -> finished (slo_rules derives TPOT from them).
# Each is judged under the plan and targets it was admitted with (stored on the job); a row
# from before those were stored, under its tenant's plan now. Oldest first: a tenant's row
# shows the targets its latest job was admitted under.
_FINISHED = text("""
SELECT t.id AS tenant_id, t.name AS tenant, coalesce(j.slo_plan, t.tier) AS tier,
       j.ttft_slo_ms, j.tpot_slo_ms, j.status = 'succeeded' AS succeeded,
       extract(epoch FROM j.first_token_at - j.created_at) AS ttft_s,
       extract(epoch FROM j.finished_at - j.created_at) AS e2e_s,
       j.completion_tokens
FROM jobs j JOIN tenants t ON t.id = j.tenant_id
WHERE j.kind = 'realtime' AND j.status IN ('succeeded', 'failed', 'cancelled')
  AND j.finished_at >= now() - make_interval(secs => :window)
ORDER BY j.finished_at
""")
_TARGETS = text("SELECT name, ttft_slo_ms, tpot_slo_ms FROM tiers ORDER BY weight, name")


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


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks (Postgres' percentile_cont)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


class SloTally:
    """Judged requests of one group (the fleet, or one tenant)."""

    def __init__(self) -> None:
        self.requests = 0
        self.met = dict.fromkeys(REALTIME_KINDS, 0)
        self.ttft_s: list[float] = []
        self.tpot_s: list[float] = []

    def add(self, verdict: dict[str, bool], ttft_s: float | None, tpot_s: float | None,
            succeeded: bool) -> None:
        self.requests += 1
        for kind, met in verdict.items():
            self.met[kind] += int(met)
        if succeeded and ttft_s is not None:
            self.ttft_s.append(ttft_s)
        if succeeded and tpot_s is not None:
            self.tpot_s.append(tpot_s)

    def attainment(self, kind: str) -> float | None:
        return self.met[kind] / self.requests if self.requests else None

    def view(self) -> dict[str, Any]:
        """``met``/``attainment`` are the combined figure (TTFT and TPOT both met), as before;
        ``ttft_*``/``tpot_*`` judge each target alone; ``by_kind`` has all three."""
        return {"requests": self.requests, "met": self.met["both"],
                "attainment": self.attainment("both"),
                "combined_kind": "both",
                "ttft_met": self.met["ttft"], "ttft_attainment": self.attainment("ttft"),
                "tpot_met": self.met["tpot"], "tpot_attainment": self.attainment("tpot"),
                "by_kind": {kind: {"met": self.met[kind], "attainment": self.attainment(kind)}
                            for kind in REALTIME_KINDS}}


TargetsMs = tuple[int | None, int | None]  # (TTFT, TPOT) targets in milliseconds


def plan_targets_ms(targets: list[dict[str, Any]]) -> dict[str, TargetsMs]:
    return {t["tier"]: (t["ttft_slo_ms"], t["tpot_slo_ms"]) for t in targets}


def admitted_targets_ms(row: RowMapping, by_plan: Mapping[str, TargetsMs]) -> TargetsMs:
    """The targets a finished job is judged against: those it was admitted under, or (a row
    from before they were stored) its plan's current ones."""
    if row["ttft_slo_ms"] is not None:
        return row["ttft_slo_ms"], row["tpot_slo_ms"]
    return by_plan.get(row["tier"], (None, None))


async def slo_targets(session: AsyncSession) -> list[dict[str, Any]]:
    rows = (await session.execute(_TARGETS)).mappings().all()
    return [{"tier": r["name"], "ttft_slo_ms": r["ttft_slo_ms"],
             "tpot_slo_ms": r["tpot_slo_ms"]} for r in rows]


async def slo_attainment(session: AsyncSession, *, window_s: float) -> dict[str, Any]:
    targets = await slo_targets(session)
    by_plan = plan_targets_ms(targets)
    fleet = SloTally()
    tenants: dict[tuple[str, str, str], SloTally] = defaultdict(SloTally)
    judged_under: dict[tuple[str, str, str], TargetsMs] = {}
    for r in (await session.execute(_FINISHED, {"window": window_s})).mappings():
        ttft_s = None if r["ttft_s"] is None else float(r["ttft_s"])
        e2e_s = None if r["e2e_s"] is None else float(r["e2e_s"])
        row_targets = admitted_targets_ms(r, by_plan)
        verdict = judge("realtime", succeeded=bool(r["succeeded"]), ttft_s=ttft_s, e2e_s=e2e_s,
                        completion_tokens=r["completion_tokens"],
                        targets=SloTargets.from_ms(*row_targets))
        tpot_s = tpot_seconds(e2e_s=e2e_s, ttft_s=ttft_s,
                              completion_tokens=r["completion_tokens"])
        key = (str(r["tenant_id"]), r["tenant"], r["tier"])
        judged_under[key] = row_targets
        for tally in (fleet, tenants[key]):
            tally.add(verdict, ttft_s, tpot_s, bool(r["succeeded"]))
    by_tenant = []
    for key, tally in sorted(tenants.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        tenant_id, name, plan = key
        ttft_ms, tpot_ms = judged_under[key]
        by_tenant.append({
            "tenant_id": tenant_id, "tenant": name, "tier": plan, **tally.view(),
            "ttft_slo_ms": ttft_ms, "tpot_slo_ms": tpot_ms,
            "ttft_p50_ms": ms(percentile(tally.ttft_s, 0.5)),
            "ttft_p99_ms": ms(percentile(tally.ttft_s, 0.99)),
            "tpot_p50_ms": ms(percentile(tally.tpot_s, 0.5)),
            "tpot_p99_ms": ms(percentile(tally.tpot_s, 0.99))})
    return {"window_s": window_s, **fleet.view(), "targets": targets, "by_tenant": by_tenant}

"""Fairness you can read: how evenly the pool served the tenants that wanted it, per class.

Pure: numbers in, a report out. The dispatcher exports it as metrics and /admin/live shows
it (both from service.store.fairness_window's query over the same window).

A tenant's *service* in a window is what the fair-share policy charges for it (its cost
model: input tokens + 2 x output tokens of the jobs that ended in the window). Its *demand* is
that service plus an estimate of what it still has open (2 x max_tokens of each open job:
the prompt of a job that has not run is not counted yet). Its *fair share* is the weighted
max-min split of all the service delivered over those demands (water-filling: a tenant that
asked for less than its weighted share gets what it asked for, the rest is split by weight
among the others). Jain's index over service / fair share is 1.0 when every tenant got its
fair share and 1/n when one tenant took everything; a tenant's ``share_ratio`` says which
way it went (below 1: served less than its share).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# The fair-share policy's default cost weights (scheduler.policies.vtc): an output token
# costs two input tokens.
INPUT_WEIGHT = 1.0
OUTPUT_WEIGHT = 2.0


@dataclass(frozen=True, slots=True)
class TenantService:
    """One tenant's work of one class in the window."""

    tenant_id: str
    tenant: str
    job_class: str
    weight: float
    served: float  # weighted tokens of jobs that ended in the window
    backlog: float  # estimated weighted tokens of its open jobs now
    jobs: int  # jobs that ended in the window
    wait_p50_s: float | None  # queue wait (queued -> placed) of those jobs
    wait_p99_s: float | None
    oldest_wait_s: float | None  # the longest a job of its is waiting right now

    @property
    def demand(self) -> float:
        return self.served + self.backlog


@dataclass(frozen=True, slots=True)
class TenantFairness:
    service: TenantService
    fair: float  # its weighted max-min share of what was served

    @property
    def share_ratio(self) -> float | None:
        return self.service.served / self.fair if self.fair > 0 else None


@dataclass(frozen=True, slots=True)
class ClassFairness:
    job_class: str
    jain: float | None  # None: fewer than two tenants wanted service
    tenants: tuple[TenantFairness, ...]


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index, (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one gets
    everything; None for no values or all zero."""
    total_sq = sum(v * v for v in values)
    if not values or total_sq == 0:
        return None
    return sum(values) ** 2 / (len(values) * total_sq)


def water_fill(demands: Mapping[str, float], weights: Mapping[str, float],
               capacity: float) -> dict[str, float]:
    """Weighted max-min fair shares of ``capacity``: raise every unsatisfied tenant's share
    in proportion to its weight until it meets its demand or the capacity runs out."""
    shares = dict.fromkeys(demands, 0.0)
    active = {t for t, d in demands.items() if d > 0}
    left = capacity
    while active and left > 1e-9:
        total_weight = sum(max(weights.get(t, 1.0), 1e-9) for t in active)
        per_weight = left / total_weight
        # The smallest level at which some active tenant is satisfied, or all of what is left.
        step = min(per_weight, min((demands[t] - shares[t]) / max(weights.get(t, 1.0), 1e-9)
                                   for t in active))
        for t in list(active):
            shares[t] += step * max(weights.get(t, 1.0), 1e-9)
            if shares[t] >= demands[t] - 1e-9:
                shares[t] = demands[t]
                active.discard(t)
        left = capacity - sum(shares.values())
    return shares


def class_fairness(job_class: str, rows: Sequence[TenantService]) -> ClassFairness:
    """The class's report over the tenants that wanted service in the window."""
    wanting = [r for r in rows if r.demand > 0]
    fair = water_fill({r.tenant_id: r.demand for r in wanting},
                      {r.tenant_id: r.weight for r in wanting},
                      sum(r.served for r in wanting))
    tenants = tuple(TenantFairness(r, fair[r.tenant_id]) for r in wanting)
    ratios = [t.share_ratio for t in tenants if t.share_ratio is not None]
    return ClassFairness(job_class, jain(ratios) if len(ratios) >= 2 else None, tenants)


def fairness_by_class(rows: Sequence[TenantService]) -> dict[str, ClassFairness]:
    classes = sorted({r.job_class for r in rows})
    return {c: class_fairness(c, [r for r in rows if r.job_class == c]) for c in classes}

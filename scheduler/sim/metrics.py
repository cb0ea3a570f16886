"""What a simulation run measured, and the summaries vLLM's benchmark defines.

TTFT = first token - arrival; TPOT = (E2E - TTFT) / (output - 1); E2E = last token -
arrival. A realtime job meets its SLO when TTFT (and TPOT, when set) are within target; a
batch job when it finishes by its deadline. Goodput counts jobs per second meeting every SLO;
rejected jobs count against attainment and are reported separately.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from scheduler.sim.traffic import SimJob
from scheduler.types import JobClass


@dataclass(slots=True)
class JobRecord:
    job: SimJob
    first_token: float | None = None
    finished: float | None = None
    output: int = 0
    rejected: str | None = None
    preemptions: int = 0

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.job.arrival

    @property
    def e2e(self) -> float | None:
        return None if self.finished is None else self.finished - self.job.arrival

    @property
    def tpot(self) -> float | None:
        if self.finished is None or self.first_token is None or self.output < 2:
            return None
        return (self.finished - self.first_token) / (self.output - 1)

    def pending(self, end_s: float) -> bool:
        """Unfinished batch still within its window when the run ended: not a miss (yet)."""
        job = self.job
        return (
            self.finished is None
            and self.rejected is None
            and job.job_class is JobClass.BATCH
            and (job.deadline is None or job.deadline > end_s)
        )

    def met_slo(self, default_ttft_s: float) -> bool:
        if self.finished is None:
            return False
        job = self.job
        if job.job_class is JobClass.BATCH:
            return job.deadline is None or self.finished <= job.deadline
        ttft_ok = (self.ttft or 0.0) <= (job.ttft_slo_s or default_ttft_s)
        tpot = self.tpot
        return ttft_ok and (job.tpot_slo_s is None or tpot is None or tpot <= job.tpot_slo_s)


@dataclass(slots=True)
class Metrics:
    bin_s: float
    w_in: float = 1.0
    w_out: float = 2.0
    records: dict[str, JobRecord] = field(default_factory=dict)
    # tenant -> bin -> weighted service / tenant weight
    service: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    tokens_out: dict[JobClass, int] = field(default_factory=lambda: defaultdict(int))
    served_out: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # raw tokens
    # VTC-style service, charged at assignment (prompt + max_tokens) and corrected to the
    # real output at the end, whatever the policy: the quantity the VTC bound is about.
    charged: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    backlog: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # queued jobs
    max_charged_gap: float = 0.0
    # tenant -> everyone's charged service when it last became backlogged: the gap between
    # two tenants counts only service since both were backlogged (the VTC bound's interval).
    baselines: dict[str, tuple[int, dict[str, float]]] = field(default_factory=dict)
    _events: int = 0
    max_request_cost: float = 0.0  # largest (w_in * prompt + w_out * max_tokens) / weight
    preemptions: int = 0
    engine_preemptions: int = 0
    # KV tokens dropped by policy preemptions (a swapped victim's KV is kept: 0 for it).
    work_lost_tokens: int = 0
    recomputed_tokens: int = 0  # prefill re-paid by resumes, engine and policy preemptions
    swapped_tokens: int = 0  # KV tokens moved to CPU memory and back (swap mode)
    swap_s: float = 0.0  # engine time those transfers took
    prefix_hit_tokens: int = 0  # prefill the engines' prefix caches saved
    adapter_loads: int = 0  # LoRA adapters the engines loaded (scheduler.sim.adapters)
    preemption_mode: str = "recompute"  # what the scenario asked for
    modes_used: dict[str, str] = field(default_factory=dict)  # worker -> mode it ran
    mode_fallbacks: dict[str, str] = field(default_factory=dict)  # worker -> why not swap
    decisions: int = 0
    schedule_calls: int = 0
    schedule_wall_s: float = 0.0

    def charge(self, tenant: str, weight: float, tokens_in: int, tokens_out: int) -> None:
        amount = (self.w_in * tokens_in + self.w_out * tokens_out) / weight
        self.charged[tenant] += amount
        self.max_request_cost = max(self.max_request_cost, amount)

    def note_backlog(self, tenant: str, delta: int) -> None:
        before = self.backlog[tenant]
        self.backlog[tenant] = before + delta
        if before <= 0 < before + delta:
            self._events += 1
            self.baselines[tenant] = (self._events, dict(self.charged))

    def sample_gap(self, max_tenants: int = 32) -> None:
        """Call between decisions: the largest charged-service gap among backlogged tenants,
        each pair measured since the later of the two became backlogged."""
        active = [t for t, n in self.backlog.items() if n > 0]
        if not 1 < len(active) <= max_tenants:
            return
        for i, f in enumerate(active):
            for g in active[i + 1 :]:
                base = max(
                    self.baselines.get(f, (0, {})),
                    self.baselines.get(g, (0, {})),
                    key=lambda b: b[0],
                )[1]
                gained_f = self.charged[f] - base.get(f, 0.0)
                gained_g = self.charged[g] - base.get(g, 0.0)
                self.max_charged_gap = max(self.max_charged_gap, abs(gained_f - gained_g))

    def add_service(
        self, tenant: str, weight: float, tokens_in: int, tokens_out: int, t0: float, t1: float
    ) -> None:
        """Spread a step's service evenly over [t0, t1] so long decode jumps stay smooth."""
        amount = (self.w_in * tokens_in + self.w_out * tokens_out) / weight
        self.served_out[tenant] += tokens_out
        if amount <= 0:
            return
        bins = self.service[tenant]
        first, last = int(t0 / self.bin_s), int(t1 / self.bin_s)
        if first == last or t1 <= t0:
            bins[last] = bins.get(last, 0.0) + amount
            return
        for b in range(first, last + 1):
            lo, hi = max(t0, b * self.bin_s), min(t1, (b + 1) * self.bin_s)
            if hi > lo:
                bins[b] = bins.get(b, 0.0) + amount * (hi - lo) / (t1 - t0)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one tenant gets everything."""
    if not values or not any(values):
        return math.nan
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def cumulative_service(metrics: Metrics, until: float) -> dict[str, list[float]]:
    bins = int(until / metrics.bin_s) + 1
    out: dict[str, list[float]] = {}
    for tenant, per_bin in metrics.service.items():
        total, series = 0.0, []
        for b in range(bins):
            total += per_bin.get(b, 0.0)
            series.append(total)
        out[tenant] = series
    return out

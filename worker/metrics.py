"""What a worker observes about the jobs it runs and the engine it hosts.

A ``JobObserver`` is made when a worker claims a job (from the claim's returned row): it
observes the queue time (first attempt only) and the dispatch lag, ITL on every output, and
at the end the prefix-cache counts and, for batch-file lines that no API request relays,
TTFT/E2E/SLO, so every job is counted exactly once across the fleet.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from service.store.telemetry import metrics as m
from service.store.telemetry.labels import class_label, tenant_label, tier_label
from service.store.telemetry.slo_rules import judge
from service.store.telemetry.state import enabled, record_slo


def _seconds(later: dt.datetime | None, earlier: dt.datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return max(0.0, (later - earlier).total_seconds())


class JobObserver:
    __slots__ = (
        "_itl",
        "created_at",
        "deadline_at",
        "first_token_at",
        "job_class",
        "labels",
        "last_output",
        "model",
        "relayed",
    )

    def __init__(self, row: Any, *, attempt: int, now: dt.datetime) -> None:
        self.model = str(row.model)
        self.job_class = class_label(row.kind)
        self.labels = (self.model, tenant_label(row.tenant_id), self.job_class,
                       tier_label(row.service_tier, row.kind))
        self.created_at = row.created_at
        self.deadline_at = row.deadline_at
        self.first_token_at = row.first_token_at
        self.relayed = row.batch_id is None  # an API request observes its own latency
        self.last_output: float | None = None
        self._itl = m.ITL.labels(self.model, self.job_class)  # looked up once, used per token
        lag = _seconds(now, row.assigned_at)
        if lag is not None:
            m.DISPATCH_LAG.labels(self.job_class).observe(lag)
        if attempt <= 1:
            queued = _seconds(now, row.created_at)
            if queued is not None:
                m.QUEUE_TIME.labels(*self.labels).observe(queued)

    def output(self, at: float | None = None) -> None:
        """An output now, or at ``at`` (a ``time.perf_counter()`` reading: an output that left
        before this observer existed, an express job's first token before its claim)."""
        now = time.perf_counter() if at is None else at
        if self.last_output is not None:
            self._itl.observe(now - self.last_output)
        elif self.first_token_at is None:
            ago = dt.timedelta(seconds=time.perf_counter() - now)
            self.first_token_at = dt.datetime.now(dt.UTC) - ago
        self.last_output = now

    def preempted(self) -> None:
        m.PREEMPTIONS.labels(self.model).inc()
        m.JOB_PREEMPTIONS.labels(self.model, self.job_class).inc()

    def finished(self, status: str, *, prompt_tokens: int = 0, cached_tokens: int = 0) -> None:
        _, tenant, job_class, tier = self.labels
        m.JOBS_FINISHED.labels(self.model, tenant, job_class, tier, status).inc()
        if prompt_tokens:
            m.PREFIX_QUERIES.labels(self.model).inc(prompt_tokens)
            m.PREFIX_HITS.labels(self.model).inc(cached_tokens)
        if self.relayed:
            return
        now = dt.datetime.now(dt.UTC)
        ok = status == "succeeded"
        ttft = _seconds(self.first_token_at, self.created_at)
        if ttft is not None:
            m.TTFT.labels(*self.labels).observe(ttft)
        e2e = _seconds(now, self.created_at)
        if ok and e2e is not None:
            m.E2E.labels(*self.labels).observe(e2e)
        # A batch-file line (the only kind a worker judges) carries its deadline.
        verdict = judge(job_class, succeeded=ok, ttft_s=ttft, e2e_s=e2e,
                        deadline_s=_seconds(self.deadline_at, self.created_at))
        record_slo(tenant, job_class, tier, verdict)


def observe_job(row: Any, *, attempt: int, now: dt.datetime) -> JobObserver | None:
    return JobObserver(row, attempt=attempt, now=now) if enabled() else None


def observe_engine(model: str, stats: Any, active_jobs: int) -> None:
    """Engine gauges from one heartbeat's EngineStats; preemptions inside the engine count
    into vllm:num_preemptions as they rise."""
    if not enabled():
        return
    m.RUNNING.labels(model).set(stats.num_running)
    m.WAITING.labels(model).set(stats.num_waiting)
    m.KV_USAGE.labels(model).set(stats.kv_usage)
    m.WORKER_ACTIVE_JOBS.labels(model).set(active_jobs)
    if model not in _engine_preemptions:  # export the counters at 0 from the start
        for counter in (m.PREEMPTIONS, m.PREFIX_QUERIES, m.PREFIX_HITS):
            counter.labels(model)
        for job_class in ("realtime", "batch"):
            m.JOB_PREEMPTIONS.labels(model, job_class)
    seen = _engine_preemptions.get(model, 0)
    total = int(getattr(stats, "num_preemptions", 0) or 0)
    if total > seen:
        m.PREEMPTIONS.labels(model).inc(total - seen)
    _engine_preemptions[model] = total


_engine_preemptions: dict[str, int] = {}

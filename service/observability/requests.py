"""What the API observes about one completion request: TTFT at the first token it relays,
E2E/TPOT at the final event, the SLO verdict (service.store.telemetry.slo_rules), and
requests in flight."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from service.store.telemetry import metrics as m
from service.store.telemetry.labels import class_label, tenant_label, tier_label
from service.store.telemetry.slo_rules import SloTargets, judge, tpot_seconds
from service.store.telemetry.state import enabled, record_rejection, record_slo
from service.web.errors import APIError

T = TypeVar("T")


class RequestObserver:
    __slots__ = ("deadline_s", "done", "exemplar", "job_class", "labels", "predicted_ttft_s",
                 "t0", "targets", "ttft")

    def __init__(self, *, model: str, tenant: object, job_class: object, tier: object,
                 targets: SloTargets | None, deadline_s: float | None,
                 started: float | None = None, predicted_ttft_s: float | None = None,
                 job_id: str | None = None) -> None:
        self.job_class = class_label(job_class)
        # The job's public id on its latency observations (OpenMetrics exemplars): a slow
        # bucket in Grafana leads to the job the API, the logs and the explorer name alike.
        self.exemplar = {"job_id": job_id} if job_id else None
        self.labels = (model, tenant_label(tenant), self.job_class, tier_label(tier, job_class))
        # Realtime is judged on its plan's targets; flex (batch class) on its deadline.
        self.targets = targets
        self.deadline_s = deadline_s
        self.t0 = started if started is not None else time.perf_counter()
        self.ttft: float | None = None
        self.done = False
        self.predicted_ttft_s = predicted_ttft_s  # the door's, when it judged the request

    async def around(self, work: Awaitable[T]) -> T:
        """Await a non-streamed request's work, counted as in flight meanwhile."""
        gauge = m.IN_FLIGHT.labels(self.job_class)
        gauge.inc()
        try:
            return await work
        finally:
            gauge.dec()

    async def wrap(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Relay a streamed response, counted as in flight from its first byte to its end."""
        gauge = m.IN_FLIGHT.labels(self.job_class)
        gauge.inc()
        try:
            async for chunk in stream:
                yield chunk
        finally:
            gauge.dec()

    def first_token(self) -> None:
        if self.ttft is None:
            self.ttft = time.perf_counter() - self.t0
            m.TTFT.labels(*self.labels).observe(self.ttft, exemplar=self.exemplar)
            if self.predicted_ttft_s:
                m.TTFT_PREDICTION.labels(self.labels[0], self.labels[3]).observe(
                    self.ttft / self.predicted_ttft_s)

    def finished(self, *, ok: bool, completion_tokens: int = 0) -> None:
        if self.done:
            return
        self.done = True
        e2e = time.perf_counter() - self.t0
        if ok:
            m.E2E.labels(*self.labels).observe(e2e, exemplar=self.exemplar)
            tpot = tpot_seconds(e2e_s=e2e, ttft_s=self.ttft, completion_tokens=completion_tokens)
            if tpot is not None:
                m.TPOT.labels(*self.labels).observe(tpot)
        verdict = judge(self.job_class, succeeded=ok, ttft_s=self.ttft, e2e_s=e2e,
                        completion_tokens=completion_tokens, targets=self.targets,
                        deadline_s=self.deadline_s)
        _, tenant, job_class, tier = self.labels
        record_slo(tenant, job_class, tier, verdict)


class _NullObserver:
    """Metrics off: the same calls, doing nothing."""

    async def around(self, work: Awaitable[T]) -> T:
        return await work

    def wrap(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        return stream

    def first_token(self) -> None:
        pass

    def finished(self, *, ok: bool, completion_tokens: int = 0) -> None:
        pass


NULL_OBSERVER = _NullObserver()


def observe_request(*, model: str, tenant: object, job_class: object, tier: object,
                    targets: SloTargets | None, deadline_s: float | None,
                    started: float | None = None, predicted_ttft_s: float | None = None,
                    job_id: str | None = None) -> RequestObserver | _NullObserver:
    """``started``: time.perf_counter() when the request arrived (default: now);
    ``targets``: the tenant plan's; ``deadline_s``: arrival -> the request's deadline;
    ``predicted_ttft_s``: the door's prediction, checked against the first token;
    ``job_id``: the job's public id, its latency observations' exemplar."""
    if not enabled():
        return NULL_OBSERVER
    return RequestObserver(model=model, tenant=tenant, job_class=job_class, tier=tier,
                           targets=targets, deadline_s=deadline_s, started=started,
                           predicted_ttft_s=predicted_ttft_s, job_id=job_id)


def record_refusal(tenant: object, error: APIError) -> None:
    """Count an admission APIError by the machine-readable reason the quota code put on it
    (the limit that refused, e.g. "requests_per_minute"), else by its error code."""
    record_rejection(tenant, error.reason or error.code or "refused")

"""What the API observes about one completion request: TTFT at the first token it relays,
E2E/TPOT at the final event, the SLO outcome, and requests in flight."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from service.store.telemetry import metrics as m
from service.store.telemetry.labels import class_label, tenant_label, tier_label
from service.store.telemetry.state import SLO_WINDOWS, enabled, record_rejection
from service.web.errors import APIError

T = TypeVar("T")


class RequestObserver:
    __slots__ = ("done", "job_class", "labels", "slo_s", "t0", "ttft")

    def __init__(self, *, model: str, tenant: object, job_class: object, tier: object,
                 slo_s: float | None, started: float | None = None) -> None:
        self.job_class = class_label(job_class)
        self.labels = (model, tenant_label(tenant), self.job_class, tier_label(tier, job_class))
        # Realtime: the TTFT target; flex (batch class): the deadline for the whole answer.
        self.slo_s = slo_s
        self.t0 = started if started is not None else time.perf_counter()
        self.ttft: float | None = None
        self.done = False

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
            m.TTFT.labels(*self.labels).observe(self.ttft)

    def finished(self, *, ok: bool, completion_tokens: int = 0) -> None:
        if self.done:
            return
        self.done = True
        e2e = time.perf_counter() - self.t0
        if ok:
            m.E2E.labels(*self.labels).observe(e2e)
            if self.ttft is not None and completion_tokens > 1:
                m.TPOT.labels(*self.labels).observe((e2e - self.ttft) / (completion_tokens - 1))
        met = ok and self._within_slo(e2e)
        _, tenant, job_class, tier = self.labels
        m.SLO_REQUESTS.labels(tenant, job_class, tier, "met" if met else "missed").inc()
        SLO_WINDOWS.record(job_class, met)

    def _within_slo(self, e2e: float) -> bool:
        if self.slo_s is None:
            return True
        if self.job_class == "realtime":
            return self.ttft is not None and self.ttft <= self.slo_s
        return e2e <= self.slo_s


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
                    slo_s: float | None, started: float | None = None
                    ) -> RequestObserver | _NullObserver:
    """``started``: time.perf_counter() when the request arrived (default: now)."""
    if not enabled():
        return NULL_OBSERVER
    return RequestObserver(model=model, tenant=tenant, job_class=job_class, tier=tier,
                           slo_s=slo_s, started=started)


def record_refusal(tenant: object, error: APIError) -> None:
    """Count an admission APIError by the machine-readable reason the quota code put on it
    (the limit that refused, e.g. "requests_per_minute"), else by its error code."""
    record_rejection(tenant, error.reason or error.code or "refused")

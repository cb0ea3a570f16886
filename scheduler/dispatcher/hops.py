"""The dispatcher's hops of a traced job (service.store.tracing): the receipt of its NOTIFY (up
to the policy having it), the decision (from then to its Assign) and the send (the claim and
the task message, whose headers Celery's instrumentation fills from the current span).

Only jobs whose NOTIFY carried a traceparent are followed, so with tracing off nothing is kept.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry.context import Context
from opentelemetry.trace import Span

from scheduler.types import Assign
from service.store import tracing

RECEIVE, DECIDE, SEND = "fairway.dispatcher.receive", "fairway.dispatcher.decide", \
    "fairway.dispatcher.send"
MAX_FOLLOWED = 10_000  # jobs the policy never decides on (its own expiry) must not pile up


class HopTraces:
    def __init__(self) -> None:
        self._heard: dict[str, tuple[Context, int]] = {}  # notified, not yet with the policy
        self._queued: dict[str, tuple[Context, int]] = {}  # job id -> (receive span, its end)

    def heard(self, job_id: uuid.UUID, traceparent: str | None, at_ns: int) -> None:
        """A JobQueued wake-up read at ``at_ns``."""
        parent = tracing.extract_traceparent(traceparent)
        if parent is not None:
            self._heard[str(job_id)] = (parent, at_ns)

    def arrived(self) -> None:
        """The notified jobs are with the policy: their receive hops end."""
        if not self._heard:
            return
        now = time.time_ns()
        for job_id, (parent, heard) in self._heard.items():
            received = tracing.start_span(RECEIVE, parent=parent, start_ns=heard, attributes={
                "job.id": job_id, "fairway.job": f"job_{uuid.UUID(job_id).hex}"})
            tracing.end(received, now)
            if (ctx := tracing.context_of(received)) is not None:
                self._queued[job_id] = (ctx, now)
        self._heard.clear()
        while len(self._queued) > MAX_FOLLOWED:
            self._queued.pop(next(iter(self._queued)))

    @contextmanager
    def sending(self, assigns: Sequence[Assign]) -> Iterator[dict[str, dict[str, str]]]:
        """Around a pass's claim and sends: each followed job's decision hop ends here, and its
        send hop is the block; yields job id -> the send hop's W3C headers, for its message."""
        spans: list[Span] = []
        headers: dict[str, dict[str, str]] = {}
        for a in assigns:
            followed = self._queued.pop(a.job_id, None)
            if followed is None:
                continue
            parent, since = followed
            decided = tracing.start_span(DECIDE, parent=parent, start_ns=since,
                                         attributes={"worker.id": a.worker_id})
            tracing.end(decided)
            sent = tracing.start_span(SEND, parent=tracing.context_of(decided))
            if sent is not None:
                spans.append(sent)
                headers[a.job_id] = tracing.inject(tracing.context_of(sent))
        try:
            yield headers
        finally:
            for sent in spans:
                tracing.end(sent)

    def forget(self, job_id: str) -> None:
        """The job left the queue without a send (refused, cancelled)."""
        self._queued.pop(job_id, None)

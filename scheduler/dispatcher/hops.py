"""The dispatcher's hops of a traced job (service.store.tracing): the receipt of its NOTIFY (up
to the policy having it), the decision (from then to its Assign) and the send (the claim and
the task message, whose headers Celery's instrumentation fills from the current span).

Only jobs whose NOTIFY carried a traceparent are followed, so with tracing off nothing is kept.
"""

from __future__ import annotations

import time
import uuid
from contextlib import AbstractContextManager, nullcontext

from opentelemetry.context import Context

from service.store import tracing

RECEIVE, DECIDE, SEND = "fairway.dispatcher.receive", "fairway.dispatcher.decide", \
    "fairway.dispatcher.send"
_UNTRACED: AbstractContextManager[None] = nullcontext()
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
            received = tracing.start_span(RECEIVE, parent=parent, start_ns=heard,
                                          attributes={"job.id": job_id})
            tracing.end(received, now)
            if (ctx := tracing.context_of(received)) is not None:
                self._queued[job_id] = (ctx, now)
        self._heard.clear()
        while len(self._queued) > MAX_FOLLOWED:
            self._queued.pop(next(iter(self._queued)))

    def sending(self, job_id: str, worker_id: str) -> AbstractContextManager[object]:
        """Around an Assign's claim and send: the decision hop ends here, the send hop is the
        block (current inside it, so the task message carries it)."""
        followed = self._queued.pop(job_id, None)
        if followed is None:
            return _UNTRACED
        parent, since = followed
        decided = tracing.start_span(DECIDE, parent=parent, start_ns=since,
                                     attributes={"worker.id": worker_id})
        tracing.end(decided)
        return tracing.span(SEND, parent=tracing.context_of(decided))

    def forget(self, job_id: str) -> None:
        """The job left the queue without a send (refused, cancelled)."""
        self._queued.pop(job_id, None)

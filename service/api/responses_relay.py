"""A Responses-API job's progress to its HTTP request: wait for the whole Response object, or
relay it as the Responses API's server-sent events.

The same relay as chat completions (service.api.relay.follow_job, with the job row as the
fallback), in the Response object's shapes (service.jobs.response_view). A request that
leaves or times out cancels its job, except a background one: its job goes on and its
result stays fetchable with GET /v1/responses/{id}.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request

from service.api.relay import (
    Interrupted,
    KeepAlive,
    NewText,
    cancel_for_client,
    final_row,
    follow_job,
    interrupted_error,
    relay_span,
    row_reader,
    wait_for_job,
)
from service.jobs.response_view import EventStream, render
from service.store import tracing
from service.store.detached import run_detached
from service.store.job_stream import Failure, Final
from service.store.settings import Settings

log = logging.getLogger("fairway.api")
KEEPALIVE_COMMENT = b": waiting for a worker\n\n"  # skipped by clients


async def wait_response(request: Request, job_id: uuid.UUID, settings: Settings,
                        obs: Any, on_settled: Callable[[], None] | None = None
                        ) -> dict[str, Any]:
    """The completed Response object; the job's failure as its HTTP error."""
    return render(await wait_for_job(request, job_id, settings, obs, on_settled))


async def stream_response(request: Request, job_id: uuid.UUID, events: EventStream,
                          settings: Settings, obs: Any, *, background: bool,
                          on_settled: Callable[[], None] | None = None,
                          keepalive_s: float | None = None) -> AsyncIterator[bytes]:
    """The Responses API's events, from ``response.created`` to the final object (or an
    ``error`` event when the stream cannot go on); ``keepalive_s``: a comment line after
    each such quiet stretch (a request in the waiting room)."""
    state = request.app.state
    done = False
    for event in events.start("queued" if background else "in_progress"):
        yield event
    try:
        async for ev in follow_job(state.redis, job_id,
                                   timeout_s=settings.api.request_timeout_seconds,
                                   settled=row_reader(state, job_id),
                                   on_quota_settled=on_settled, keepalive_s=keepalive_s):
            if isinstance(ev, KeepAlive):
                yield KEEPALIVE_COMMENT
            elif isinstance(ev, NewText):
                obs.first_token()
                relay = relay_span(ev)  # ended once the events are sent
                for event in events.delta(ev.text):
                    yield event
                tracing.end(relay)
            elif isinstance(ev, Final):
                job = await final_row(state, job_id)
                obs.finished(ok=True, completion_tokens=job.completion_tokens or 0)
                for event in events.finish(render(job)):
                    yield event
                done = True
            elif isinstance(ev, Failure):
                obs.finished(ok=False)
                yield events.failed({"code": ev.code, "status": ev.status,
                                     "message": ev.message})
                done = True
            elif isinstance(ev, Interrupted):  # the job goes on: don't cancel it
                obs.finished(ok=False)
                yield events.error("stream_interrupted", interrupted_error(ev, job_id).message)
                done = True
            else:  # timeout
                obs.finished(ok=False)
                yield events.error("timeout", "The request timed out.")
    except Exception:  # never end a stream silently: say so, and let the job finish
        log.exception("relaying the response's stream failed", extra={"job_id": str(job_id)})
        obs.finished(ok=False)
        yield events.error("stream_interrupted", interrupted_error(
            Interrupted("The relay failed."), job_id).message)
        done = True
    finally:
        if not done and not background:
            # The client went away (or we timed out): free the engine slot. Detached, because
            # this generator is being cancelled and may not await any more.
            run_detached(cancel_for_client(state, job_id))

"""OpenAI-compatible routes: chat completions and completions (models: model_routes)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from service.adapters.resolve import served_model
from service.api.door import door_of
from service.api.event_stream import EventStream, LastChunk
from service.api.relay import (
    Interrupted,
    KeepAlive,
    NewText,
    cancel_for_client,
    follow_job,
    interrupted_error,
    job_error,
    relay_span,
    row_reader,
    wait_for_job,
)
from service.api.ttft_calibration import calibrating
from service.api.waiting_room import waiting_room_of
from service.jobs.door_request import DoorRequest
from service.jobs.response_format import ResponseFormat
from service.jobs.schemas import ChatCompletionRequest, CompletionRequest
from service.jobs.shapes import ShapeBuilder, sse, usage_dict
from service.observability.requests import NULL_OBSERVER, observe_request
from service.quotas.key_limits import check_model, take_key_limits
from service.spend.stops import BUDGET_OPEN
from service.store import tracing
from service.store.detached import run_detached
from service.store.heartbeats import STRUCTURED_OUTPUTS
from service.store.job_stream import Failure, Final
from service.store.models.tenants import Tenant
from service.store.nul_codec import result_text
from service.store.settings import Settings
from service.store.telemetry.slo_rules import SloTargets
from service.web.deps import CurrentTenant, SessionDep, SettingsDep
from service.web.errors import APIError, error_body
from service.web.request_id import request_started
from service.web.responses import RATE_LIMIT_HEADERS, TENANT_ROUTES, WITH_BODY, errors

log = logging.getLogger("fairway.api")
router = APIRouter(prefix="/v1", responses=TENANT_ROUTES)
# One server-sent event: `data` is a chunk (JSON), an error in OpenAI's shape, or [DONE].
SSE_EVENT = {"type": "object", "required": ["data"], "properties": {"data": {"type": "string"}}}
# A completion answers JSON, or with "stream": true server-sent events; refusals at admission
# (403 service tier, 404 model, 429 quota), no worker for the model within the waiting room
# (503), and a job's own failure, timeout or lost stream.
COMPLETION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The completion (JSON), or its chunks as server-sent events.",
          "content": {"text/event-stream": {"schema": SSE_EVENT}},
          "headers": RATE_LIMIT_HEADERS},
    **errors(403, 404, 429, 503, 504), **WITH_BODY,
}
# A stream waiting for a worker (service.api.waiting_room): a comment line, skipped by clients.
WAITING_COMMENT = b": waiting for a worker\n\n"


@router.post("/chat/completions", response_model=None, responses=COMPLETION_RESPONSES,
             dependencies=[BUDGET_OPEN])
async def chat_completions(body: ChatCompletionRequest, request: Request, response: Response,
                           tenant: CurrentTenant, session: SessionDep, settings: SettingsDep
                           ) -> dict[str, Any] | StreamingResponse:
    return await _submit(request, response, session, settings, tenant, body, chat=True)


@router.post("/completions", response_model=None, responses=COMPLETION_RESPONSES,
             dependencies=[BUDGET_OPEN])
async def completions(body: CompletionRequest, request: Request, response: Response,
                      tenant: CurrentTenant, session: SessionDep, settings: SettingsDep
                      ) -> dict[str, Any] | StreamingResponse:
    return await _submit(request, response, session, settings, tenant, body, chat=False)


async def _submit(request: Request, response: Response, session: Any, settings: Settings,
                  tenant: Tenant, body: ChatCompletionRequest | CompletionRequest, *, chat: bool
                  ) -> dict[str, Any] | StreamingResponse:
    started = time.perf_counter()
    check_model(request, body.model)  # the key's allow-list, before the catalog
    model = await served_model(request, session, tenant, body.model)  # an adapter's: its base
    if not await request.app.state.catalog.has(model):
        raise APIError(404, f"The model '{body.model}' does not exist.",
                       code="model_not_found", param="model")
    await _check_response_format(request, body)
    max_tokens = body.requested_max_tokens() or settings.limits.default_max_tokens
    if max_tokens > settings.limits.max_tokens_limit:
        raise APIError(400, f"max_tokens must be at most {settings.limits.max_tokens_limit}.",
                       code="invalid_value", param="max_tokens")
    req = DoorRequest(tenant, getattr(request.state, "api_key_id", None), model,
                      "chat.completions" if chat else "completions",
                      body.model_dump(mode="json", exclude_none=True), max_tokens,
                      body.deadline_ms, stream=body.stream,
                      arrived_at=request_started(request.scope))
    key = await take_key_limits(request, req,
                                slot_ttl_s=settings.api.request_timeout_seconds + 60)
    entered = await key.guard(door_of(request.app.state).enter(session, req))
    job, admission, classification, now = (entered.job, entered.admission,
                                           entered.classification, entered.now)
    builder = ShapeBuilder(chat=chat, public_id=("chatcmpl-" if chat else "cmpl-") + job.id.hex,
                           created=int(now.timestamp()), model=body.model,
                           service_tier=classification.service_tier)
    obs = observe_request(model=model, tenant=tenant.id, job_class=classification.kind,
                          tier=classification.service_tier, started=started,
                          targets=SloTargets(admission.ttft_target_s, admission.tpot_target_s),
                          deadline_s=(classification.deadline_at - now).total_seconds(),
                          predicted_ttft_s=entered.predicted_ttft_s, job_id=job.public_id)
    obs = calibrating(obs, gate=door_of(request.app.state).gate, model=model,
                      predicted_ttft_s=entered.predicted_ttft_s, started=started)
    watch = await waiting_room_of(request.app.state).enter(job.id, model,
                                                           on_expired=admission.refund)
    if body.stream:
        await watch.before_stream(obs)  # a short wait ends in a real status: 503 or the stream
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        events = _stream(request, job.id, builder, include_usage, settings, obs,
                         on_settled=admission.settled_by_worker, keepalive_s=watch.keepalive_s)
        return EventStream(key.wrap(admission.wrap(obs.wrap(watch.wrap(events)))),
                           media_type="text/event-stream",
                           headers={"Cache-Control": "no-cache",
                                    "X-Fairway-Job": job.public_id,
                                    **admission.headers})
    response.headers.update(admission.headers)
    return await key.around(admission.around(obs.around(watch.around(_wait(
        request, job.id, builder, settings, obs, on_settled=admission.settled_by_worker)))))


async def _wait(request: Request, job_id: uuid.UUID, builder: ShapeBuilder,
                settings: Settings, obs: Any = NULL_OBSERVER,
                on_settled: Callable[[], None] | None = None) -> dict[str, Any]:
    job = await wait_for_job(request, job_id, settings, obs, on_settled)
    return builder.completion(result_text(job.result), job.finish_reason,
                              usage_dict(job.prompt_tokens or 0, job.completion_tokens or 0))


async def _stream(request: Request, job_id: uuid.UUID, builder: ShapeBuilder,
                  include_usage: bool, settings: Settings, obs: Any = NULL_OBSERVER,
                  on_settled: Callable[[], None] | None = None,
                  keepalive_s: float | None = None) -> AsyncIterator[bytes]:
    """The job's chat or text completion chunks. ``on_settled``: called when the job's end
    says its worker settled the quota (``Admission.settled_by_worker``); ``keepalive_s``: a
    comment line after each such quiet stretch (a request in the waiting room)."""
    state = request.app.state
    done = closed = False
    # The role rides on the first content chunk, as in vLLM and OpenAI, so "first chunk" means
    # "first token" to clients and benchmarks alike.
    role_pending = builder.chat
    if keepalive_s is not None:  # held before its headers already: say it is waiting
        yield WAITING_COMMENT
    try:
        async for ev in follow_job(state.redis, job_id,
                                   timeout_s=settings.api.request_timeout_seconds,
                                   settled=row_reader(state, job_id),
                                   on_quota_settled=on_settled, keepalive_s=keepalive_s):
            if isinstance(ev, KeepAlive):
                yield WAITING_COMMENT
                continue
            if isinstance(ev, NewText):
                obs.first_token()
                relay = relay_span(ev)  # ended once the chunk is sent (this generator resumes)
                yield sse(builder.chunk(ev.text, first=role_pending,
                                        with_usage_field=include_usage))
                tracing.end(relay)
                role_pending = False
                continue
            # The end's events, [DONE] included, leave in one write: one send through the
            # middleware and one syscall instead of up to four (the bytes are the same).
            ending: list[bytes] = []
            if isinstance(ev, Final):
                obs.finished(ok=True, completion_tokens=ev.completion_tokens)
                if role_pending:
                    ending.append(sse(builder.chunk("", first=True,
                                                    with_usage_field=include_usage)))
                ending.append(sse(builder.chunk(None if builder.chat else "",
                                                finish_reason=ev.finish_reason,
                                                with_usage_field=include_usage)))
                if include_usage:
                    ending.append(sse(builder.usage_chunk(usage_dict(ev.prompt_tokens,
                                                                     ev.completion_tokens))))
                done = True
            elif isinstance(ev, Failure):
                obs.finished(ok=False)
                ending.append(sse(job_error(ev).body()))
                done = True
            elif isinstance(ev, Interrupted):  # the job goes on: don't cancel it
                obs.finished(ok=False)
                ending.append(sse(interrupted_error(ev, job_id).body()))
                done = True
            else:  # timeout
                obs.finished(ok=False)
                ending.append(sse(error_body("The request timed out.", "timeout_error",
                                             "timeout")))
            ending.append(sse("[DONE]"))
            closed = True
            yield LastChunk(b"".join(ending))  # the relay ends after its end event
    except Exception:  # never end a stream silently: say so, and let the job finish
        log.exception("relaying the job's stream failed", extra={"job_id": str(job_id)})
        obs.finished(ok=False)
        done = True
        yield LastChunk(sse(interrupted_error(Interrupted("The relay failed."), job_id).body()))
    else:
        if not closed:  # the relay always ends with an end event; never leave a stream open
            yield LastChunk(sse("[DONE]"))
    finally:
        if not done:
            # The client went away (or we timed out): free the engine slot. Run detached,
            # because this generator is being cancelled and may not await any more.
            run_detached(cancel_for_client(state, job_id))


async def _check_response_format(request: Request,
                                 body: ChatCompletionRequest | CompletionRequest) -> None:
    """Refuse a structured response_format the engines serving the model cannot honour,
    rather than run it as free text. Unknown (no live worker yet): the worker decides."""
    fmt = body.response_format
    if fmt is None or not fmt.is_structured:
        return
    if await request.app.state.catalog.supports(body.model, STRUCTURED_OUTPUTS) is False:
        raise _unsupported_format(fmt, body.model)


def _unsupported_format(fmt: ResponseFormat, model: str) -> APIError:
    return APIError(400, f"response_format of type '{fmt.type}' is not supported for model "
                         f"'{model}': its engine has no structured-output decoding. Omit "
                         f"response_format, or send {{\"type\": \"text\"}}.",
                    code="unsupported_value", param="response_format")

"""OpenAI's Responses API for text: create (waited, streamed or in the background), retrieve,
cancel (docs/responses.md).

A response is a job with ``endpoint = 'responses'``: admitted, scheduled and run like a chat
completion. A background response is offline work (flex class and priority, the flex
deadline; service.jobs.door_request.classify_background): the request answers at once with the
queued Response, and the client polls ``GET /v1/responses/{id}``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from service.adapters.resolve import served_model
from service.api.door import door_of
from service.api.openai_routes import SSE_EVENT
from service.api.responses_relay import stream_response, wait_response
from service.api.ttft_calibration import calibrating
from service.api.waiting_room import waiting_room_of
from service.jobs.cancel import cancel_own_job
from service.jobs.door_request import DoorRequest
from service.jobs.job_records import get_job, parse_public_id
from service.jobs.response_schemas import ResponseCreate
from service.jobs.response_view import EventStream, ResponseShape, render
from service.observability.requests import NULL_OBSERVER, observe_request
from service.quotas.key_limits import check_model, take_key_limits
from service.spend.stops import BUDGET_OPEN
from service.store.models.jobs import Job
from service.store.response_status import RESPONSES_ENDPOINT
from service.store.telemetry.slo_rules import SloTargets
from service.web.deps import CurrentTenant, RedisDep, SessionDep, SettingsDep
from service.web.errors import APIError
from service.web.request_id import request_started
from service.web.responses import TENANT_ROUTES, WITH_BODY, errors

router = APIRouter(prefix="/v1", responses=TENANT_ROUTES)
CREATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The Response object (JSON), or with \"stream\": true its events "
                         "(server-sent events).",
          "content": {"text/event-stream": {"schema": SSE_EVENT}}},
    **errors(403, 404, 429, 503, 504), **WITH_BODY,
}


@router.post("/responses", response_model=None, responses=CREATE_RESPONSES,
             dependencies=[BUDGET_OPEN])
async def create_response(body: ResponseCreate, request: Request, response: Response,
                          tenant: CurrentTenant, session: SessionDep, settings: SettingsDep
                          ) -> dict[str, Any] | StreamingResponse:
    started = time.perf_counter()
    refused = body.refusal()
    if refused is not None:
        raise refused
    payload = body.stored()  # 400 for input Fairway cannot run (images, files, tool items)
    check_model(request, body.model)  # the key's allow-list, before the catalog
    model = await served_model(request, session, tenant, body.model)  # an adapter's: its base
    if not await request.app.state.catalog.has(model):
        raise APIError(404, f"The model '{body.model}' does not exist.",
                       code="model_not_found", param="model")
    max_tokens = body.max_output_tokens or settings.limits.default_max_tokens
    if max_tokens > settings.limits.max_tokens_limit:
        raise APIError(400, f"max_output_tokens must be at most "
                            f"{settings.limits.max_tokens_limit}.",
                       code="invalid_value", param="max_output_tokens")
    req = DoorRequest(tenant, getattr(request.state, "api_key_id", None), model,
                      RESPONSES_ENDPOINT, payload, max_tokens, body.deadline_ms,
                      stream=body.stream, background=body.background,
                      arrived_at=request_started(request.scope))
    key = await take_key_limits(request, req,
                                slot_ttl_s=settings.api.request_timeout_seconds + 60)
    entered = await key.guard(door_of(request.app.state).enter(session, req))
    job, admission, classification, now = (entered.job, entered.admission,
                                           entered.classification, entered.now)
    shape = ResponseShape.of(job)
    headers = {"X-Fairway-Job": job.public_id, **admission.headers}
    if body.background:
        await admission.detach()  # the job outlives this request; its tokens settle at its end
        await key.release()
        if not body.stream:
            response.headers.update(headers)
            return shape.body("queued")
        return _sse(stream_response(request, job.id, EventStream(shape), settings,
                                    NULL_OBSERVER, background=True), headers)
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
        events = stream_response(request, job.id, EventStream(shape), settings, obs,
                                 background=False, on_settled=admission.settled_by_worker,
                                 keepalive_s=watch.keepalive_s)
        return _sse(key.wrap(admission.wrap(obs.wrap(watch.wrap(events)))), headers)
    response.headers.update(headers)
    return await key.around(admission.around(obs.around(watch.around(wait_response(
        request, job.id, settings, obs, on_settled=admission.settled_by_worker)))))


@router.get("/responses/{response_id}", responses=errors(404))
async def retrieve_response(response_id: str, tenant: CurrentTenant, session: SessionDep
                            ) -> dict[str, Any]:
    return render(await _own_response(session, tenant.id, response_id))


@router.post("/responses/{response_id}/cancel", responses=errors(404, 409))
async def cancel_response(response_id: str, tenant: CurrentTenant, session: SessionDep,
                          redis: RedisDep, settings: SettingsDep) -> dict[str, Any]:
    """Cancel a background response that has not finished (OpenAI cancels only those)."""
    job = await _own_response(session, tenant.id, response_id)
    if not (job.request or {}).get("background"):
        raise APIError(400, "Only responses created with background=true can be cancelled.",
                       code="invalid_value", param="response_id")
    job = await cancel_own_job(session, redis, tenant_id=tenant.id, job_id=job.id,
                               public_id=response_id,
                               stream_ttl_s=settings.jobs.stream_ttl_seconds)
    return render(job)


async def _own_response(session: SessionDep, tenant_id: uuid.UUID, response_id: str) -> Job:
    parsed = parse_public_id(response_id)
    job = await get_job(session, job_id=parsed, tenant_id=tenant_id) if parsed else None
    if job is None or job.endpoint != RESPONSES_ENDPOINT:
        raise APIError(404, f"No response with id '{response_id}'.", code="not_found",
                       param="response_id")
    return job


def _sse(events: Any, headers: dict[str, str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", **headers})

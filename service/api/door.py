"""What every route that creates a job does at the door, in order: an unattainable deadline
is a 400 before any quota is taken; the tenant's quotas admit the request (or its 429 is
counted); the request is classified (realtime, flex, or a background response); realtime that
cannot start within its target is refused now (service.api.slo_gate)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession

from service.api.slo_gate import check_deadline
from service.jobs.tiers import Classification, classify, classify_background
from service.observability.requests import record_refusal
from service.quotas.admission import Admission, admit_request, estimate_prompt_tokens, quota_store
from service.store import tracing
from service.store.models.jobs import JobKind
from service.store.models.tenants import Tenant
from service.store.settings import Settings
from service.store.telemetry.state import record_rejection
from service.web.errors import APIError


@dataclass(frozen=True, slots=True)
class Admitted:
    admission: Admission
    classification: Classification
    now: dt.datetime


@tracing.traced("fairway.api.door")
async def admit(request: Request, session: AsyncSession, settings: Settings, tenant: Tenant, *,
                model: str, payload: dict[str, Any], max_tokens: int, deadline_ms: int | None,
                background: bool = False) -> Admitted:
    if deadline_ms is not None:  # one no load can help: a 400, before any quota is taken
        await check_deadline(request.app.state.slo_gate, model, deadline_ms=deadline_ms,
                             prompt_tokens=estimate_prompt_tokens(payload))
    try:
        admission = await admit_request(session, quota_store(request.app.state), tenant=tenant,
                                        body=payload, max_tokens=max_tokens,
                                        slot_ttl_s=settings.api.request_timeout_seconds + 60)
    except APIError as exc:
        record_refusal(tenant.id, exc)
        raise
    now = dt.datetime.now(dt.UTC)
    if background:
        classification = classify_background(deadline_ms, now=now,
                                             flex_deadline_s=settings.api.flex_deadline_seconds)
    else:
        classification = classify(admission.service_tier, deadline_ms, now=now,
                                  realtime_deadline_s=settings.api.realtime_deadline_seconds,
                                  flex_deadline_s=settings.api.flex_deadline_seconds)
    if classification.kind == JobKind.REALTIME and settings.api.slo_admission:
        await _admit_by_slo(request, admission, model, classification, now, tenant.id)
    return Admitted(admission, classification, now)


def _target_s(classification: Classification, ttft_target_s: float, now: dt.datetime) -> float:
    """What the request is judged by: realtime, its time to first token against its tier's
    target (or its deadline if sooner); flex, the whole answer against its deadline."""
    deadline_s = (classification.deadline_at - now).total_seconds()
    if classification.kind == JobKind.REALTIME:
        return min(ttft_target_s, deadline_s)
    return deadline_s


async def _admit_by_slo(request: Request, admission: Admission, model: str,
                        classification: Classification, now: dt.datetime,
                        tenant_id: uuid.UUID) -> None:
    """Refuse now what cannot start within its target (service.api.slo_gate)."""
    target = _target_s(classification, admission.ttft_target_s, now)
    retry = await request.app.state.slo_gate.check(
        model, prompt_tokens=admission.prompt_estimate, target_s=target)
    if retry is None:
        return
    await admission.release()
    record_rejection(tenant_id, "slo_unattainable")
    raise APIError(429, f"The service is too busy to start this request within its "
                        f"{target:g} s time-to-first-token target; retry in {retry} s.",
                   code="slo_unattainable", headers={"Retry-After": str(retry)},
                   reason="slo_unattainable")

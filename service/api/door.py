"""The door: what every route that creates a job does, in order (``Door.admit``).

1. A deadline no load could meet is a 400, before any quota is taken (service.api.slo_gate).
2. Under overload the fastest refusal reads nothing and awaits nothing: judged by the policy
   this tenant's last request was judged by, or its cached one (a hint), on the outlook this
   process holds (service.api.outlook_poller), before any Postgres or quota round trip. A
   request the hint lets on counts ahead of later looks until step 4 looks at it.
3. The tenant's policy: cached while its policy generation is unchanged, else read (or 403).
4. The SLO gate's first look: realtime that cannot start within its target is refused before
   the quota script runs, so the refusal costs no quota and no Redis round trip. It counts
   nothing: a request its quota then refuses must not make the pool look busier to others.
5. The quota script takes the request's tokens and concurrency slot (or 429), and in the same
   Redis call places a realtime request on the worker of the model's next express ticket and
   sends its hand-off (service.jobs.express_handoff; docs/architecture.md, "The express path").
   Past a rate limit on a plan that overflows, the request runs as flex-class work instead
   (service.quotas.overflow).
6. The gate counts the admission: a placed job without a second look (the lender saw room),
   any other with a counted look that may still refuse it (its quota is given back).

What a cached policy would refuse at 4, or a policy generation the quota script finds moved
on at 5, is judged again from a fresh read (3-6 once more); the script's own refusals stand.
``Door.enter`` then inserts the admitted request's job."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from service.api.slo_gate import SloGate, check_deadline
from service.jobs.door_request import (
    AdmittedSlo,
    Classification,
    DoorRequest,
    classify,
    classify_background,
)
from service.jobs.express_handoff import Ticket, decode_ticket, door_entry, express_for
from service.jobs.job_records import create_job
from service.observability.requests import record_refusal
from service.quotas.door_policy import DoorPolicy
from service.quotas.overflow import overflow_ask, overflow_classification, overflows
from service.quotas.reservation import Admission, QuotaAsk, StalePolicy
from service.store import tracing
from service.store.adapter_names import is_ft_name
from service.store.db import without_transaction
from service.store.models.jobs import Job, JobKind
from service.store.settings import Settings
from service.web.errors import APIError

log = logging.getLogger("fairway.api")


class Policies(Protocol):
    """service.quotas.door_policy.DoorPolicies."""

    def hint(self, req: DoorRequest) -> DoorPolicy | None: ...
    def cached(self, req: DoorRequest) -> DoorPolicy | None: ...
    async def read(self, session: AsyncSession, req: DoorRequest) -> DoorPolicy: ...


class Quotas(Protocol):
    """service.quotas.reservation.RequestQuotas."""

    async def reserve(self, session: AsyncSession, ask: QuotaAsk, door: DoorPolicy,
                      prompt_estimate: int) -> Admission | StalePolicy: ...


@dataclass(frozen=True, slots=True)
class Admitted:
    admission: Admission
    classification: Classification
    now: dt.datetime
    # The express ticket the job was placed with at admission, its hand-off sent: the job is
    # inserted assigned to that worker (``Door.enter``).
    ticket: Ticket | None = None
    # The plan and targets a realtime job is admitted under, stored on its row.
    slo: AdmittedSlo | None = None
    # The gate's predicted time to first token (None: not judged), stored on the row so the
    # prediction can be checked against what came.
    predicted_ttft_s: float | None = None


@dataclass(frozen=True, slots=True)
class Entered:
    """An admitted request and its job, committed."""
    job: Job
    admission: Admission
    classification: Classification
    now: dt.datetime
    predicted_ttft_s: float | None = None  # the gate's, when it judged the request


class Door:
    """One per API process: the steps of the module docstring, each a named collaborator."""

    def __init__(self, settings: Settings, gate: SloGate, policies: Policies,
                 quotas: Quotas) -> None:
        self.settings = settings
        self.gate = gate
        self.policies = policies
        self.quotas = quotas

    async def enter(self, session: AsyncSession, req: DoorRequest) -> Entered:
        """Admit the request and insert its job (the admission is given back if the insert
        fails)."""
        admitted = await self.admit(session, req)
        admission = admitted.admission
        express = express_for(admitted.ticket, self.settings, tenant_weight=req.tenant.weight,
                              ttft_target_s=admission.ttft_target_s,
                              max_wait_s=admission.max_wait_s)
        job = await admission.guard(create_job(
            session, req, job_id=admission.ticket, classification=admitted.classification,
            express=express, slo=admitted.slo, predicted_ttft_s=admitted.predicted_ttft_s))
        self.gate.backlog.stored(req.arrived_at)
        return Entered(job, admission, admitted.classification, admitted.now,
                       admitted.predicted_ttft_s)

    @tracing.traced("fairway.api.door")
    async def admit(self, session: AsyncSession, req: DoorRequest) -> Admitted:
        with self.gate.backlog.in_door():
            return await self._admit(session, req)

    async def _admit(self, session: AsyncSession, req: DoorRequest) -> Admitted:
        now = dt.datetime.now(dt.UTC)
        if req.deadline_ms is not None:
            await check_deadline(self.gate, req.model, deadline_ms=req.deadline_ms,
                                 prompt_tokens=req.prompt_tokens)
        hint = self.policies.hint(req) if self._slo_gated(req) else None
        looked = hint is not None and await self._refuse_on_hint(req, hint, now)
        # Past the hint's look, on its way until the policy's own look: a burst waiting on
        # one policy read would otherwise pass the hint's look whole, and wait to be refused.
        with self._on_the_way(req, looked):
            await without_transaction(session)
        cached = self.policies.cached(req)
        if cached is not None:
            admitted = await self._pass(session, req, cached, now)
            if admitted is not None:
                return admitted
            looked = False  # the cached policy's look refused it: judged again on a read
        try:
            with self._on_the_way(req, looked):
                fresh = await self.policies.read(session, req)
        except APIError as exc:
            self._refuse(req, exc)
        admitted = await self._pass(session, req, fresh, now)
        assert admitted is not None  # only a cached policy is ever judged again
        return admitted

    async def _pass(self, session: AsyncSession, req: DoorRequest, door: DoorPolicy,
                    now: dt.datetime) -> Admitted | None:
        """Steps 4-6 with the policy ``door``; None: it was cached, and the request is to be
        judged again from a fresh read."""
        classification = self._classify(req, door, now)
        gated = self._slo_gated(req) and classification.kind == JobKind.REALTIME
        if gated:
            refused, _ = await self._slo_refusal(req, door, classification, now, count=False)
            if refused is not None:
                if door.cached:
                    return None
                self._refuse(req, refused)
        job_id = uuid.uuid4()
        # An adapter's job goes through the policy, which places it where its adapter is
        # warm; a lent ticket names a worker whatever adapters it holds.
        express = (classification.kind == JobKind.REALTIME and not req.background
                   and self.settings.dispatcher.express_tickets >= 1
                   and adapter_of(req) is None)
        with _handoff_span(job_id) if express else nullcontext() as span:
            # The hand-off entry carries this span's context: the worker's spans continue it.
            ask = QuotaAsk(req.tenant.id, door.policy, req.prompt_tokens + req.max_tokens,
                           job_id, batch=False, hold_slot=True,
                           slot_ttl_s=self.settings.api.request_timeout_seconds + 60,
                           expect_generation=door.generation,
                           express=door_entry(req, job_id, classification.priority)
                           if express else None)
            try:
                # Between the gate's two looks, counted as on its way: a burst whose first
                # looks all pass before any is counted would otherwise reach the quota script
                # whole, and most of it be refused only after (a round trip and a refund each).
                with self.gate.on_the_way(req.model) if gated else nullcontext():
                    admission = await self.quotas.reserve(session, ask, door,
                                                          req.prompt_tokens)
            except APIError as exc:
                if not overflows(exc, ask, classification):
                    self._refuse(req, exc)
                return await self._overflow(session, req, door, ask, classification, now)
        if isinstance(admission, StalePolicy):
            return None
        placed = decode_ticket(admission.express_ticket)
        if span is not None and placed is not None:
            span.set_attribute("fairway.worker_id", placed.worker_id)
        predicted = None
        if gated:
            predicted = await self._count_at_gate(req, door, classification, now, admission,
                                                  placed)
        slo = (AdmittedSlo(door.policy.plan, door.policy.ttft_slo_ms, door.policy.tpot_slo_ms)
               if classification.kind == JobKind.REALTIME else None)
        return Admitted(admission, classification, now, placed, slo, predicted)

    async def _overflow(self, session: AsyncSession, req: DoorRequest, door: DoorPolicy,
                        ask: QuotaAsk, classification: Classification, now: dt.datetime
                        ) -> Admitted | None:
        """Past its rate limits on a plan that overflows: the request runs as flex-class work
        (service.quotas.overflow), its tokens asked again with the rate limits lifted; the
        month still binds. Not gated: flex is the dispatcher's to shed."""
        try:
            admission = await self.quotas.reserve(session, overflow_ask(ask), door,
                                                  req.prompt_tokens)
        except APIError as exc:
            self._refuse(req, exc)
        if isinstance(admission, StalePolicy):
            return None
        log.info("over its rate limits: running as overflow",
                 extra={"tenant_id": str(req.tenant.id), "job_id": str(ask.ticket)})
        return Admitted(admission, overflow_classification(classification), now)

    async def _refuse_on_hint(self, req: DoorRequest, hint: DoorPolicy,
                              now: dt.datetime) -> bool:
        """Step 2. An admission is never taken from the hint: it takes step 3's policy.
        Returns whether the gate looked at the request (and let it on)."""
        classification = self._classify(req, hint, now)
        if classification.kind != JobKind.REALTIME:
            return False
        refused, _ = await self._slo_refusal(req, hint, classification, now, count=False)
        if refused is not None:
            self._refuse(req, refused)
        return True

    def _on_the_way(self, req: DoorRequest, looked: bool) -> AbstractContextManager[None]:
        return self.gate.on_the_way(req.model) if looked else nullcontext()

    async def _count_at_gate(self, req: DoorRequest, door: DoorPolicy,
                             classification: Classification, now: dt.datetime,
                             admission: Admission, placed: Ticket | None) -> float | None:
        """Step 6. A job placed on a lent ticket is only counted: a refusal now would leave
        its worker a hand-off whose row never comes. Any other gets a counted look: with the
        outlook cached it runs without yielding, so a burst the quota admitted at once is
        still counted one by one; refused (the pool filled while the quota answered), the
        request gets its tokens back. Returns the admitted request's predicted TTFT."""
        if placed is not None:
            tenant = str(req.tenant.id)
            predicted = self.gate.predicted_ttft_s(req.model, prompt_tokens=req.prompt_tokens,
                                                   tenant=tenant, weight=req.tenant.weight,
                                                   adapter=adapter_of(req))
            self.gate.count(req.model, tenant)
            return predicted
        try:
            refused, predicted = await self._slo_refusal(req, door, classification, now,
                                                         count=True)
        except BaseException:
            await admission.refund()
            raise
        if refused is not None:
            await admission.refund()
            self._refuse(req, refused)
        return predicted

    async def _slo_refusal(self, req: DoorRequest, door: DoorPolicy,
                           classification: Classification, now: dt.datetime, *,
                           count: bool) -> tuple[APIError | None, float | None]:
        """The 429 for a request that cannot start in time, judged by its tenant's share of
        the queue: in the plan's shed mode, within its TTFT target; in its queue mode, within
        the plan's longest queue wait and its deadline. None: admitted (and, with ``count``,
        counted). Beside it, the predicted TTFT (None: no outlook to judge by)."""
        max_wait_s = door.policy.max_wait_s
        deadline_s = (classification.deadline_at - now).total_seconds()
        target = deadline_s if max_wait_s is not None else _target_s(
            classification, door.ttft_target_s, now)
        verdict = await self.gate.judge(req.model, prompt_tokens=req.prompt_tokens,
                                        target_s=target, count=count,
                                        tenant=str(req.tenant.id), weight=req.tenant.weight,
                                        max_wait_s=max_wait_s, adapter=adapter_of(req),
                                        due_in_s=_target_s(classification, door.ttft_target_s,
                                                           now))
        if verdict is None or verdict.retry_after is None:
            return None, None if verdict is None else verdict.predicted_ttft_s
        retry = verdict.retry_after
        if max_wait_s is not None:
            return APIError(429, f"The service is too busy to start this request within its "
                                 f"plan's longest queue wait ({max_wait_s:g} s) and its "
                                 f"deadline; retry in {retry} s.",
                            code="slo_unattainable", headers={"Retry-After": str(retry)},
                            reason="queue_wait_exceeded"), verdict.predicted_ttft_s
        return APIError(429, f"The service is too busy to start this request within its "
                             f"{target:g} s time-to-first-token target; retry in {retry} s.",
                        code="slo_unattainable", headers={"Retry-After": str(retry)},
                        reason="slo_unattainable"), verdict.predicted_ttft_s

    def _slo_gated(self, req: DoorRequest) -> bool:
        return self.settings.api.slo_admission and not req.background

    def _classify(self, req: DoorRequest, door: DoorPolicy,
                  now: dt.datetime) -> Classification:
        api = self.settings.api
        if req.background:
            return classify_background(req.deadline_ms, now=now,
                                       flex_deadline_s=api.flex_deadline_seconds)
        return classify(door.service_tier, req.deadline_ms, now=now,
                        realtime_deadline_s=api.realtime_deadline_seconds,
                        flex_deadline_s=api.flex_deadline_seconds)

    @staticmethod
    def _refuse(req: DoorRequest, error: APIError) -> NoReturn:
        """Every refusal at the door is counted by its reason, once."""
        record_refusal(req.tenant.id, error)
        raise error


def door_of(state: Any) -> Door:
    door: Door = state.door
    return door


def adapter_of(req: DoorRequest) -> str | None:
    """The LoRA adapter a request names (its body's ft: model; ``req.model`` is the base it
    runs on), as workers' beats and the outlook name warm adapters."""
    model = req.payload.get("model")
    return model if isinstance(model, str) and is_ft_name(model) else None


def _target_s(classification: Classification, ttft_target_s: float, now: dt.datetime) -> float:
    """What the request is judged by: realtime, its time to first token against its plan's
    target (or its deadline if sooner); flex, the whole answer against its deadline."""
    deadline_s = (classification.deadline_at - now).total_seconds()
    if classification.kind == JobKind.REALTIME:
        return min(ttft_target_s, deadline_s)
    return deadline_s


def _handoff_span(job_id: uuid.UUID) -> AbstractContextManager[Any]:
    return tracing.span("fairway.api.handoff", attributes={
        "fairway.job_id": str(job_id), "fairway.job": f"job_{job_id.hex}"})

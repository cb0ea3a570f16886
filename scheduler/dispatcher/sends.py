"""The dispatcher's sends: a pass's assignments claimed in one statement, then handed out (the
realtime hand-off and the preemptions in one Redis pipeline, batch tasks over one Celery
producer), what to do when a send fails, and the policy's refusals written. ``Sender`` is
the dispatcher's collaborator for these (loop.py), apart so each module keeps one job."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager

from celery import Celery
from redis import Redis
from sqlalchemy.orm import Session

from scheduler.dispatcher import handout
from scheduler.dispatcher import metrics as sched_obs
from scheduler.dispatcher.hops import HopTraces
from scheduler.dispatcher.refusals import refusal_message
from scheduler.dispatcher.views import job_view
from scheduler.interface import SchedulingPolicy
from scheduler.types import Assign, Decision, JobClass, Preempt, Reject
from service.store import handoff, job_stream, wakeups
from service.store import job_queries as store
from service.store.db import sync_autocommit_session, sync_session
from service.store.keys import (
    HANDOFF_MAXLEN,
    control_channel,
    handoff_stream,
    stream_key,
    worker_queue,
)
from service.store.outages import is_outage
from service.store.settings import Settings
from service.store.task_queue import RUN_JOB_TASK
from service.store.telemetry.state import record_rejection

log = logging.getLogger("fairway.scheduler")


class Sender:
    """Carries out one leader term's decisions. A term starts from nothing (the dispatcher's
    ``_new_term``), so the dispatcher builds a Sender per term, with that term's policy, hop
    traces and books; the books are the dispatcher's own containers, shared, not copied:

    - ``classes``, ``bodies``: a queued job's class and the engine input its hand-off carries,
      taken here when the job is sent or refused;
    - ``placed``, ``awaiting_first``: where each sent job runs, and the realtime ones still
      without their first token, written here when a job is sent or booked;
    - ``requeued``: what the dispatcher does with a job that goes back to the queue (it
      arrives again).

    The connections (``redis``, ``celery``) and ``settings`` outlive the term; they are
    handed in so that every term's Sender uses the dispatcher's own. ``claims`` opens the
    session a pass's claims go through: the term's lock session (leader.Leadership.writes),
    so that a dispatcher that lost the lock places nothing; None: the pool's."""

    def __init__(self, settings: Settings, redis: Redis, celery: Celery, *,
                 policy: SchedulingPolicy, hops: HopTraces, classes: dict[str, JobClass],
                 bodies: dict[str, handoff.JobBody], placed: dict[str, tuple[str, JobClass]],
                 awaiting_first: set[str],
                 requeued: Callable[[store.QueuedJob], None],
                 claims: Callable[[], AbstractContextManager[Session]] | None = None) -> None:
        self.settings = settings
        self.redis = redis
        self.celery = celery
        self.policy = policy
        self.hops = hops
        self.classes = classes
        self.bodies = bodies
        self.placed = placed
        self.awaiting_first = awaiting_first
        self.requeued = requeued
        self.claims = claims or (lambda: sync_autocommit_session(settings.database_url))

    # -- a pass's decisions, carried out ---------------------------------------------------------
    def act(self, decisions: list[Decision]) -> None:
        if not decisions:
            return
        assigns = [d for d in decisions if isinstance(d, Assign)]
        preempts = [d for d in decisions if isinstance(d, Preempt)]
        rejects = [d for d in decisions if isinstance(d, Reject)]
        if assigns or preempts:  # one claim statement (and an unclaim each if a send fails)
            with self.claims() as session:
                self.assign_all(session, assigns, preempts)
        if rejects:
            with sync_session(self.settings.database_url) as session:
                for decision in rejects:
                    self._reject(session, decision)

    def assign_all(self, session: Session, assigns: list[Assign],
                   preempts: list[Preempt]) -> None:
        """Every assignment of the pass claimed in one statement (committed before anything is
        sent), then the realtime hand-offs and the preemptions in one Redis pipeline, then the
        batch tasks over one Celery producer."""
        classes = {a.job_id: self.classes.pop(a.job_id, JobClass.REALTIME) for a in assigns}
        bodies = {a.job_id: self.bodies.pop(a.job_id, None) for a in assigns}
        with self.hops.sending(assigns) as traces:  # the send hops: claim and message
            attempts = store.claim_jobs(session, placements=handout.placements(assigns),
                                        lease_s=self.settings.jobs.lease_seconds) if assigns else {}
            plan = handout.plan_sends(assigns, attempts, classes, traces, bodies)
            for lost in plan.lost:  # cancelled (or claimed) since the policy saw it
                self.policy.on_job_finished(lost.job_id, lost.worker_id, 0, 0)
            self._send_realtime(session, plan.realtime, preempts)
            self._send_batch(session, plan.batch)

    def _send_realtime(self, session: Session, placed: list[handout.Placed],
                       preempts: list[Preempt]) -> None:
        if not placed and not preempts:
            return
        for decision in preempts:
            log.info("preempting %s on %s: %s", decision.job_id, decision.worker_id,
                     decision.reason)
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                for job in placed:
                    pipe.xadd(handoff_stream(job.worker_id), handoff.encode(handoff.Handoff(
                        job.job_id, job.attempt, job.trace, job.body)),  # type: ignore[arg-type]
                        maxlen=HANDOFF_MAXLEN, approximate=True)
                for decision in preempts:  # the victim's room is already free to the policy
                    pipe.publish(control_channel(decision.worker_id),
                                 wakeups.encode_command(wakeups.PreemptJob(decision.job_id)))
                pipe.execute()
        except Exception as exc:
            if is_outage(exc):  # Redis is away: give the claims back now, not at lease end
                self._unclaim(session, placed)
            raise
        for job in placed:
            self.placed[job.job_id] = (job.worker_id, job.job_class)
            self._note_awaiting(job.job_id)

    def _send_batch(self, session: Session, placed: list[handout.Placed]) -> None:
        if not placed:
            return
        sent = 0
        try:
            with self.celery.producer_or_acquire() as producer:
                for job in placed:
                    # The send hop's W3C headers ride in the message (the worker's Celery
                    # instrumentation continues them); Celery's sender-side instrumentation
                    # is not used: for a task sent by name it never ends its span.
                    self.celery.send_task(RUN_JOB_TASK, args=[job.job_id, job.attempt],
                                          queue=worker_queue(job.worker_id), producer=producer,
                                          headers=job.trace or None)
                    self.placed[job.job_id] = (job.worker_id, job.job_class)
                    sent += 1
        except Exception as exc:
            if is_outage(exc):  # the broker is away: give the claims back now
                self._unclaim(session, placed[sent:])
            raise

    def _unclaim(self, session: Session, placed: list[handout.Placed]) -> None:
        for job in placed:
            store.unclaim_job(session, job_id=uuid.UUID(job.job_id), attempt=job.attempt,
                              worker_id=job.worker_id)

    def _reject(self, session: Session, decision: Reject) -> None:
        retry = max(1, round(decision.retry_after_s))
        self.classes.pop(decision.job_id, None)
        self.bodies.pop(decision.job_id, None)
        self.hops.forget(decision.job_id)
        record_rejection(None, "slo_unattainable")
        message = refusal_message(decision.reason, retry)
        log.info("job refused by the policy", extra={"job_id": decision.job_id,
                                                      "reason": decision.reason})
        if store.reject_job(session, job_id=uuid.UUID(decision.job_id), status=429,
                            code="slo_unattainable", message=message):
            self.redis.xadd(stream_key(decision.job_id), job_stream.fields(job_stream.Failure(
                0, 429, "slo_unattainable", message, retry_after=retry)))

    # -- jobs the API placed at insert (express) -------------------------------------------------
    def book_placed(self, job: store.QueuedJob, worker_id: str) -> bool:
        """The policy counts a placed job where it runs; False when it cannot hold it there
        (its worker was lost meanwhile): the caller then ``requeue_placed``s it."""
        job_id = str(job.job_id)
        if not self.policy.on_job_placed(job_view(job), worker_id):
            return False
        self.placed[job_id] = (worker_id, JobClass.REALTIME)
        self._note_awaiting(job_id)
        sched_obs.observe_express_placed()
        return True

    def requeue_placed(self, session: Session, job_id: uuid.UUID, attempt: int,
                       worker_id: str) -> None:
        """A placed job the policy cannot hold goes back to the queue for a pass to place,
        unless it started there meanwhile (it runs on; its end frees nothing we counted)."""
        if store.unclaim_job(session, job_id=job_id, attempt=attempt, worker_id=worker_id):
            log.warning("express job %s placed on %s, which the policy does not have; "
                        "queued again", job_id, worker_id)
            for job in store.fetch_queued(session, job_ids=[job_id]):
                self.requeued(job)
        else:
            log.warning("express job %s runs on %s, unknown to the policy", job_id, worker_id)

    def _note_awaiting(self, job_id: str) -> None:
        """A realtime job just sent waits for its first token (the dispatcher's
        ``_refresh_first_tokens``)."""
        placed = self.placed.get(job_id)
        if placed is not None and placed[1] is JobClass.REALTIME:
            self.awaiting_first.add(job_id)

"""First tokens, token stream -> dispatcher -> policy: realtime the dispatcher placed is counted
as prefill queued in the engines until the worker writes its token stream (its first token;
admission, scheduler/policies/admission.py), against real Redis."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import delete

from scheduler.dispatcher.loop import Dispatcher
from scheduler.policies import FairwayPolicy
from service.store import lifecycle
from service.store.db import sync_session
from service.store.keys import stream_key
from service.store.models.jobs import Job, JobKind, JobStatus
from service.store.settings import Settings


class RecordingPolicy(FairwayPolicy):
    def __init__(self) -> None:
        super().__init__()
        self.first: list[str] = []

    def on_first_token(self, job_id: str) -> None:
        self.first.append(job_id)
        super().on_first_token(job_id)


def _running_job(tenant_id: uuid.UUID, first_token: bool) -> Job:
    now = dt.datetime.now(dt.UTC)
    job = lifecycle.new_job(tenant_id=tenant_id, kind=JobKind.REALTIME, service_tier="default",
                            priority=1, endpoint="chat.completions", model="ft-model",
                            request={"messages": []}, stream=True, max_tokens=8)
    job.status, job.attempt, job.worker_id = JobStatus.RUNNING, 1, "ft-worker"
    job.lease_expires_at = now + dt.timedelta(hours=1)
    job.first_token_at = now if first_token else None
    return job


def test_the_dispatcher_tells_the_policy_which_placed_realtime_has_its_first_token(
        settings: Settings, make_tenant) -> None:  # type: ignore[no-untyped-def]
    tenant_id, _ = make_tenant("ft")
    with sync_session(settings.database_url) as session:
        started, waiting = _running_job(tenant_id, True), _running_job(tenant_id, False)
        session.add_all([started, waiting])
        session.commit()
        ids = [started.id, waiting.id]
    policy = RecordingPolicy()
    dispatcher = Dispatcher(settings, policy)
    dispatcher.redis.xadd(stream_key(started.id), {"delta": "hi"})  # its first token
    try:
        dispatcher.awaiting_first = {str(started.id), str(waiting.id)}
        dispatcher._refresh_first_tokens()
        assert policy.first == [str(started.id)]
        assert dispatcher.awaiting_first == {str(waiting.id)}
        dispatcher._refresh_first_tokens()  # within the cadence: no second read
        assert policy.first == [str(started.id)]
        dispatcher._release(str(waiting.id))  # ended without one: no longer awaited
        assert dispatcher.awaiting_first == set()
    finally:
        dispatcher.redis.delete(stream_key(started.id))
        with sync_session(settings.database_url) as session:
            session.execute(delete(Job).where(Job.id.in_(ids)))
            session.commit()

"""The dispatcher carries out a pass's assignments together: one claim for all of them, the
realtime ones as hand-off entries on their workers' streams, the batch ones as Celery tasks on
their workers' queues, and what the claim left out back to the policy."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from redis import Redis
from sqlalchemy import delete, select

from scheduler.dispatcher.loop import Dispatcher
from scheduler.types import Assign, JobClass
from service.store import handoff, lifecycle
from service.store.db import sync_session
from service.store.keys import handoff_stream, worker_queue
from service.store.models.jobs import Job, JobKind
from service.store.models.tenants import Tenant
from service.store.settings import Settings


class Finished:
    """Records what the dispatcher gives back to the policy."""

    def __init__(self) -> None:
        self.finished: list[tuple[str, str]] = []

    def on_job_finished(self, job_id: str, worker_id: str, *_: Any) -> None:
        self.finished.append((job_id, worker_id))


def _queued(settings: Settings, kinds: list[JobKind]) -> list[str]:
    """Committed jobs of a new tenant (``_drop_tenant`` removes them): for a model no worker
    serves, so left behind they would sit queued in the session's stack for good, and its
    scheduler's queue gauge with them (test_metrics)."""
    with sync_session(settings.database_url) as session:
        tenant = Tenant(name=f"ds-{uuid.uuid4().hex[:10]}")
        session.add(tenant)
        session.flush()
        jobs = [lifecycle.new_job(tenant_id=tenant.id, kind=kind, service_tier="default",
                                  priority=1, endpoint="chat.completions", model="m",
                                  request={"messages": []}, stream=True, max_tokens=4)
                for kind in kinds]
        session.add_all(jobs)
        session.commit()
        return [str(j.id) for j in jobs]


def test_a_pass_is_claimed_at_once_then_handed_off_or_queued(settings: Settings) -> None:
    suffix = uuid.uuid4().hex[:6]
    w1, w2 = f"ds-a-{suffix}", f"ds-b-{suffix}"
    rt1, rt2, rt3, bt, gone = _queued(settings, [JobKind.REALTIME] * 3 + [JobKind.BATCH,
                                                                          JobKind.REALTIME])
    with sync_session(settings.database_url) as session:
        session.execute(lifecycle.cancel(Job.id == uuid.UUID(gone),
                                         now=dt.datetime.now(dt.UTC)))
        session.commit()
    policy = Finished()
    dispatcher = Dispatcher(settings, policy)  # type: ignore[arg-type]
    dispatcher.classes.update({rt1: JobClass.REALTIME, rt2: JobClass.REALTIME,
                               rt3: JobClass.REALTIME, bt: JobClass.BATCH,
                               gone: JobClass.REALTIME})
    redis = Redis.from_url(settings.redis_url)
    try:
        dispatcher.sender.act([Assign(rt1, w1), Assign(rt2, w2), Assign(bt, w1),
                               Assign(gone, w2), Assign(rt3, w1)])
        entries = {w: [handoff.decode(f) for _, f in redis.xrange(handoff_stream(w))]
                   for w in (w1, w2)}
        assert entries == {w1: [handoff.Handoff(rt1, 1), handoff.Handoff(rt3, 1)],
                           w2: [handoff.Handoff(rt2, 1)]}
        assert redis.llen(worker_queue(w1)) == 1 and redis.llen(worker_queue(w2)) == 0
        assert policy.finished == [(gone, w2)]
        assert dispatcher.placed == {rt1: (w1, JobClass.REALTIME), rt2: (w2, JobClass.REALTIME),
                                     rt3: (w1, JobClass.REALTIME), bt: (w1, JobClass.BATCH)}
        with sync_session(settings.database_url) as session:
            rows = session.execute(select(Job.id, Job.worker_id).where(
                Job.id.in_([uuid.UUID(j) for j in (rt1, rt2, rt3, bt, gone)]))).all()
        assert {str(r.id): r.worker_id for r in rows} == {rt1: w1, rt2: w2, rt3: w1, bt: w1,
                                                        gone: None}
    finally:
        redis.delete(handoff_stream(w1), handoff_stream(w2), worker_queue(w1), worker_queue(w2))
        with sync_session(settings.database_url) as session:  # its jobs go with it (cascade)
            session.execute(delete(Tenant).where(Tenant.id == select(Job.tenant_id).where(
                Job.id == uuid.UUID(rt1)).scalar_subquery()))
            session.commit()

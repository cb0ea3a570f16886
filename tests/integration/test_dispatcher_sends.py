"""The dispatcher carries out a pass's assignments together: one claim for all of them, the
realtime ones as hand-off entries on their workers' streams, the batch ones as Celery tasks on
their workers' queues, and what the claim left out back to the policy. Its ``Sender`` also
gives the claims back when a send finds Redis or the broker away, publishes preemptions,
writes refusals, and books or re-queues jobs the API placed at insert."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
import uuid
from typing import Any

import pytest
from kombu.exceptions import OperationalError as KombuOperationalError
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy import delete, select

from scheduler.dispatcher.hops import HopTraces
from scheduler.dispatcher.loop import Dispatcher
from scheduler.dispatcher.sends import Sender
from scheduler.policies import FairwayPolicy
from scheduler.types import Assign, JobClass, Preempt, Reject, WorkerView
from service.store import handoff, job_stream, lifecycle, wakeups
from service.store import job_queries as store
from service.store.db import sync_autocommit_session, sync_session
from service.store.keys import control_channel, handoff_stream, stream_key, worker_queue
from service.store.models.jobs import Job, JobKind
from service.store.models.tenants import Tenant
from service.store.settings import Settings
from service.store.task_queue import make_celery


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
        _drop_tenant(settings, rt1)


def _drop_tenant(settings: Settings, job_id: str) -> None:
    """The tenant of ``job_id`` (from ``_queued``), and its jobs with it (cascade)."""
    with sync_session(settings.database_url) as session:
        session.execute(delete(Tenant).where(Tenant.id == select(Job.tenant_id).where(
            Job.id == uuid.UUID(job_id)).scalar_subquery()))
        session.commit()


def _rows(settings: Settings, job_ids: list[str]) -> dict[str, tuple[str, str | None]]:
    """Each job's status and worker."""
    with sync_session(settings.database_url) as session:
        rows = session.execute(select(Job.id, Job.status, Job.worker_id).where(
            Job.id.in_([uuid.UUID(j) for j in job_ids]))).all()
    return {str(r.id): (str(r.status), r.worker_id) for r in rows}


def _sender(settings: Settings, policy: Any, *, redis: Redis | None = None,
            celery: Any = None, requeued: list[str] | None = None) -> Sender:
    """A Sender on fresh books, as a new term's; ``requeued`` collects what arrives again."""
    arrived = requeued if requeued is not None else []
    return Sender(settings, redis or Redis.from_url(settings.redis_url),
                  celery or make_celery(settings), policy=policy, hops=HopTraces(),
                  classes={}, bodies={}, placed={}, awaiting_first=set(),
                  requeued=lambda job: arrived.append(str(job.job_id)))


def _claim(settings: Settings, job_id: str, worker_id: str) -> None:
    """The job assigned to ``worker_id``, as the API's express path leaves it."""
    with sync_autocommit_session(settings.database_url) as session:
        assert store.claim_jobs(session, placements=[(uuid.UUID(job_id), worker_id)],
                                lease_s=60.0)


def test_a_realtime_send_that_finds_redis_away_gives_its_claims_back(
        settings: Settings) -> None:
    rt1, rt2 = _queued(settings, [JobKind.REALTIME] * 2)
    away = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    sender = _sender(settings, Finished(), redis=away)
    try:
        with pytest.raises(RedisConnectionError):
            sender.act([Assign(rt1, "ds-w"), Assign(rt2, "ds-w")])
        # Queued again at once, not left assigned until their leases run out.
        assert _rows(settings, [rt1, rt2]) == {rt1: ("queued", None), rt2: ("queued", None)}
        assert sender.placed == {} and sender.awaiting_first == set()
    finally:
        _drop_tenant(settings, rt1)


class BrokerGoneAfterOne:
    """A Celery app whose broker takes one task, then is away."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def producer_or_acquire(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def send_task(self, _name: str, *, args: list[Any], **_: Any) -> None:
        if self.sent:
            raise KombuOperationalError("Error 111 connecting to 127.0.0.1:6379")
        self.sent.append(args[0])


def test_a_batch_send_that_loses_the_broker_gives_back_only_the_unsent_claims(
        settings: Settings) -> None:
    bt1, bt2, bt3 = _queued(settings, [JobKind.BATCH] * 3)
    broker = BrokerGoneAfterOne()
    sender = _sender(settings, Finished(), celery=broker)
    sender.classes.update({bt1: JobClass.BATCH, bt2: JobClass.BATCH, bt3: JobClass.BATCH})
    try:
        with pytest.raises(KombuOperationalError):
            sender.act([Assign(bt1, "ds-w"), Assign(bt2, "ds-w"), Assign(bt3, "ds-w")])
        assert broker.sent == [bt1]  # its task is out: it stays claimed, and placed
        assert _rows(settings, [bt1, bt2, bt3]) == {
            bt1: ("assigned", "ds-w"), bt2: ("queued", None), bt3: ("queued", None)}
        assert sender.placed == {bt1: ("ds-w", JobClass.BATCH)}
        assert sender.awaiting_first == set()  # batch waits for no first token
    finally:
        _drop_tenant(settings, bt1)


def test_a_preemption_is_published_on_the_victims_worker(settings: Settings) -> None:
    worker = f"ds-p-{uuid.uuid4().hex[:6]}"
    redis = Redis.from_url(settings.redis_url)
    with redis.pubsub() as pubsub:
        pubsub.subscribe(control_channel(worker))
        assert pubsub.get_message(timeout=2.0) is not None  # the subscription's reply
        _sender(settings, Finished()).act([Preempt("job-1", worker, "room for realtime")])
        message = pubsub.get_message(timeout=2.0)
    assert message is not None
    assert wakeups.decode_command(message["data"]) == wakeups.PreemptJob("job-1")


def test_a_refusal_fails_the_job_and_tells_its_stream_when_to_retry(
        settings: Settings) -> None:
    (rt,) = _queued(settings, [JobKind.REALTIME])
    sender = _sender(settings, Finished())
    sender.classes[rt] = JobClass.REALTIME
    redis = Redis.from_url(settings.redis_url)
    try:
        sender.act([Reject(rt, "ttft_slo_unreachable", 2.4)])
        assert _rows(settings, [rt]) == {rt: ("failed", None)}
        entries = [job_stream.parse(f) for _, f in redis.xrange(stream_key(rt))]
        assert len(entries) == 1
        failure = entries[0]
        assert isinstance(failure, job_stream.Failure)
        assert (failure.status, failure.code, failure.retry_after) == (
            429, "slo_unattainable", 2)
        assert "ttft_slo_unreachable" not in failure.message  # a sentence, not the code
        assert sender.classes == {}
    finally:
        redis.delete(stream_key(rt))
        _drop_tenant(settings, rt)


def _policy_with(worker_id: str | None) -> FairwayPolicy:
    policy = FairwayPolicy()
    if worker_id is not None:
        policy.on_worker_heartbeat(WorkerView(worker_id, ("m",), 4, 0, 100_000, 0, time.time()))
    return policy


def test_a_job_placed_at_insert_is_booked_on_its_worker(settings: Settings) -> None:
    (rt,) = _queued(settings, [JobKind.REALTIME])
    worker = "ds-express"
    _claim(settings, rt, worker)
    requeued: list[str] = []
    policy = _policy_with(worker)
    sender = _sender(settings, policy, requeued=requeued)
    try:
        with sync_autocommit_session(settings.database_url) as session:
            (job,) = store.fetch_placed(session, job_ids=[uuid.UUID(rt)])  # as its NOTIFY says
            assert sender.book_placed(job, worker)
        assert sender.placed == {rt: (worker, JobClass.REALTIME)}
        assert sender.awaiting_first == {rt}
        assert policy.worker_of(rt) == worker and requeued == []
    finally:
        _drop_tenant(settings, rt)


def test_a_job_placed_on_a_worker_the_policy_lost_is_queued_again(settings: Settings) -> None:
    (rt,) = _queued(settings, [JobKind.REALTIME])
    _claim(settings, rt, "ds-lost")
    requeued: list[str] = []
    sender = _sender(settings, _policy_with(None), requeued=requeued)
    try:
        with sync_autocommit_session(settings.database_url) as session:
            (job,) = store.fetch_placed(session, job_ids=[uuid.UUID(rt)])
            assert not sender.book_placed(job, "ds-lost")  # the dispatcher then queues it again
            sender.requeue_placed(session, job.job_id, job.attempt, "ds-lost")
        assert _rows(settings, [rt]) == {rt: ("queued", None)}
        assert requeued == [rt]  # it arrives again, for a pass to place
        assert sender.placed == {} and sender.awaiting_first == set()
    finally:
        _drop_tenant(settings, rt)

"""Webhook events and their delivery against real Postgres and a real HTTP receiver on
127.0.0.1 that verifies signatures with `standardwebhooks`: the outbox row commits or rolls
back with the batch's status; a receiver down for a while gets every event once it is up; no
loss when the delivery loop stops mid-way and a new one takes over, or when a sender dies
holding a claim; two loops never send one delivery twice; a delivery fails after its window.

A database of its own: the shared one's dispatcher would deliver our events itself."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, func, select, text, update

from service.cli.bootstrap import create_tenant_with_key
from service.store import batch_lifecycle as batches
from service.store.batch_lifecycle import BatchEvent, IllegalBatchMove
from service.store.db import sync_engine, sync_session
from service.store.models.batches import Batch, BatchStatus
from service.store.models.webhooks import (
    DeliveryStatus,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from service.store.settings import Settings, WebhookSettings
from service.store.telemetry.metrics import REGISTRY
from service.store.webhook_events import record_event
from service.webhooks.delivery import WebhookSender, claim, sweep_old_events
from service.webhooks.signing import new_secret
from tests.support.services import create_database, drop_database
from tests.support.webhook_receiver import Receiver

FAST = WebhookSettings(timeout_seconds=1, backoff_base_seconds=0.2, backoff_max_seconds=0.5,
                       retry_window_seconds=120, poll_seconds=0.05, concurrency=4,
                       allow_private=True)  # the receivers are on 127.0.0.1


@pytest.fixture(scope="module")
def settings(test_redis_url: str) -> Iterator[Settings]:
    url = create_database("fairway_webhooks")
    yield Settings(database_url=url, redis_url=test_redis_url, webhooks=FAST)
    sync_engine(url).dispose()
    drop_database(url)


@pytest.fixture(autouse=True)
def no_endpoints_left(settings: Settings) -> Iterator[None]:
    """Each test's loops see only its own deliveries."""
    yield
    with sync_session(settings.database_url) as session:
        session.execute(delete(WebhookEndpoint))
        session.commit()


@pytest.fixture
def tenant(settings: Settings) -> uuid.UUID:
    tenant_id, _ = create_tenant_with_key(settings, f"wh-{uuid.uuid4().hex[:8]}")
    return tenant_id


def add_endpoint(settings: Settings, tenant_id: uuid.UUID, url: str,
                 event_types: tuple[str, ...] = ("batch.completed", "batch.failed"),
                 enabled: bool = True, secret: str | None = None) -> WebhookEndpoint:
    with sync_session(settings.database_url) as session:
        ep = WebhookEndpoint(tenant_id=tenant_id, url=url, event_types=list(event_types),
                             enabled=enabled, secret=secret or new_secret())
        session.add(ep)
        session.commit()
        return ep


def emit(settings: Settings, tenant_id: uuid.UUID, n: int) -> list[str]:
    with sync_session(settings.database_url) as session:
        ids = [record_event(session, tenant_id, "batch.completed", {"id": f"batch_{i}"})
               for i in range(n)]
        session.commit()
    return ids


def deliveries(settings: Settings, endpoint_id: uuid.UUID) -> list[WebhookDelivery]:
    with sync_session(settings.database_url) as session:
        return list(session.scalars(select(WebhookDelivery).where(
            WebhookDelivery.endpoint_id == endpoint_id).order_by(WebhookDelivery.id)).all())


class Loop:
    """A delivery loop ticking on a thread, as the dispatcher's maintenance would call it."""

    def __init__(self, settings: Settings) -> None:
        self.sender = WebhookSender(settings)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sender.tick()
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sender.close()


def wait_for(check, timeout_s: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def counted(outcome: str) -> float:
    value: float = REGISTRY.get_sample_value("fairway_webhook_attempts_total",
                                             {"outcome": outcome}) or 0.0
    return value


def validating_batch(settings: Settings, tenant_id: uuid.UUID) -> uuid.UUID:
    now = dt.datetime.now(dt.UTC)
    with sync_session(settings.database_url) as session:
        batch = batches.new_batch(now=now, tenant_id=tenant_id, endpoint="/v1/chat/completions",
                                  completion_window="24h", expires_at=now + dt.timedelta(hours=1))
        session.add(batch)
        session.commit()
        return batch.id


def test_the_event_commits_and_rolls_back_with_the_batch_status(settings: Settings,
                                                                  tenant: uuid.UUID):
    subscribed = add_endpoint(settings, tenant, "http://127.0.0.1:9/a")
    disabled = add_endpoint(settings, tenant, "http://127.0.0.1:9/b", enabled=False)
    other_types = add_endpoint(settings, tenant, "http://127.0.0.1:9/c",
                               event_types=("batch.expired",))
    batch_id = validating_batch(settings, tenant)

    def events() -> int:
        with sync_session(settings.database_url) as s:
            return s.scalar(select(func.count()).select_from(WebhookEvent).where(
                WebhookEvent.data["id"].astext == "batch_" + batch_id.hex)) or 0

    with sync_session(settings.database_url) as session:
        batch = batches.lock(session, batch_id, BatchEvent.REFUSED)
        assert batch is not None
        batches.advance(batch, BatchEvent.REFUSED, dt.datetime.now(dt.UTC))
        session.flush()
        assert session.scalar(select(func.count()).select_from(WebhookEvent).where(
            WebhookEvent.tenant_id == tenant)) == 1  # written, inside the transaction
        session.rollback()  # the status change fails: its event goes with it
    assert events() == 0 and deliveries(settings, subscribed.id) == []
    with sync_session(settings.database_url) as session:
        assert session.get(Batch, batch_id).status == BatchStatus.VALIDATING  # type: ignore[union-attr]

    with sync_session(settings.database_url) as session:
        batch = batches.lock(session, batch_id, BatchEvent.REFUSED)
        assert batch is not None
        batches.advance(batch, BatchEvent.REFUSED, dt.datetime.now(dt.UTC))
        session.commit()
        failed_at = batch.failed_at
        event = session.scalars(select(WebhookEvent).where(WebhookEvent.tenant_id == tenant)).one()
    assert events() == 1
    assert (event.type, event.data, event.created_at) == (
        "batch.failed", {"id": "batch_" + batch_id.hex}, failed_at)
    [delivery] = deliveries(settings, subscribed.id)
    assert (delivery.event_id, delivery.status, delivery.attempts) == (event.id, "pending", 0)
    assert deliveries(settings, disabled.id) == deliveries(settings, other_types.id) == []


def test_final_moves_cannot_skip_the_outbox():
    for event in batches.WEBHOOK_EVENTS:
        with pytest.raises(IllegalBatchMove):
            batches.guarded(event, now=dt.datetime.now(dt.UTC))


def test_a_receiver_down_for_a_while_gets_every_event(settings: Settings, tenant: uuid.UUID):
    receiver = Receiver()
    ep = add_endpoint(settings, tenant, receiver.url)
    receiver.secrets.append(ep.secret)
    ids = emit(settings, tenant, 12)
    loop = Loop(settings)
    try:
        wait_for(lambda: all(d.attempts >= 2 for d in deliveries(settings, ep.id)))
        receiver.start()  # up at last
        wait_for(lambda: set(receiver.event_ids()) == set(ids))
        wait_for(lambda: all(d.status == "delivered" for d in deliveries(settings, ep.id)))
    finally:
        loop.stop()
        receiver.stop()
    assert receiver.refused == 0
    for d in deliveries(settings, ep.id):
        assert d.attempts == len(d.log) >= 3 and d.last_status_code == 200
        assert all(a["status_code"] is None and "ConnectError" in a["error"]
                   and a["next_attempt_at"] for a in d.log[:-1])
        assert d.log[-1]["status_code"] == 200 and d.log[-1]["next_attempt_at"] is None
    first = receiver.received[0]
    assert first.headers["webhook-id"] == first.event["id"]
    assert abs(int(first.headers["webhook-timestamp"]) - time.time()) < 60  # signed when sent


def test_no_loss_when_the_loop_stops_midway_and_a_new_one_takes_over(settings: Settings,
                                                                      tenant: uuid.UUID):
    receiver = Receiver(delay_s=0.15).start()
    ep = add_endpoint(settings, tenant, receiver.url)
    receiver.secrets.append(ep.secret)
    ids = emit(settings, tenant, 30)
    first = Loop(settings)
    try:
        wait_for(lambda: len(receiver.received) >= 5)
    finally:
        first.stop()
    midway = len(receiver.received)
    assert midway < len(ids), "the first loop was stopped with work left"
    second = Loop(settings)
    try:
        wait_for(lambda: set(receiver.event_ids()) == set(ids))
    finally:
        second.stop()
        receiver.stop()
    assert max(receiver.event_ids().values()) == 1  # a graceful stop records what it sent
    assert {d.status for d in deliveries(settings, ep.id)} == {"delivered"}


def test_a_claim_whose_sender_died_is_sent_again_after_its_lease(settings: Settings,
                                                                tenant: uuid.UUID):
    receiver = Receiver().start()
    ep = add_endpoint(settings, tenant, receiver.url)
    receiver.secrets.append(ep.secret)
    [event_id] = emit(settings, tenant, 1)
    with sync_session(settings.database_url) as session:  # a sender claims it, then dies
        assert len(claim(session, now=dt.datetime.now(dt.UTC), limit=10,
                         settings=settings.webhooks)) == 1
    sender = WebhookSender(settings)
    try:
        assert sender.run_until_idle() == 0  # held by the dead sender's lease
        later = WebhookSender(settings, clock=lambda: dt.datetime.now(dt.UTC)
                              + dt.timedelta(seconds=60))
        assert later.run_until_idle() == 1  # the lease is over: sent again
        later.close()
    finally:
        sender.close()
        receiver.stop()
    assert receiver.event_ids() == {event_id: 1}
    [d] = deliveries(settings, ep.id)
    assert d.status == "delivered" and d.attempts == 2 and len(d.log) == 1


def test_two_loops_never_send_one_delivery_twice(settings: Settings, tenant: uuid.UUID):
    receiver = Receiver(delay_s=0.05).start()
    ep = add_endpoint(settings, tenant, receiver.url)
    receiver.secrets.append(ep.secret)
    ids = emit(settings, tenant, 40)
    loops = [Loop(settings), Loop(settings)]
    try:
        wait_for(lambda: set(receiver.event_ids()) == set(ids))
    finally:
        for loop in loops:
            loop.stop()
        receiver.stop()
    assert max(receiver.event_ids().values()) == 1
    assert all(d.attempts == 1 for d in deliveries(settings, ep.id))


def test_a_delivery_fails_once_its_retry_window_is_over(settings: Settings, tenant: uuid.UUID):
    receiver = Receiver(status=500).start()
    ep = add_endpoint(settings, tenant, receiver.url)
    receiver.secrets.append(ep.secret)
    emit(settings, tenant, 1)
    before = {o: counted(o) for o in ("retry", "failed")}
    sender = WebhookSender(settings.with_changes(webhooks={"retry_window_seconds": 1.5}))
    try:
        def settled() -> bool:
            sender.run_until_idle()
            return deliveries(settings, ep.id)[0].status != DeliveryStatus.PENDING
        wait_for(settled, timeout_s=20)
    finally:
        sender.close()
        receiver.stop()
    [d] = deliveries(settings, ep.id)
    assert d.status == "failed" and d.next_attempt_at is None and d.attempts >= 3
    assert d.last_status_code == 500 and d.last_error == "HTTP 500"
    assert [a["status_code"] for a in d.log] == [500] * d.attempts
    assert d.log[-1]["next_attempt_at"] is None and receiver.refused == d.attempts
    assert counted("failed") - before["failed"] == 1  # fairway_webhook_attempts_total
    assert counted("retry") - before["retry"] == d.attempts - 1


def test_a_disabled_endpoint_waits_and_gets_its_events_when_enabled(settings: Settings,
                                                                     tenant: uuid.UUID):
    receiver = Receiver().start()
    ep = add_endpoint(settings, tenant, receiver.url)
    receiver.secrets.append(ep.secret)
    with sync_session(settings.database_url) as session:
        record_event(session, tenant, "batch.completed", {"id": "batch_x"})  # while enabled
        session.get(WebhookEndpoint, ep.id).enabled = False  # type: ignore[union-attr]
        session.commit()
    sender = WebhookSender(settings)
    try:
        assert sender.run_until_idle() == 0 and receiver.received == []
        with sync_session(settings.database_url) as session:
            session.get(WebhookEndpoint, ep.id).enabled = True  # type: ignore[union-attr]
            session.commit()
        assert sender.run_until_idle() == 1
    finally:
        sender.close()
        receiver.stop()
    assert len(receiver.received) == 1


def test_a_claim_skips_deliveries_another_sender_is_claiming(settings: Settings,
                                                             tenant: uuid.UUID):
    """Deterministic: while one transaction holds some deliveries (mid-claim), another claim
    takes the rest at once, never waiting for those nor taking them."""
    ep = add_endpoint(settings, tenant, "http://127.0.0.1:9/x")
    emit(settings, tenant, 4)
    ids = [d.id for d in deliveries(settings, ep.id)]
    with sync_session(settings.database_url) as holder, \
            sync_session(settings.database_url) as other:
        held = holder.scalars(select(WebhookDelivery.id).where(WebhookDelivery.id.in_(ids[:2]))
                              .with_for_update()).all()
        assert sorted(held) == ids[:2]
        other.execute(text("SET lock_timeout = '2s'"))  # waiting would fail the test
        got = claim(other, now=dt.datetime.now(dt.UTC), limit=10, settings=settings.webhooks)
        holder.rollback()
    assert sorted(c.delivery_id for c in got) == ids[2:]


@pytest.mark.parametrize(("status", "event", "kind"), [
    (BatchStatus.FINALIZING, BatchEvent.COMPLETE, "batch.completed"),
    (BatchStatus.VALIDATING, BatchEvent.REFUSED, "batch.failed"),
    (BatchStatus.IN_PROGRESS, BatchEvent.EXPIRE, "batch.expired"),
    (BatchStatus.CANCELLING, BatchEvent.CANCELLED, "batch.cancelled"),
])
def test_each_final_move_records_its_event(settings: Settings, tenant: uuid.UUID,
                                           status: BatchStatus, event: BatchEvent, kind: str):
    ep = add_endpoint(settings, tenant, "http://127.0.0.1:9/all",
                      event_types=("batch.completed", "batch.failed", "batch.expired",
                                   "batch.cancelled"))
    batch_id = validating_batch(settings, tenant)
    with sync_session(settings.database_url) as session:
        session.get(Batch, batch_id).status = status  # type: ignore[union-attr]
        session.commit()
        batch = batches.lock(session, batch_id, event)
        assert batch is not None
        batches.advance(batch, event, dt.datetime.now(dt.UTC))
        session.commit()
        recorded = session.scalars(select(WebhookEvent).where(
            WebhookEvent.tenant_id == tenant)).all()
    assert [(e.type, e.data) for e in recorded] == [(kind, {"id": "batch_" + batch_id.hex})]
    assert len(deliveries(settings, ep.id)) == 1


def test_old_events_are_swept_unless_a_delivery_is_pending(settings: Settings,
                                                           tenant: uuid.UUID):
    ep = add_endpoint(settings, tenant, "http://127.0.0.1:9/old")
    now = dt.datetime.now(dt.UTC)
    with sync_session(settings.database_url) as session:
        old_done = record_event(session, tenant, "batch.completed", {"id": "batch_a"},
                                now=now - dt.timedelta(days=31))
        old_pending = record_event(session, tenant, "batch.completed", {"id": "batch_b"},
                                   now=now - dt.timedelta(days=31))
        recent = record_event(session, tenant, "batch.completed", {"id": "batch_c"}, now=now)
        session.execute(update(WebhookDelivery).where(
            WebhookDelivery.event_id.in_([uuid.UUID(old_done[4:]), uuid.UUID(recent[4:])]))
            .values(status="delivered"))
        session.commit()
        assert sweep_old_events(session, now=now, retention_days=30) == 1
        left = {e.public_id for e in session.scalars(select(WebhookEvent).where(
            WebhookEvent.tenant_id == tenant))}
    assert left == {old_pending, recent}
    assert len(deliveries(settings, ep.id)) == 2  # the swept event's delivery went with it

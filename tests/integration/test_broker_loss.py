"""A worker whose broker connection is lost while tasks run (acks_late: their deliveries are
unacked) must reconnect, not exit. Celery's consumer tears the lost connection down by closing
the transport and then the channels; a channel still holding unacked deliveries then tries to
give them back through the closed transport. Stock kombu fails there with AttributeError,
which Celery treats as unrecoverable: the worker exited on every Redis outage under load
(found by `fairway chaos`)."""

from __future__ import annotations

import contextlib

from kombu import Queue

from service.store.settings import Settings
from service.store.task_queue import RUN_JOB_TASK, make_celery


def test_closing_a_lost_connection_with_unacked_deliveries_is_a_connection_error(
        test_redis_url: str) -> None:
    app = make_celery(Settings(redis_url=test_redis_url))
    conn = app.connection_for_read()
    queue = Queue("fairway.test.broker-loss")
    received = []
    consumer = conn.Consumer(queue, callbacks=[lambda _body, msg: received.append(msg)])
    consumer.qos(prefetch_count=1)
    consumer.consume()
    with app.producer_or_acquire() as producer:
        producer.publish({"task": RUN_JOB_TASK}, routing_key=queue.name, declare=[queue])
    conn.drain_events(timeout=5)
    channel = conn.default_channel
    assert len(received) == 1 and channel.qos._delivered  # a task running, unacked
    errors = conn.connection_errors
    # What the consumer's teardown of a lost connection can leave: the transport closed
    # (kombu's Connection.collect) while the channel, with its delivery, is still open.
    conn._do_close_transport()
    with contextlib.suppress(errors):  # a dead broker's close is skipped so; it reconnects
        channel.close()

"""The Celery app. Configured from settings by a factory, never at import time.

Delivery settings, chosen on purpose (Postgres, not the broker, is the source of truth):
- task_acks_late=True: a message is acked only after the task ran, so one that a worker had
  reserved but never started is redelivered if the worker dies instead of being lost.
- task_reject_on_worker_lost=True: same, for a task whose worker process was killed.
- worker_prefetch_multiplier=1: a worker reserves no more tasks than its pool has threads
  (= engine slots), so queued work stays with the dispatcher, which can still re-place it.
- visibility_timeout=3600 s (Redis broker): longer than any job may run, so the broker does
  not redeliver a message whose task is merely slow. Recovery from a dead worker is the
  dispatcher's lease expiry (seconds), which re-dispatches the job with attempt+1; any later
  redelivery of the old (job, attempt) is then a no-op in the task's idempotency check.
- task_ignore_result=True: results and usage go to Postgres; there is no result backend.
- worker_send_task_events / task_send_sent_event: Flower works out of the box.
- broker_connection_max_retries=None: a worker whose broker (Redis) goes away keeps trying
  to reconnect for as long as it takes, instead of exiting after 100 tries.
- task_publish_retry_policy: the dispatcher's send gives up within about a second when the
  broker is away; it then gives the job's claim back and backs off (scheduler.dispatcher).
- broker_transport=fairway-redis (RedisTransport): kombu's Redis transport, except that a
  channel whose transport is already closed says so with a connection error (see below).
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

from service.store.settings import Settings

RUN_JOB_TASK = "fairway.run_job"


class _RedisChannel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        """When the broker connection is lost, Celery's consumer closes the transport (its
        client becomes None) and then the channels; a channel still holding unacked
        deliveries (acks_late tasks running) then opens a new pool to give them back, and
        stock kombu fails with AttributeError on the closed transport. That error is not a
        connection error, so Celery calls it unrecoverable and the worker exits. Raising a
        connection error instead lets the close be skipped like any other on a dead broker,
        and the worker reconnects. Nothing is lost: the deliveries stay in the broker's
        unacked set, and Postgres leases are the truth about jobs anyway."""
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection is closed")
        params: dict[str, Any] = super()._connparams(  # type: ignore[no-untyped-call]
            asynchronous=asynchronous)
        return params


class RedisTransport(kombu_redis.Transport):
    Channel = _RedisChannel


BROKER_TRANSPORT = "fairway-redis"  # kombu's alias for RedisTransport (logs show it as scheme)


def make_celery(settings: Settings) -> Celery:
    TRANSPORT_ALIASES.setdefault(BROKER_TRANSPORT, f"{__name__}:{RedisTransport.__name__}")
    app = Celery("fairway", broker=settings.redis_url)
    app.conf.update(
        broker_transport=BROKER_TRANSPORT,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": 3600},
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0.1,
                                   "interval_step": 0.3, "interval_max": 0.5},
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        task_default_queue="fairway.default",
    )
    return app

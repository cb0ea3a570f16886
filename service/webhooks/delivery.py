"""The webhook delivery loop, run by the active dispatcher (``fairway scheduler`` hands
``WebhookSender.tick`` in as upkeep), off the dispatcher's thread.

Each round claims due deliveries and sends them at once, then records each outcome:

- **claim** (one short transaction): ``SELECT ... FOR UPDATE SKIP LOCKED`` picks pending
  deliveries whose time has come (endpoint enabled), and the same statement counts the attempt
  and pushes ``next_attempt_at`` a lease ahead. Two dispatchers (an old and a new leader, or a
  test's two loops) never claim the same row; no transaction stays open during the HTTP calls.
- **send**: a POST of the event's JSON, signed afresh (Standard Webhooks), with a short timeout;
  any 2xx is success, anything else (other status, timeout, refused connection) a failure.
- **record**: delivered, or the next attempt by the backoff schedule (``schedule.py``), or
  failed once the retry window is over; each attempt is appended to the delivery's log. The
  write matches only the attempt it claimed, so a stale sender cannot overwrite a newer one.

A process that dies between claim and record loses nothing: the lease runs out and the
delivery is sent again (at least once; receivers deduplicate on ``webhook-id``).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import delete, func, literal, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from service.store.db import sync_session
from service.store.models.webhooks import (
    EVENT_PREFIX,
    DeliveryStatus,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from service.store.outages import is_outage
from service.store.settings import Settings, WebhookSettings
from service.store.telemetry.metrics import WEBHOOK_ATTEMPTS
from service.store.telemetry.state import enabled as metrics_enabled
from service.store.webhook_events import payload_body
from service.webhooks.schedule import next_attempt_at
from service.webhooks.signing import signed_headers
from service.webhooks.targets import TargetRefused, resolve_checked

log = logging.getLogger("fairway.webhooks")
PENDING = DeliveryStatus.PENDING.value
USER_AGENT = "Fairway-Webhooks/1"


@dataclass(frozen=True, slots=True)
class Claimed:
    """One delivery this sender holds for one attempt, with what it needs to send it."""

    delivery_id: int
    attempt: int  # 1 for the first try
    url: str
    signing_secrets: tuple[str, ...]
    msg_id: str  # the event's id: the same on every attempt, for receivers' deduplication
    body: str
    event_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Outcome:
    status_code: int | None
    error: str | None
    duration_ms: int

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def lease_seconds(settings: WebhookSettings) -> float:
    """How long a claim holds a delivery: past the slowest send of a round (the timeout bounds
    each of connect, write and read), with room for the writes around it."""
    return 3 * settings.timeout_seconds + 10


def claim(session: Session, *, now: dt.datetime, limit: int,
          settings: WebhookSettings) -> list[Claimed]:
    """Claim up to ``limit`` due deliveries and commit. A delivery is attempted when due even if
    late (the endpoint was disabled, no dispatcher ran); after a failure past the retry window
    it fails for good (``record``)."""
    due = (select(WebhookDelivery.id)
           .join(WebhookEndpoint, WebhookEndpoint.id == WebhookDelivery.endpoint_id)
           .where(WebhookDelivery.status == PENDING, WebhookDelivery.next_attempt_at <= now,
                  WebhookEndpoint.enabled.is_(True))
           .order_by(WebhookDelivery.next_attempt_at).limit(limit)
           .with_for_update(of=WebhookDelivery, skip_locked=True))
    held = now + dt.timedelta(seconds=lease_seconds(settings))
    claimed = session.execute(
        update(WebhookDelivery).where(WebhookDelivery.id.in_(due))
        .values(attempts=WebhookDelivery.attempts + 1, next_attempt_at=held, last_attempt_at=now)
        .returning(WebhookDelivery.id, WebhookDelivery.attempts)).all()
    if not claimed:
        session.commit()
        return []
    attempts = dict(claimed)
    rows = session.execute(
        select(WebhookDelivery.id, WebhookEndpoint, WebhookEvent)
        .join(WebhookEndpoint, WebhookEndpoint.id == WebhookDelivery.endpoint_id)
        .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
        .where(WebhookDelivery.id.in_(list(attempts)))).all()
    out = [Claimed(delivery_id, attempts[delivery_id], endpoint.url,
                   _signing_secrets(endpoint, now), EVENT_PREFIX + event.id.hex,
                   payload_body(event), event.created_at)
           for delivery_id, endpoint, event in rows]
    session.commit()
    return out


def _signing_secrets(endpoint: WebhookEndpoint, now: dt.datetime) -> tuple[str, ...]:
    """The current secret, and a rotated-out one until its grace period ends."""
    previous = endpoint.previous_secret
    expires = endpoint.previous_secret_expires_at
    if previous and expires is not None and expires > now:
        return endpoint.secret, previous
    return (endpoint.secret,)


def send(client: httpx.Client, delivery: Claimed, *, allow_private: bool = False) -> Outcome:
    """One signed POST; never raises for the endpoint's faults (they are the outcome).

    Unless private targets are allowed, the host is resolved now and every address checked
    (its DNS may have changed since registration), and the POST goes to the checked address
    (service.webhooks.targets); a refused one is a failed attempt, retried as any other."""
    headers = signed_headers(msg_id=delivery.msg_id, body=delivery.body,
                             at=dt.datetime.now(dt.UTC),
                             signing_secrets=delivery.signing_secrets)
    headers.update({"content-type": "application/json", "user-agent": USER_AGENT})
    started = time.monotonic()
    url = delivery.url
    extensions: dict[str, Any] = {}
    if not allow_private:
        try:
            pinned = resolve_checked(delivery.url)
        except TargetRefused as exc:
            return Outcome(None, f"refused: {exc}"[:500], _ms(started))
        except (OSError, UnicodeError) as exc:  # the name does not resolve
            return Outcome(None, f"ConnectError: {exc}"[:500], _ms(started))
        url = pinned.url
        if pinned.host_header:
            headers["host"] = pinned.host_header
        if pinned.sni_hostname:
            extensions["sni_hostname"] = pinned.sni_hostname
    try:
        # Streamed and closed unread: a receiver's answer body is never downloaded.
        with client.stream("POST", url, content=delivery.body.encode(),
                           headers=headers, extensions=extensions) as response:
            code = response.status_code
    except httpx.HTTPError as exc:
        return Outcome(None, f"{type(exc).__name__}: {exc}"[:500], _ms(started))
    return Outcome(code, None if 200 <= code < 300 else f"HTTP {code}", _ms(started))


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def record(session: Session, delivery: Claimed, outcome: Outcome, *, now: dt.datetime,
           settings: WebhookSettings) -> str | None:
    """Write the attempt's outcome and commit; returns the delivery's status, or None when the
    claim was stale (another sender has tried since)."""
    values: dict[str, Any]
    if outcome.ok:
        values = {"status": DeliveryStatus.DELIVERED.value, "delivered_at": now,
                  "next_attempt_at": None}
    else:
        retry_at = next_attempt_at(failures=delivery.attempt, now=now,
                                   event_at=delivery.event_at, settings=settings)
        values = {"status": PENDING if retry_at else DeliveryStatus.FAILED.value,
                  "next_attempt_at": retry_at}
    entry = {"attempt": delivery.attempt, "at": now.isoformat(),
             "status_code": outcome.status_code, "error": outcome.error,
             "duration_ms": outcome.duration_ms, "next_attempt_at": (
                 values["next_attempt_at"].isoformat() if values["next_attempt_at"] else None)}
    status = session.scalar(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery.delivery_id,
               WebhookDelivery.attempts == delivery.attempt, WebhookDelivery.status == PENDING)
        .values(**values, last_status_code=outcome.status_code, last_error=outcome.error,
                log=func.coalesce(WebhookDelivery.log, literal([], JSONB))
                .op("||")(literal([entry], JSONB)))
        .returning(WebhookDelivery.status))
    session.commit()
    return status


SWEEP_EVERY_S = 600.0
SWEEP_CHUNK = 1000


def sweep_old_events(session: Session, *, now: dt.datetime, retention_days: float) -> int:
    """Delete events past retention, their deliveries with them (the foreign key cascades),
    in chunks; an event with a pending delivery stays. Returns how many went."""
    cutoff = now - dt.timedelta(days=retention_days)
    pending = select(WebhookDelivery.id).where(WebhookDelivery.event_id == WebhookEvent.id,
                                               WebhookDelivery.status == PENDING)
    total = 0
    while True:
        chunk = (select(WebhookEvent.id).where(WebhookEvent.created_at < cutoff,
                                               ~pending.exists())
                 .limit(SWEEP_CHUNK).with_for_update(skip_locked=True))
        gone = len(session.execute(delete(WebhookEvent).where(WebhookEvent.id.in_(chunk))
                                   .returning(WebhookEvent.id)).all())
        session.commit()
        total += gone
        if gone < SWEEP_CHUNK:
            return total


class WebhookSender:
    """The dispatcher's upkeep: ``tick`` starts a round in the background unless one is
    running or the last began under ``poll_seconds`` ago. ``close`` stops it gracefully."""

    def __init__(self, settings: Settings, *, clock: Callable[[], dt.datetime] | None = None,
                 ) -> None:
        self.settings = settings
        self.config = settings.webhooks
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        timeout = self.config.timeout_seconds
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=timeout),
                                   follow_redirects=False, trust_env=False,
                                   limits=httpx.Limits(max_connections=self.config.concurrency))
        self._senders = ThreadPoolExecutor(self.config.concurrency,
                                           thread_name_prefix="fairway-webhook")
        self._rounds = ThreadPoolExecutor(1, thread_name_prefix="fairway-webhook-round")
        self._busy = threading.Lock()
        self._closed = threading.Event()
        self._next_at = 0.0
        self._next_sweep = 0.0

    def tick(self) -> None:
        if self._closed.is_set() or time.monotonic() < self._next_at or self._busy.locked():
            return
        self._next_at = time.monotonic() + self.config.poll_seconds
        self._rounds.submit(self._run_safely)

    def _run_safely(self) -> None:
        try:
            self.run_until_idle()
            if time.monotonic() >= self._next_sweep:
                self._next_sweep = time.monotonic() + SWEEP_EVERY_S
                with sync_session(self.settings.database_url) as session:
                    swept = sweep_old_events(session, now=self._clock(),
                                             retention_days=self.config.retention_days)
                if swept:
                    log.info("old webhook events deleted", extra={"events": swept})
        except Exception as exc:  # never let webhook upkeep take the dispatcher down
            if is_outage(exc):
                log.warning("webhook delivery waits for Postgres: %s", type(exc).__name__)
            else:
                log.exception("webhook delivery round failed; retried next tick")

    def run_until_idle(self) -> int:
        """Rounds until fewer deliveries are due than one round takes; returns attempts made."""
        made = 0
        with self._busy:
            while not self._closed.is_set():
                n = self.run_round()
                made += n
                if n < self.config.concurrency:
                    return made
        return made

    def run_round(self) -> int:
        """Claim up to ``concurrency`` due deliveries, send them at once, record each."""
        with sync_session(self.settings.database_url) as session:
            claimed = claim(session, now=self._clock(), limit=self.config.concurrency,
                            settings=self.config)
        if not claimed:
            return 0
        allow = self.config.allow_private
        outcomes = list(self._senders.map(
            lambda d: send(self.client, d, allow_private=allow), claimed))
        with sync_session(self.settings.database_url) as session:
            for delivery, outcome in zip(claimed, outcomes, strict=True):
                status = record(session, delivery, outcome, now=self._clock(),
                                settings=self.config)
                _log_attempt(delivery, outcome, status)
        return len(claimed)

    def close(self) -> None:
        """Start no new round, let the running one record its outcomes, then release."""
        self._closed.set()
        self._rounds.shutdown(wait=True)
        self._senders.shutdown(wait=True)
        self.client.close()


def _log_attempt(delivery: Claimed, outcome: Outcome, status: str | None) -> None:
    extra = {"delivery_id": delivery.delivery_id, "event_id": delivery.msg_id,
             "attempt": delivery.attempt, "status_code": outcome.status_code,
             "status": status}
    if status is None:  # a stale claim: another sender has tried since, nothing written
        log.info("webhook attempt superseded", extra=extra)
        return
    if outcome.ok:
        log.info("webhook delivered", extra=extra)
    elif status == DeliveryStatus.FAILED:
        log.error("webhook delivery failed for good: %s", outcome.error, extra=extra)
    else:
        log.warning("webhook attempt failed: %s", outcome.error, extra=extra)
    if metrics_enabled():
        WEBHOOK_ATTEMPTS.labels("retry" if status == PENDING else status).inc()


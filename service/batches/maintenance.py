"""Runs batch steps for the dispatcher's maintenance tick, off the dispatcher's thread.

The active dispatcher calls `BatchMaintenance.tick` from its maintenance tick (`fairway
scheduler` hands it in as upkeep). It looks for due steps at most once
per `batch_maintenance_seconds` (a few indexed queries) and hands each to a small thread pool,
because assembling a 50k-line output file takes seconds and the dispatcher must keep
placing realtime work meanwhile. Only the active dispatcher leader calls this. Every
`file_expiry_sweep_seconds` it also deletes expired files (``service.files.expiry``).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from redis import Redis

from service.batches.completion import Due, find_due, run_step
from service.batches.ingest import give_up_validation
from service.files.expiry import expire_files
from service.files.storage import storage_for
from service.store.db import sync_session
from service.store.outages import is_outage
from service.store.settings import Settings

log = logging.getLogger("fairway.batches")


MAX_STEP_FAILURES = 5  # a validation failing this often for reasons of its own fails the batch
BACKOFF_BASE_S, BACKOFF_CAP_S = 1.0, 60.0


class _Backoff:
    """Per-batch retry schedule: capped exponential delays with jitter after each failure."""

    def __init__(self) -> None:
        self._failures: dict[uuid.UUID, int] = {}
        self._not_before: dict[uuid.UUID, float] = {}

    def ready(self, batch_id: uuid.UUID, now: float) -> bool:
        return now >= self._not_before.get(batch_id, 0.0)

    def failed(self, batch_id: uuid.UUID, now: float, *, counts: bool) -> int:
        """Schedule the next try; returns the failures counted against the batch so far."""
        n = self._failures.get(batch_id, 0) + int(counts)
        self._failures[batch_id] = n
        delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** max(0, n - 1))
        self._not_before[batch_id] = now + delay * random.uniform(0.8, 1.2)
        return n

    def forget(self, batch_id: uuid.UUID) -> None:
        self._failures.pop(batch_id, None)
        self._not_before.pop(batch_id, None)


class BatchMaintenance:
    def __init__(self, settings: Settings, redis: Redis, workers: int = 2) -> None:
        self.settings = settings
        self.redis = redis
        self.storage = storage_for(settings.files_root)
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="fairway-batch")
        self._in_flight: set[uuid.UUID] = set()
        self._lock = threading.Lock()
        self._next_at = 0.0
        self._sweeping = threading.Lock()
        self._next_sweep = 0.0
        self._backoff = _Backoff()

    def tick(self) -> None:
        if time.monotonic() < self._next_at:
            return
        self._next_at = time.monotonic() + self.settings.batches.maintenance_seconds
        try:
            with sync_session(self.settings.database_url) as session:
                due = find_due(session, now=dt.datetime.now(dt.UTC),
                               validation_grace_s=self.settings.batches.validation_grace_seconds)
        except Exception:  # never let batch upkeep take the dispatcher down
            log.exception("looking for due batch steps failed")
            return
        if time.monotonic() >= self._next_sweep and not self._sweeping.locked():
            self._next_sweep = time.monotonic() + self.settings.batches.file_expiry_sweep_seconds
            self.pool.submit(self._sweep_files)
        now = time.monotonic()
        for step in due:
            with self._lock:
                if step.batch_id in self._in_flight or not self._backoff.ready(step.batch_id,
                                                                                now):
                    continue
                self._in_flight.add(step.batch_id)
            self.pool.submit(self._run, step)

    def _sweep_files(self) -> None:
        if not self._sweeping.acquire(blocking=False):
            return
        try:
            with sync_session(self.settings.database_url) as session:
                expire_files(session, self.storage, now=dt.datetime.now(dt.UTC))
        except Exception:
            log.exception("deleting expired files failed; retried next tick")
        finally:
            self._sweeping.release()

    def _run(self, step: Due) -> None:
        try:
            with sync_session(self.settings.database_url) as session:
                run_step(session, due=step, storage=self.storage, settings=self.settings,
                         redis=self.redis)
            with self._lock:
                self._backoff.forget(step.batch_id)
        except Exception as exc:
            self._failed(step, exc)
        finally:
            with self._lock:
                self._in_flight.discard(step.batch_id)

    def _failed(self, step: Due, exc: Exception) -> None:
        outage = is_outage(exc)
        with self._lock:
            failures = self._backoff.failed(step.batch_id, time.monotonic(), counts=not outage)
        extra = {"batch_id": str(step.batch_id), "action": step.action, "failures": failures}
        if outage:
            log.warning("batch step waits for a dependency: %s", type(exc).__name__,
                        extra=extra)
            return
        log.error("batch step failed", exc_info=exc, extra=extra)
        if step.action == "validate" and failures >= MAX_STEP_FAILURES:
            try:
                with sync_session(self.settings.database_url) as session:
                    give_up_validation(session, batch_id=step.batch_id, redis=self.redis, message=(
                        f"Validating the input file failed {failures} times "
                        f"({type(exc).__name__}); the batch was not started."))
                with self._lock:
                    self._backoff.forget(step.batch_id)
            except Exception:
                log.exception("failing the batch failed; retried later", extra=extra)

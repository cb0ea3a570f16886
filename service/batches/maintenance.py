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
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from redis import Redis

from service.batches.lifecycle import Due, find_due, run_step
from service.files.expiry import expire_files
from service.files.storage import storage_for
from service.store.db import sync_session
from service.store.settings import Settings

log = logging.getLogger("fairway.batches")


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
        for step in due:
            with self._lock:
                if step.batch_id in self._in_flight:
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
        except Exception:
            log.exception("batch step failed; retried next tick",
                          extra={"batch_id": str(step.batch_id), "action": step.action})
        finally:
            with self._lock:
                self._in_flight.discard(step.batch_id)

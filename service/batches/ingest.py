"""Validate a batch's input file and turn its valid lines into jobs, in one transaction.

Runs synchronously (a thread in the API process, or the dispatcher's maintenance when the
API died mid-way). Why it is safe to run twice, or to die half-way:

* The batch row is locked `FOR UPDATE SKIP LOCKED` for the whole run. A second validator
  skips a batch that a live one holds; if the process dies, Postgres drops its connection,
  the lock and every uncommitted job row with it, and the batch is still `validating`.
* Jobs are written with COPY inside the same transaction that moves the batch to
  `in_progress`: either every valid line is a job, or none is.
* Quota: once the lines are counted, the batch's estimate (prompt estimate + max_tokens,
  summed over valid lines) is reserved against the tenant's enqueued-token limit and monthly
  budget (service/quotas/batch.py), keyed by the batch id. A refusal rolls the COPY back and
  fails the batch (`token_limit_exceeded` / `insufficient_quota`). A reservation left by an
  attempt that never committed is given back first (a batch still `validating`, whose lock
  we hold, has no committed jobs), so a retried validation never reserves twice.

Memory stays flat: the file is read line by line and rows stream into COPY; the only
per-line state is the set of custom_ids (needed to find duplicates).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any, BinaryIO

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from scheduler.tiers import BATCH_LINE
from service.adapters.batch_lines import known_with_adapter
from service.batches.validation import ENDPOINTS, LineError, LineLimits, LineValidator
from service.files.storage import FileStorage, StorageWriter
from service.quotas.batch import admit_batch_sync, settle_batch_sync
from service.store import batch_lifecycle as batches
from service.store import lifecycle, wakeups
from service.store.batch_lifecycle import BatchEvent
from service.store.models.batches import Batch, BatchStatus
from service.store.models.files import StoredFile
from service.store.models.jobs import JobKind
from service.store.models.tenants import Tenant
from service.store.quota_store import SyncQuotaStore
from service.store.settings import Settings
from service.store.storable import quoted
from service.store.telemetry.state import record_rejection

log = logging.getLogger("fairway.batches")

MAX_LINE_BYTES = 8 * 1024 * 1024
MAX_ERRORS_IN_BATCH = 100  # errors.data[] keeps the first ones; the error file has all
_COPY_SQL = f"COPY jobs ({', '.join(lifecycle.COPY_COLUMNS)}) FROM STDIN"


def validation_errors_key(batch_id: uuid.UUID) -> str:
    return f"batches/{batch_id.hex}/validation_errors.jsonl"


def iter_lines(reader: BinaryIO, max_len: int = MAX_LINE_BYTES
               ) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) for non-blank lines; bytes is None for a line over max_len,
    whose rest is skipped in bounded reads."""
    line_no = 0
    while raw := reader.readline(max_len + 1):
        line_no += 1
        if len(raw) > max_len and not raw.endswith(b"\n"):
            while (rest := reader.readline(max_len)) and not rest.endswith(b"\n"):
                pass
            yield line_no, None
        elif raw.strip():
            yield line_no, raw


def validate_batch(session: Session, *, batch_id: uuid.UUID, storage: FileStorage,
                   settings: Settings, redis: Redis,
                   known_models: set[str] | None = None) -> str | None:
    """Validate and ingest one batch; returns its new status, or None if not ours to do.
    `redis` is a synchronous client (quota admission); a Redis outage raises, leaving the
    batch `validating` for the dispatcher's retry."""
    batch = batches.lock(session, batch_id, BatchEvent.VALIDATED)
    if batch is None:
        return None
    quotas = SyncQuotaStore(redis)
    # Before reading the file: gives back a stale reservation, and fails fast without Redis.
    settle_batch_sync(quotas, tenant_id=batch.tenant_id, batch_id=batch.id, actual_tokens=0)
    source = session.get(StoredFile, batch.input_file_id) if batch.input_file_id else None
    if source is None or not storage.exists(source.storage_key):
        return _fail(session, batch, "input_file_missing", "The input file no longer exists.")
    limits = LineLimits(settings.limits.max_tokens_limit, settings.limits.default_max_tokens,
                        settings.engine.max_model_len)
    validator = LineValidator(endpoint=batch.endpoint, limits=limits)
    run = _Run(batch, storage)
    _prefer_lz4(session)
    savepoint = session.begin_nested()
    try:
        with storage.open_reader(source.storage_key) as reader:
            run.copy_lines(session, iter_lines(reader), validator)
    except BaseException:
        run.abort()
        raise
    try:
        known_models = known_with_adapter(session, batch_id=batch.id, tenant_id=batch.tenant_id,
                                          model=validator.model, known_models=known_models)
        failure = run.whole_file_failure(validator, settings, known_models)
        if failure is None:
            failure = _admit(session, quotas, batch, run.tokens)
    except BaseException:
        run.abort()
        raise
    if failure is not None:
        savepoint.rollback()
        run.abort()
        return _fail(session, batch, *failure, errors=run.sample)
    savepoint.commit()
    run.commit()
    now = dt.datetime.now(dt.UTC)
    batches.advance(batch, BatchEvent.VALIDATED, now)
    batch.model = validator.model
    batch.total, batch.invalid_lines = run.total, run.invalid
    batch.errors = run.sample or None
    # One NOTIFY for the whole batch: the dispatcher rescans instead of hearing 50k "new".
    session.execute(*wakeups.notify(wakeups.Rescan()))
    session.commit()
    log.info("batch validated", extra={"batch_id": str(batch_id), "lines": run.total,
                                       "invalid": run.invalid})
    return BatchStatus.IN_PROGRESS


class _Run:
    """One validation pass: COPY rows for valid lines, error lines for the others."""

    def __init__(self, batch: Batch, storage: FileStorage) -> None:
        self.batch, self.storage = batch, storage
        self.total = self.valid = self.invalid = 0
        self.tokens = 0  # sum of valid lines' prompt estimate + max_tokens (for admission)
        self.sample: list[dict[str, Any]] = []
        self.errors: StorageWriter | None = None

    def copy_lines(self, session: Session, lines: Iterator[tuple[int, bytes | None]],
                   validator: LineValidator) -> None:
        b = self.batch
        endpoint = ENDPOINTS[b.endpoint]
        raw_conn = session.connection().connection.dbapi_connection
        assert raw_conn is not None
        with raw_conn.cursor() as cur, cur.copy(_COPY_SQL) as copy:  # type: ignore[attr-defined]
            for line_no, raw in lines:
                self.total += 1
                result = (validator.check(raw, line_no) if raw is not None else LineError(
                    line_no, "line_too_long", f"The line exceeds {MAX_LINE_BYTES} bytes."))
                if isinstance(result, LineError):
                    self._error(result)
                    continue
                self.valid += 1
                self.tokens += result.estimated_tokens
                copy.write_row((
                    uuid.uuid4(), b.tenant_id, JobKind.BATCH.value, "default", BATCH_LINE.priority,
                    endpoint, result.model, result.request_json,
                    False, result.max_tokens, b.expires_at, lifecycle.NEW_STATUS,
                    lifecycle.NEW_ATTEMPT, b.id, result.custom_id, line_no))

    def _error(self, error: LineError) -> None:
        self.invalid += 1
        if len(self.sample) < MAX_ERRORS_IN_BATCH:
            self.sample.append(error.as_batch_error())
        if self.errors is None:
            self.errors = self.storage.open_writer(validation_errors_key(self.batch.id))
        self.errors.write(json.dumps(error.as_error_line()).encode() + b"\n")

    def whole_file_failure(self, validator: LineValidator, settings: Settings,
                           known_models: set[str] | None) -> tuple[str, str] | None:
        if self.total == 0:
            return "empty_file", "The input file has no lines."
        if self.total > settings.batches.max_lines:
            return "too_many_lines", f"The input file exceeds {settings.batches.max_lines} lines."
        if self.valid == 0:
            return "no_valid_lines", "No line of the input file is a valid request."
        if known_models is not None and validator.model not in known_models:
            return "model_not_found", f"The model '{validator.model}' does not exist."
        return None

    def commit(self) -> None:
        if self.errors is not None:
            self.errors.commit()

    def abort(self) -> None:
        if self.errors is not None:
            self.errors.abort()
            self.errors = None


def _admit(session: Session, quotas: SyncQuotaStore, batch: Batch,
           tokens: int) -> tuple[str, str] | None:
    """Reserve the batch's estimate; (code, message) for the batch's errors when refused."""
    plan = session.scalar(select(Tenant.plan).where(Tenant.id == batch.tenant_id))
    decision, limits = admit_batch_sync(session, quotas, tenant_id=batch.tenant_id,
                                        plan=plan or "", batch_id=batch.id, tokens=tokens)
    if decision.admitted:
        return None
    log.info("batch refused by quota", extra={"batch_id": str(batch.id),
                                               "reason": decision.reason, "tokens": tokens})
    record_rejection(batch.tenant_id, decision.reason)
    if decision.reason == "monthly_tokens":
        return ("insufficient_quota",
                f"The batch needs up to {tokens} tokens, more than is left of the monthly "
                f"token budget ({limits.monthly_tokens}).")
    return ("token_limit_exceeded",
            f"Enqueued token limit reached: the batch needs up to {tokens} tokens (prompt "
            f"estimates plus max_tokens), which with the tenant's other unfinished batches "
            f"exceeds the limit of {limits.batch_enqueued_tokens} enqueued tokens. Retry "
            f"when they finish, or submit fewer tokens.")


def _prefer_lz4(session: Session) -> None:
    """Request bodies over ~2 KB are TOAST-compressed; lz4 is much cheaper than the default
    pglz, which dominated a 200 MB ingest (11 s -> 8 s measured). Servers built without lz4
    keep the default."""
    try:
        with session.begin_nested():
            session.execute(text("SET LOCAL default_toast_compression = 'lz4'"))
    except DBAPIError:
        log.info("lz4 TOAST compression unavailable; using the server default")


def give_up_validation(session: Session, *, batch_id: uuid.UUID, message: str,
                       redis: Redis) -> str | None:
    """End a batch whose validation keeps failing: ``failed``, with the reason in errors, and
    any quota it had reserved given back (best effort: the reservation also expires)."""
    batch = batches.lock(session, batch_id, BatchEvent.REFUSED)
    if batch is None:
        return None
    log.error("batch validation given up", extra={"batch_id": str(batch_id)})
    try:
        settle_batch_sync(SyncQuotaStore(redis), tenant_id=batch.tenant_id, batch_id=batch.id,
                          actual_tokens=0)
    except RedisError:
        log.warning("quota reservation left to expire", extra={"batch_id": str(batch_id)})
    return _fail(session, batch, "validation_error", message)


def _fail(session: Session, batch: Batch, code: str, message: str,
          errors: list[dict[str, Any]] | None = None) -> str:
    batches.advance(batch, BatchEvent.REFUSED, dt.datetime.now(dt.UTC))
    batch.errors = [{"code": code, "line": None, "message": quoted(message), "param": None},
                    *(errors or [])][:MAX_ERRORS_IN_BATCH]
    batch.final_counts = {"total": 0, "completed": 0, "failed": 0}
    session.commit()
    log.info("batch failed validation", extra={"batch_id": str(batch.id), "code": code})
    return BatchStatus.FAILED

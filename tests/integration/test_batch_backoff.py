"""A batch step that keeps failing backs off, and a validation that keeps failing for reasons of
its own ends the batch ``failed`` with the reason, after a bounded number of tries. A
dependency outage is waited out, never counted against the batch."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from redis import Redis
from sqlalchemy.exc import OperationalError

from service.batches import maintenance
from service.cli.bootstrap import create_tenant_with_key
from service.store import batch_lifecycle
from service.store.db import sync_engine, sync_session
from service.store.models.batches import Batch
from service.store.settings import Settings
from tests.support.services import create_database, drop_database


@pytest.fixture(scope="module")
def settings(test_redis_url: str) -> Iterator[Settings]:
    """A database of its own: the shared one's dispatcher would validate our batch itself."""
    url = create_database("fairway_backoff")
    yield Settings(database_url=url, redis_url=test_redis_url)
    sync_engine(url).dispose()
    drop_database(url)


@pytest.fixture
def validating_batch(settings: Settings) -> Iterator[uuid.UUID]:
    tenant_id, _ = create_tenant_with_key(settings, f"backoff-{uuid.uuid4().hex[:8]}")
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)  # past the validation grace
    with sync_session(settings.database_url) as session:
        batch = batch_lifecycle.new_batch(now=now, tenant_id=tenant_id,
                                          endpoint="/v1/chat/completions",
                                          completion_window="24h",
                                          expires_at=now + dt.timedelta(hours=24))
        session.add(batch)
        session.commit()
        yield batch.id


def _drive(upkeep: maintenance.BatchMaintenance, batch_id: uuid.UUID, settings: Settings,
           seconds: float) -> Batch:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        upkeep._next_at = 0.0  # every call looks for due steps
        upkeep.tick()
        time.sleep(0.02)
        with sync_session(settings.database_url) as session:
            batch = session.get(Batch, batch_id)
            assert batch is not None
            if batch.status != "validating":
                return batch
    return batch


def test_a_validation_that_keeps_failing_fails_the_batch(
        settings: Settings, validating_batch: uuid.UUID, monkeypatch: pytest.MonkeyPatch):
    calls: list[float] = []

    def broken(*_: Any, due: maintenance.Due, **__: Any) -> None:
        if due.batch_id == validating_batch:
            calls.append(time.monotonic())
        raise ValueError("the input cannot be read")

    monkeypatch.setattr(maintenance, "run_step", broken)
    monkeypatch.setattr(maintenance, "BACKOFF_BASE_S", 0.05)
    upkeep = maintenance.BatchMaintenance(settings, Redis.from_url(settings.redis_url))
    batch = _drive(upkeep, validating_batch, settings, seconds=20)
    assert batch.status == "failed"
    assert batch.errors and batch.errors[0]["code"] == "validation_error"
    assert "5 times" in batch.errors[0]["message"]
    assert len(calls) == maintenance.MAX_STEP_FAILURES


def test_an_outage_is_waited_out_not_counted(
        settings: Settings, validating_batch: uuid.UUID, monkeypatch: pytest.MonkeyPatch):
    calls: list[float] = []

    def down(*_: Any, due: maintenance.Due, **__: Any) -> None:
        if due.batch_id == validating_batch:
            calls.append(time.monotonic())
        raise OperationalError("SELECT 1", {}, psycopg.OperationalError("connection refused"))

    monkeypatch.setattr(maintenance, "run_step", down)
    monkeypatch.setattr(maintenance, "BACKOFF_BASE_S", 0.01)
    monkeypatch.setattr(maintenance, "BACKOFF_CAP_S", 0.02)
    upkeep = maintenance.BatchMaintenance(settings, Redis.from_url(settings.redis_url))
    batch = _drive(upkeep, validating_batch, settings, seconds=3)
    assert batch.status == "validating"
    assert len(calls) > maintenance.MAX_STEP_FAILURES

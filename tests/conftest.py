"""Shared fixtures. unit/ needs no services; integration/ and e2e/ use real Postgres and Redis
(each session gets its own database), and start real Fairway processes."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from service.cli.bootstrap import create_tenant_with_key
from service.store.db import sync_engine
from service.store.settings import EngineSettings, Settings
from tests.support.services import (
    PATIENT_PLAN,
    claim_redis_db,
    create_database,
    drop_database,
    release_redis_db,
)
from tests.support.stack import Stack

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.fspath)
        if f"{os.sep}integration{os.sep}" in path:
            item.add_marker(pytest.mark.integration)
        elif f"{os.sep}e2e{os.sep}" in path:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    url = create_database()
    yield url
    sync_engine(url).dispose()
    drop_database(url)


@pytest.fixture
def private_database_url() -> Iterator[str]:
    """A database of this test's own, for rows the shared stack's dispatcher must not see (it
    would queue, re-queue or run them)."""
    url = create_database("fairway_private")
    yield url
    sync_engine(url).dispose()
    drop_database(url)


@pytest.fixture(scope="session")
def test_redis_url() -> Iterator[str]:
    url = claim_redis_db()
    yield url
    release_redis_db(url)


@pytest.fixture
def db_session(database_url: str) -> Iterator[Session]:
    """A session whose work is rolled back after the test (commits become savepoints)."""
    connection = sync_engine(database_url).connect()
    outer = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint",
                      expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()
        outer.rollback()
        connection.close()


@pytest.fixture(scope="session")
def settings(database_url: str, test_redis_url: str) -> Settings:
    return Settings(database_url=database_url, redis_url=test_redis_url,
                    engine=EngineSettings(kind="sim", served_model_name="sim-model"))


@pytest.fixture
def make_tenant(settings: Settings):  # type: ignore[no-untyped-def]
    """Create a committed tenant (other processes must see it); returns (tenant_id, api_key)."""

    def _make(prefix: str = "t", weight: float = 1.0,
              plan: str = PATIENT_PLAN) -> tuple[uuid.UUID, str]:
        return create_tenant_with_key(settings, f"{prefix}-{uuid.uuid4().hex[:8]}",
                                      plan=plan, weight=weight)

    return _make


SIM_ENV = {
    "FAIRWAY_SERVED_MODEL_NAME": "sim-model",
    "FAIRWAY_LEASE_SECONDS": "5",
    "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
    "FAIRWAY_MAX_NUM_SEQS": "8",
    "FAIRWAY_LOG_LEVEL": "INFO",
    # The session's stack serves every integration test's tenants, well over the default 100
    # named in metric labels: past it, a test's new tenant would report as "other" depending
    # on how many tests ran before it. The cap itself is tested in test_tenant_labels.py.
    "FAIRWAY_METRICS_MAX_TENANTS": "100000",
    # The tests' webhook receivers listen on 127.0.0.1, a private target.
    "FAIRWAY_WEBHOOK_ALLOW_PRIVATE": "true",
    # Tenants' LoRA adapters (the sim engine models their loads).
    "FAIRWAY_LORA_ENABLED": "true",
}


@pytest.fixture(scope="session")
def sim_stack(database_url: str, test_redis_url: str) -> Iterator[Stack]:
    """API + dispatcher + one sim-engine worker, shared by the integration tests."""
    files = tempfile.mkdtemp(prefix="fairway-files-")
    stack = Stack(database_url, test_redis_url,
                  env_overrides={**SIM_ENV, "FAIRWAY_FILES_DIR": files,
                                 "FAIRWAY_ADAPTER_IMPORT_DIR": f"{files}/adapter-imports"})
    try:
        stack.start_api()
        stack.start_dispatcher()
        stack.start_worker("sim-1")
        yield stack
    finally:
        stack.stop()
        shutil.rmtree(files, ignore_errors=True)

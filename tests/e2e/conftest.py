"""One real-engine stack for all end-to-end tests: vLLM starts once (about a minute on CPU)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest

from tests.support.services import (
    claim_redis_db,
    create_database,
    drop_database,
    release_redis_db,
)
from tests.support.stack import Stack

E2E_ENV = {
    "FAIRWAY_SERVED_MODEL_NAME": "SmolLM2-135M-Instruct",
    "FAIRWAY_KV_CACHE_GIB": "1",
    "FAIRWAY_MAX_NUM_SEQS": "16",
    "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
    "FAIRWAY_LEASE_SECONDS": "10",
}


@pytest.fixture(scope="session")
def vllm_stack() -> Iterator[Stack]:
    pytest.importorskip("vllm", reason="the real engine is not installed (FAIRWAY_ENGINE_EXTRA)")
    db = create_database("fairway_e2e")
    url = claim_redis_db()
    files = tempfile.mkdtemp(prefix="fairway-files-")
    stack = Stack(db, url, env_overrides={**E2E_ENV, "FAIRWAY_FILES_DIR": files})
    try:
        stack.start_api()
        stack.start_dispatcher()
        stack.start_worker("vllm-1", engine="vllm", timeout_s=900)
        yield stack
    finally:
        stack.stop()
        drop_database(db)
        release_redis_db(url)
        shutil.rmtree(files, ignore_errors=True)

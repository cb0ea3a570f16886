"""One real-engine stack for all end-to-end tests: vLLM starts once (about a minute on CPU)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.stack import Stack, own_stack

E2E_ENV = {
    "FAIRWAY_SERVED_MODEL_NAME": "SmolLM2-135M-Instruct",
    "FAIRWAY_KV_CACHE_GIB": "1",
    "FAIRWAY_MAX_NUM_SEQS": "16",
    "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
    "FAIRWAY_LEASE_SECONDS": "10",
    # Tenants' LoRA adapters (test_adapters_e2e.py); the other tests send none.
    "FAIRWAY_LORA_ENABLED": "true",
}


@pytest.fixture(scope="session")
def vllm_stack() -> Iterator[Stack]:
    pytest.importorskip("vllm", reason="the real engine is not installed (FAIRWAY_ENGINE_EXTRA)")
    with own_stack("e2e", E2E_ENV, workers=("vllm-1",), engine="vllm",
                   worker_timeout_s=900) as stack:
        yield stack

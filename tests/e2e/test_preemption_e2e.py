"""Realtime during a batch flood on the real engine: realtime answers while batch runs, and
every batch job still finishes with the output of its uninterrupted greedy run.

Latency is not asserted here (timing asserts don't belong in tests); bench/ measures it. The
test prints the realtime TTFTs it saw, idle and busy, for the log.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
import uuid

import openai
import pytest
from sqlalchemy import select

from service.cli.bootstrap import create_tenant_with_key
from service.store.db import sync_session
from service.store.models.jobs import Job
from service.store.settings import Settings
from tests.support.stack import Stack, wait_until

MODEL = "SmolLM2-135M-Instruct"
NUM_BATCH = 16  # = the e2e worker's engine slots: batch fills the engine
BATCH_TOKENS = 96


@pytest.fixture(scope="module")
def client(vllm_stack: Stack) -> openai.OpenAI:
    settings = Settings(database_url=vllm_stack.database_url, redis_url=vllm_stack.redis_url)
    key = create_tenant_with_key(settings, f"flood-{uuid.uuid4().hex[:6]}")[1]
    return openai.OpenAI(base_url=vllm_stack.base_url + "/v1", api_key=key, timeout=600,
                         max_retries=0)


def _flex(client: openai.OpenAI, i: int) -> str:
    resp = client.chat.completions.create(
        model=MODEL, service_tier="flex", temperature=0, max_tokens=BATCH_TOKENS,
        extra_body={"ignore_eos": True},
        messages=[{"role": "user", "content": f"Tell a long story about river number {i}."}])
    return resp.id


def _flood(client: openai.OpenAI, pool: cf.ThreadPoolExecutor) -> list[cf.Future[str]]:
    return [pool.submit(_flex, client, i) for i in range(NUM_BATCH)]


def _ttft(client: openai.OpenAI) -> float:
    start = time.monotonic()
    stream = client.chat.completions.create(
        model=MODEL, stream=True, temperature=0, max_tokens=8,
        messages=[{"role": "user", "content": "What is the capital of France?"}])
    first = None
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.monotonic() - start
    assert first is not None
    return first


def _outputs(database_url: str, ids: list[str]) -> dict[int, Job]:
    with sync_session(database_url) as session:
        jobs = session.scalars(select(Job).where(
            Job.id.in_([uuid.UUID(i.split("-", 1)[1]) for i in ids]))).all()
    return {int(j.request["messages"][0]["content"].split()[-1].rstrip(".")): j for j in jobs}


def _running_batch(database_url: str) -> int:
    with sync_session(database_url) as session:
        return len(session.scalars(select(Job.id).where(
            Job.kind == "batch", Job.status == "running", Job.first_token_at.is_not(None))).all())


def test_realtime_during_batch_flood_and_exact_batch_outputs(client: openai.OpenAI,
                                                             vllm_stack: Stack):
    idle = [_ttft(client) for _ in range(2)]
    with cf.ThreadPoolExecutor(NUM_BATCH) as pool:
        reference = _outputs(vllm_stack.database_url,
                             [f.result() for f in _flood(client, pool)])
        flood = _flood(client, pool)
        wait_until(lambda: _running_batch(vllm_stack.database_url) >= NUM_BATCH // 2, 120,
                   "the batch flood running")
        busy = [_ttft(client) for _ in range(3)]
        interrupted = _outputs(vllm_stack.database_url, [f.result() for f in flood])
    print(f"\nrealtime TTFT idle {[round(t, 3) for t in idle]} s, "
          f"during batch flood {[round(t, 3) for t in busy]} s")
    assert len(interrupted) == len(reference) == NUM_BATCH
    for i, job in interrupted.items():
        assert job.status == "succeeded" and job.completion_tokens == BATCH_TOKENS
        assert job.result["text"] == reference[i].result["text"], f"batch job {i} diverged"

"""The whole realtime path with the real vLLM engine and the official openai SDK."""

from __future__ import annotations

import time
import uuid

import httpx
import openai
import pytest
from redis import Redis
from sqlalchemy import select
from transformers import AutoTokenizer

from service.cli.bootstrap import create_tenant_with_key
from service.store.db import sync_session
from service.store.heartbeats import decode_step_clock
from service.store.keys import step_clock_key
from service.store.models.jobs import Job
from service.store.settings import Settings
from tests.support.services import PATIENT_PLAN
from tests.support.stack import Stack, wait_until
from worker.model_prep import ensure_default_model

MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def api_key(vllm_stack: Stack) -> str:
    settings = Settings(database_url=vllm_stack.database_url, redis_url=vllm_stack.redis_url)
    return create_tenant_with_key(settings, f"e2e-{uuid.uuid4().hex[:6]}",
                                  plan=PATIENT_PLAN)[1]


@pytest.fixture(scope="module")
def client(vllm_stack: Stack, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=vllm_stack.base_url + "/v1", api_key=api_key, timeout=300,
                         max_retries=0)


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return AutoTokenizer.from_pretrained(str(ensure_default_model()))


def test_capital_of_france_non_streaming(client: openai.OpenAI, vllm_stack: Stack, tokenizer):
    resp = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0,
                                          max_tokens=24)
    text = resp.choices[0].message.content
    assert "Paris" in text
    # Usage matches the tokenizer: the chat template for the prompt, and the output tokens.
    prompt_ids = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True,
                                               tokenize=True)
    if hasattr(prompt_ids, "keys"):  # newer transformers return a BatchEncoding
        prompt_ids = prompt_ids["input_ids"]
    assert resp.usage.prompt_tokens == len(prompt_ids)
    eos = 1 if resp.choices[0].finish_reason == "stop" else 0
    assert resp.usage.completion_tokens == len(tokenizer.encode(text,
                                                                add_special_tokens=False)) + eos
    with sync_session(vllm_stack.database_url) as session:
        job = session.scalar(select(Job).where(Job.id == uuid.UUID(resp.id.split("-", 1)[1])))
    assert job.status == "succeeded" and job.worker_id == "vllm-1"
    assert job.created_at <= job.assigned_at <= job.started_at <= job.first_token_at
    assert job.first_token_at <= job.finished_at
    assert (job.prompt_tokens, job.completion_tokens) == (resp.usage.prompt_tokens,
                                                          resp.usage.completion_tokens)


def test_streaming_chunks_then_usage(client: openai.OpenAI):
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=24, stream=True,
        stream_options={"include_usage": True}))
    pieces = [c.choices[0].delta.content for c in chunks
              if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 3
    assert "Paris" in "".join(pieces)
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens >= len(pieces)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_real_engine_publishes_its_step_clock(client: openai.OpenAI, vllm_stack: Stack):
    """vLLM's per-step stats tick the worker's step clock; the dispatcher places realtime by it
    (docs/scheduler.md, Placement 3)."""
    redis = Redis.from_url(vllm_stack.redis_url)
    seen = []
    for _ in client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Count from one to forty."}],
            temperature=0, max_tokens=48, stream=True):
        clock = decode_step_clock(redis.get(step_clock_key("vllm-1")))
        if clock is not None and clock[0] is not None:
            seen.append(clock)
    assert seen, "no busy step clock was published while the engine stepped"
    started, step = seen[-1]
    assert started is not None and abs(time.time() - started) < 120 and 0 < step < 10
    wait_until(lambda: decode_step_clock(redis.get(step_clock_key("vllm-1"))) == (None, 0.0),
               30, "the idle clock", vllm_stack)


def test_disconnect_aborts_in_engine(vllm_stack: Stack, api_key: str):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Write a long story."}],
            "max_tokens": 1000, "stream": True, "temperature": 0}
    with httpx.stream("POST", vllm_stack.base_url + "/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {api_key}"}, timeout=120) as r:
        job_id = uuid.UUID(r.headers["x-fairway-job"].removeprefix("job_"))
        for n, _ in enumerate(r.iter_lines()):
            if n > 6:
                break
    def cancelled() -> bool:
        with sync_session(vllm_stack.database_url) as session:
            return session.get(Job, job_id).status == "cancelled"

    wait_until(cancelled, 20, "job cancelled")
    since = time.time()
    wait_until(lambda: vllm_stack.engine_idle_since("vllm-1", since), 20, "vLLM slot freed")


def _job(vllm_stack: Stack, public_id: str) -> Job:
    with sync_session(vllm_stack.database_url) as session:
        job = session.scalar(select(Job).where(Job.id == uuid.UUID(public_id.split("-", 1)[1])))
        assert job is not None
        return job


def test_repeated_prompt_hits_the_prefix_cache(client: openai.OpenAI, vllm_stack: Stack):
    # vLLM's CPU backend caches whole 128-token blocks, so the prompt must span a few.
    facts = " ".join(f"Fact {i}: the river number {i} flows north." for i in range(40))
    messages = [{"role": "system", "content": facts}, *QUESTION]
    first = client.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                           max_tokens=8)
    again = client.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                           max_tokens=8)
    assert again.choices[0].message.content == first.choices[0].message.content
    assert first.usage.prompt_tokens > 300
    cached = _job(vllm_stack, again.id).cached_tokens
    assert 0 < cached < again.usage.prompt_tokens


def test_prompt_longer_than_context_gets_400(client: openai.OpenAI):
    long_text = "word " * 3000
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, max_tokens=8,
                                       messages=[{"role": "user", "content": long_text}])
    assert "context length" in err.value.message


def test_prefix_cache_is_per_tenant(vllm_stack: Stack, client: openai.OpenAI):
    """vLLM's cache_salt keyed per tenant: a repeated prompt hits the prefix cache within a
    tenant, and the same prompt from another tenant does not."""
    settings = Settings(database_url=vllm_stack.database_url, redis_url=vllm_stack.redis_url)
    other_key = create_tenant_with_key(settings, f"e2e-{uuid.uuid4().hex[:6]}",
                                  plan=PATIENT_PLAN)[1]
    other = openai.OpenAI(base_url=vllm_stack.base_url + "/v1", timeout=300, max_retries=0,
                          api_key=other_key)
    system = "You are a careful assistant. " * 40  # ~240 tokens: many full KV blocks
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": "Say hi."}]

    def cached(api: openai.OpenAI) -> int:
        resp = api.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                           max_tokens=2)  # type: ignore[arg-type]
        with sync_session(vllm_stack.database_url) as session:
            job = session.scalar(select(Job).where(Job.id == uuid.UUID(resp.id[9:])))
            assert job is not None and job.cached_tokens is not None
            return job.cached_tokens

    first, again, other_tenant = cached(client), cached(client), cached(other)
    assert first == 0 and again >= 200, (first, again)
    assert other_tenant == 0, other_tenant

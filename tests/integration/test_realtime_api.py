"""The realtime path against real Postgres, Redis, a Celery worker (sim engine) and the
official openai SDK."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import openai
import pytest
from redis import Redis
from sqlalchemy import select

from service.store import nul_codec
from service.store.db import sync_session
from service.store.keys import stream_key
from service.store.models.jobs import Job
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


def client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0)


def job_row(database_url: str, public_id: str) -> Job:
    job_id = uuid.UUID(public_id.split("-", 1)[1])
    with sync_session(database_url) as session:
        job = session.scalar(select(Job).where(Job.id == job_id))
        assert job is not None
        return job


def test_chat_completion_non_streaming(sim_stack: Stack, make_tenant, database_url):
    _, key = make_tenant()
    resp = client(sim_stack, key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello there"}], max_tokens=12,
        temperature=0)
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.content
    assert resp.choices[0].finish_reason in ("length", "stop")
    assert resp.service_tier == "default"
    job = job_row(database_url, resp.id)
    assert job.status == "succeeded" and job.attempt == 1 and job.worker_id == "sim-1"
    assert resp.usage.completion_tokens == job.completion_tokens <= 12
    assert resp.usage.prompt_tokens == job.prompt_tokens > 0
    assert job.created_at <= job.assigned_at <= job.started_at <= job.first_token_at
    assert job.first_token_at <= job.finished_at
    assert job.result["text"] == resp.choices[0].message.content


def test_streaming_sends_chunks_then_usage(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    chunks = list(client(sim_stack, key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "stream please"}], max_tokens=8,
        stream=True, stream_options={"include_usage": True}, service_tier="priority"))
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) >= 3
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(content)
    assert all(c.service_tier == "priority" for c in chunks)


def test_completions_endpoint(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    resp = client(sim_stack, key).completions.create(model=MODEL, prompt="Once upon",
                                                     max_tokens=5)
    assert resp.object == "text_completion" and resp.choices[0].text
    assert resp.usage.completion_tokens <= 5


def test_models_lists_served_model(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    assert MODEL in [m.id for m in client(sim_stack, key).models.list().data]


def test_bad_or_missing_key_gets_401_in_openai_shape(sim_stack: Stack):
    with pytest.raises(openai.AuthenticationError) as err:
        client(sim_stack, "fw-not-a-key").models.list()
    assert err.value.status_code == 401
    r = httpx.post(sim_stack.base_url + "/v1/chat/completions", json={})
    assert r.status_code == 401
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("body", [
    {"model": MODEL, "messages": []},
    {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": 7},
    {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]},
    {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 3},
    {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 10**7},
    {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 9},
    {"model": MODEL, "messages": "not a list"},
    {"messages": [{"role": "user", "content": "x"}]},
    [1, 2, 3],
])
def test_malformed_input_gets_400_never_500(sim_stack: Stack, make_tenant, body):
    _, key = make_tenant()
    r = httpx.post(sim_stack.base_url + "/v1/chat/completions", json=body,
                   headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_nul_characters_are_accepted_and_reach_the_engine(sim_stack: Stack, make_tenant,
                                                          database_url):
    # vLLM and OpenAI accept U+0000 (SmolLM2's tokenizer even decodes a token to it); the
    # job row stores it escaped (JSONB cannot hold it) and the worker restores it.
    _, key = make_tenant()
    api = client(sim_stack, key)
    content = "nul \u0000 inside"
    with_nul = api.chat.completions.create(model=MODEL, max_tokens=4,
                                           messages=[{"role": "user", "content": content}])
    without = api.chat.completions.create(model=MODEL, max_tokens=4,
                                          messages=[{"role": "user", "content": "nul  inside"}])
    assert with_nul.choices[0].message.content
    # The engine saw one more character than the same text without it.
    assert with_nul.usage.prompt_tokens > without.usage.prompt_tokens
    with sync_session(database_url) as session:
        row = session.get(Job, uuid.UUID(with_nul.id.split("-", 1)[1]))
        assert row is not None
        stored = row.request["messages"][0]["content"]
        assert "\x00" not in stored and nul_codec.decode(row.request)["messages"][0][
            "content"] == content


def test_invalid_json_and_unknown_model(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    r = httpx.post(sim_stack.base_url + "/v1/chat/completions", content=b"{nope",
                   headers=headers)
    assert r.status_code == 400 and "error" in r.json()
    with pytest.raises(openai.NotFoundError) as err:
        client(sim_stack, key).chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert err.value.code == "model_not_found"


def test_oversized_body_gets_413(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    big = "x" * 1_100_000
    r = httpx.post(sim_stack.base_url + "/v1/chat/completions",
                   json={"model": MODEL, "messages": [{"role": "user", "content": big}]},
                   headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_job_status_visible_to_owner_only(sim_stack: Stack, make_tenant):
    _, key_a = make_tenant("a")
    _, key_b = make_tenant("b")
    resp = client(sim_stack, key_a).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "mine"}], max_tokens=3)
    job_id = "job_" + resp.id.split("-", 1)[1]
    own = httpx.get(f"{sim_stack.base_url}/v1/jobs/{job_id}",
                    headers={"Authorization": f"Bearer {key_a}"})
    assert own.status_code == 200 and own.json()["status"] == "succeeded"
    assert own.json()["usage"]["completion_tokens"] == resp.usage.completion_tokens
    other = httpx.get(f"{sim_stack.base_url}/v1/jobs/{job_id}",
                      headers={"Authorization": f"Bearer {key_b}"})
    assert other.status_code == 404 and other.json()["error"]["type"] == "not_found_error"
    missing = httpx.get(f"{sim_stack.base_url}/v1/jobs/job_{uuid.uuid4().hex}",
                        headers={"Authorization": f"Bearer {key_a}"})
    assert missing.status_code == 404


def test_client_disconnect_cancels_job_and_frees_slot(sim_stack: Stack, make_tenant,
                                                      database_url):
    _, key = make_tenant()
    body = {"model": MODEL, "messages": [{"role": "user", "content": "a long story"}],
            "max_tokens": 2000, "stream": True}
    with httpx.stream("POST", sim_stack.base_url + "/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {key}"}, timeout=30) as r:
        assert r.status_code == 200
        public_id = r.headers["x-fairway-job"]
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                seen += 1
            if seen >= 5:
                break  # leaving the block closes the connection mid-stream
    job_id = uuid.UUID(public_id.removeprefix("job_"))

    def cancelled() -> bool:
        with sync_session(database_url) as session:
            return session.get(Job, job_id).status == "cancelled"

    wait_until(cancelled, 10, "job cancelled")
    since = time.time()
    wait_until(lambda: sim_stack.engine_idle_since("sim-1", since), 10, "engine slot freed")
    with sync_session(database_url) as session:
        job = session.get(Job, job_id)
        assert job.cancelled_at is not None and job.completion_tokens is None


def test_duplicate_delivery_runs_the_job_once(sim_stack: Stack, make_tenant, database_url,
                                              test_redis_url):
    from service.store.keys import worker_queue
    from service.store.settings import Settings
    from service.store.task_queue import RUN_JOB_TASK, make_celery

    _, key = make_tenant()
    resp = client(sim_stack, key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "once"}], max_tokens=6)
    job = job_row(database_url, resp.id)
    celery = make_celery(Settings(redis_url=test_redis_url))
    for _ in range(2):  # a broker redelivery of the same (job, attempt), twice
        celery.send_task(RUN_JOB_TASK, args=[str(job.id), job.attempt],
                         queue=worker_queue("sim-1"))
    time.sleep(1.5)
    after = job_row(database_url, resp.id)
    assert (after.status, after.attempt, after.finished_at) == ("succeeded", 1, job.finished_at)
    events = Redis.from_url(test_redis_url).xrange(stream_key(job.id))
    types = [json.loads(json.dumps(f[b"type"].decode())) for _, f in events]
    assert types.count("final") == 1
    assert sum(1 for t in types if t == "delta") == resp.usage.completion_tokens


def test_more_open_streams_than_redis_py_pools_by_default(sim_stack: Stack, make_tenant):
    """Each open stream holds a Redis connection while it waits for tokens; redis-py's asyncio
    pool stops at 100 unless told otherwise (FAIRWAY_REDIS_MAX_CONNECTIONS)."""
    import asyncio

    _, key = make_tenant()
    n = 130

    async def one(client: httpx.AsyncClient, i: int) -> tuple[int, bool]:
        body = {"model": MODEL, "max_tokens": 3, "stream": True,
                "messages": [{"role": "user", "content": f"stream {i}"}]}
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            text = "".join([chunk async for chunk in r.aiter_text()])
            return r.status_code, "[DONE]" in text and '"error"' not in text

    async def run() -> list[tuple[int, bool]]:
        limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
        async with httpx.AsyncClient(base_url=sim_stack.base_url, limits=limits, timeout=120,
                                     headers={"Authorization": f"Bearer {key}"}) as client:
            return await asyncio.gather(*(one(client, i) for i in range(n)))

    results = asyncio.run(run())
    assert results == [(200, True)] * n

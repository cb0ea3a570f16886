"""The jobs API and background responses with the real vLLM engine and the official openai SDK
(the one engine start in conftest.py is shared)."""

from __future__ import annotations

import time
import uuid

import httpx
import openai
import pytest
from sqlalchemy import select

from service.cli.bootstrap import create_tenant_with_key
from service.store.db import sync_session
from service.store.models.jobs import Job
from service.store.settings import Settings
from tests.support.services import PATIENT_PLAN
from tests.support.stack import Stack, wait_until

MODEL = "SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def api_key(vllm_stack: Stack) -> str:
    settings = Settings(database_url=vllm_stack.database_url, redis_url=vllm_stack.redis_url)
    return create_tenant_with_key(settings, f"e2e-jobs-{uuid.uuid4().hex[:6]}",
                                  plan=PATIENT_PLAN)[1]


@pytest.fixture(scope="module")
def client(vllm_stack: Stack, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=vllm_stack.base_url + "/v1", api_key=api_key, timeout=300,
                         max_retries=0)


@pytest.fixture(scope="module")
def http(vllm_stack: Stack, api_key: str) -> httpx.Client:
    return httpx.Client(base_url=vllm_stack.base_url + "/v1", timeout=60,
                        headers={"Authorization": f"Bearer {api_key}"})


def _job(vllm_stack: Stack, response_id: str) -> Job:
    with sync_session(vllm_stack.database_url) as session:
        job = session.scalar(select(Job).where(
            Job.id == uuid.UUID(response_id.removeprefix("resp_"))))
        assert job is not None
        return job


def test_background_response_polled_to_completed(client: openai.OpenAI, vllm_stack: Stack):
    resp = client.responses.create(model=MODEL, input=QUESTION, background=True,
                                   temperature=0, max_output_tokens=24,
                                   instructions="Answer in one short sentence.")
    assert resp.status == "queued" and resp.background is True
    deadline = time.monotonic() + 240
    while resp.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.5)
        resp = client.responses.retrieve(resp.id)
    assert resp.status in ("completed", "incomplete"), resp
    assert "Paris" in resp.output_text
    job = _job(vllm_stack, resp.id)
    assert job.worker_id == "vllm-1" and job.kind == "batch" and job.status == "succeeded"
    assert resp.usage is not None
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (job.prompt_tokens,
                                                                   job.completion_tokens)


def test_streamed_response_through_the_sdk_helper(client: openai.OpenAI):
    with client.responses.stream(model=MODEL, input=QUESTION, temperature=0,
                                 max_output_tokens=64) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "Paris" in final.output_text and "".join(deltas) == final.output_text


def test_background_response_cancelled_frees_the_engine(client: openai.OpenAI,
                                                        vllm_stack: Stack):
    resp = client.responses.create(model=MODEL, input="Write a very long story about a ship.",
                                   background=True, max_output_tokens=1500,
                                   extra_body={"ignore_eos": True})
    wait_until(lambda: _job(vllm_stack, resp.id).first_token_at is not None, 120,
               "the response running in vLLM", vllm_stack)
    cancelled = client.responses.cancel(resp.id)
    assert cancelled.status == "cancelled"
    since = time.time()
    wait_until(lambda: vllm_stack.engine_idle_since("vllm-1", since), 30, "vLLM slot freed",
               vllm_stack)
    assert vllm_stack.aborted_on_request("vllm-1", _job(vllm_stack, resp.id).id)
    assert client.responses.retrieve(resp.id).status == "cancelled"


def test_jobs_list_and_cancel(client: openai.OpenAI, http: httpx.Client, vllm_stack: Stack):
    done = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=8,
                                          messages=[{"role": "user", "content": QUESTION}])
    queued = client.responses.create(model=MODEL, input="Tell me a long story.",
                                     background=True, max_output_tokens=800,
                                     extra_body={"ignore_eos": True})
    queued_job = "job_" + queued.id.removeprefix("resp_")
    page = http.get("/jobs", params={"limit": 100}).json()
    ids = [j["id"] for j in page["data"]]
    assert page["object"] == "list" and ids[0] == queued_job
    assert "job_" + done.id.split("-", 1)[1] in ids
    background = http.get("/jobs", params={"class": "batch", "tier": "flex"}).json()["data"]
    assert queued_job in [j["id"] for j in background]
    first = http.get("/jobs", params={"limit": 1}).json()
    assert first["has_more"] is True and first["first_id"] == queued_job
    nxt = http.get("/jobs", params={"limit": 1, "after": first["last_id"]}).json()
    assert nxt["data"][0]["id"] == ids[1]

    r = http.post(f"/jobs/{queued_job}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    assert client.responses.retrieve(queued.id).status == "cancelled"
    finished = http.post(f"/jobs/{done.id}/cancel")
    assert finished.status_code == 409
    assert finished.json()["error"]["type"] == "conflict_error"
    since = time.time()
    wait_until(lambda: vllm_stack.engine_idle_since("vllm-1", since), 30, "vLLM idle",
               vllm_stack)

"""The Responses API (text) against real Postgres, Redis, a sim-engine worker and the official
openai SDK: waited, streamed and background responses, retrieve, cancel, and the 400s for
what Fairway does not support."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import openai
import pytest
from sqlalchemy import select

from service.store.db import sync_session
from service.store.models.jobs import Job
from service.store.models.webhooks import WebhookEvent
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"


def client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                         timeout=60)


def job_of(database_url: str, response_id: str) -> Job:
    with sync_session(database_url) as session:
        job = session.scalar(select(Job).where(
            Job.id == uuid.UUID(response_id.removeprefix("resp_"))))
        assert job is not None
        return job


def webhook_events(database_url: str, response_id: str) -> list[str]:
    """The outbox's event types for this response (service.store.response_events)."""
    with sync_session(database_url) as session:
        return list(session.scalars(select(WebhookEvent.type).where(
            WebhookEvent.data["id"].astext == response_id)))


def test_waited_response_is_completed_with_text_and_usage(sim_stack: Stack, make_tenant,
                                                          database_url):
    _, key = make_tenant()
    resp = client(sim_stack, key).responses.create(
        model=MODEL, input="Say hello", instructions="Be brief.", max_output_tokens=12,
        temperature=0, metadata={"run": "t1"})
    assert resp.object == "response" and resp.id.startswith("resp_")
    assert resp.status in ("completed", "incomplete")
    assert resp.output_text and resp.output[0].type == "message"
    assert resp.output[0].content[0].type == "output_text"
    assert resp.metadata == {"run": "t1"} and resp.instructions == "Be brief."
    assert resp.background is False and resp.service_tier == "default"
    job = job_of(database_url, resp.id)
    assert job.endpoint == "responses" and job.kind == "realtime" and job.status == "succeeded"
    assert resp.usage.output_tokens == job.completion_tokens <= 12
    assert resp.usage.input_tokens == job.prompt_tokens > 0
    assert resp.usage.total_tokens == job.prompt_tokens + job.completion_tokens
    assert resp.output_text == job.result["text"]
    # The instructions reached the model as a system message before the input.
    assert job.request["messages"] == [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "Say hello"}]
    # Retrieve gives the same object.
    again = client(sim_stack, key).responses.retrieve(resp.id)
    assert again.model_dump() == resp.model_dump()
    assert webhook_events(database_url, resp.id) == []  # its client has the answer in hand


def test_background_response_is_queued_then_polled_to_completed(sim_stack: Stack, make_tenant,
                                                                database_url):
    _, key = make_tenant()
    api = client(sim_stack, key)
    resp = api.responses.create(
        model=MODEL, background=True, max_output_tokens=10,
        input=[{"role": "developer", "content": "Answer in one word."},
               {"role": "user", "content": [{"type": "input_text", "text": "Capital "},
                                            {"type": "input_text", "text": "of France?"}]}])
    assert resp.status == "queued" and resp.background is True and resp.output == []
    assert resp.service_tier == "flex" and resp.usage is None
    final = resp
    deadline = time.monotonic() + 60
    while final.status in ("queued", "in_progress") and time.monotonic() < deadline:
        time.sleep(0.2)
        final = api.responses.retrieve(resp.id)
    assert final.status in ("completed", "incomplete"), final
    assert webhook_events(database_url, resp.id) == [f"response.{final.status}"]
    assert final.output_text and final.usage.output_tokens <= 10
    job = job_of(database_url, resp.id)
    # Offline work: the batch class at flex priority, with the flex deadline.
    assert (job.kind, job.priority, job.service_tier) == ("batch", 2, "flex")
    assert job.deadline_at is not None
    assert 590 <= (job.deadline_at - job.created_at).total_seconds() <= 610
    assert job.request["messages"] == [
        {"role": "developer", "content": "Answer in one word."},
        {"role": "user", "content": "Capital of France?"}]


def test_streamed_response_events_accumulate_in_the_sdk_helper(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    # Room enough for the sim engine to stop by itself (EOS), so the response completes.
    with client(sim_stack, key).responses.stream(model=MODEL, input="Stream please",
                                                 max_output_tokens=400) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed" and final.status == "completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) >= 2 and "".join(deltas) == final.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.usage.output_tokens == len(deltas) + 1  # one token a delta, then EOS


def test_raw_stream_is_server_sent_events_with_event_names(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    with httpx.stream("POST", sim_stack.base_url + "/v1/responses", timeout=60,
                      headers={"Authorization": f"Bearer {key}"},
                      json={"model": MODEL, "input": "hi", "stream": True,
                            "max_output_tokens": 4}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        body = r.read().decode()
    blocks = [b for b in body.split("\n\n") if b.strip()]
    assert blocks[0].startswith("event: response.created\ndata: {")
    # Cut at max_output_tokens: the response is incomplete, and says why.
    assert blocks[-1].startswith("event: response.incomplete\ndata: {")
    final = json.loads(blocks[-1].split("data: ", 1)[1])["response"]
    assert final["status"] == "incomplete"
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["usage"]["output_tokens"] == 4
    assert "[DONE]" not in body


def test_background_response_cancelled_while_running_frees_the_slot(sim_stack: Stack,
                                                                   make_tenant, database_url):
    _, key = make_tenant()
    api = client(sim_stack, key)
    resp = api.responses.create(model=MODEL, input="a long story", background=True,
                                max_output_tokens=1500, extra_body={"ignore_eos": True})
    wait_until(lambda: api.responses.retrieve(resp.id).status == "in_progress", 30,
               "response in progress", sim_stack)
    wait_until(lambda: job_of(database_url, resp.id).first_token_at is not None, 30,
               "first token", sim_stack)
    cancelled = api.responses.cancel(resp.id)
    assert cancelled.status == "cancelled" and cancelled.error is None
    since = time.time()
    wait_until(lambda: sim_stack.engine_idle_since("sim-1", since), 15, "engine slot freed",
               sim_stack)
    job = job_of(database_url, resp.id)
    assert job.status == "cancelled" and job.completion_tokens is None
    assert sim_stack.aborted_on_request("sim-1", job.id)
    assert api.responses.retrieve(resp.id).status == "cancelled"
    assert webhook_events(database_url, resp.id) == ["response.cancelled"]
    # A finished response cannot be cancelled again.
    with pytest.raises(openai.APIStatusError) as err:
        api.responses.cancel(resp.id)
    assert err.value.status_code == 409


@pytest.mark.parametrize(("extra", "param"), [
    ({"tools": [{"type": "function", "name": "f", "parameters": {}}]}, "tools"),
    ({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "what is this?"},
        {"type": "input_image", "image_url": "https://example.com/a.png"}]}]},
     "input[0].content[1]"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
     "input[0].content[0]"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, "input[0]"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}}, "text.format"),
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"background": True, "store": False}, "store"),
    ({"max_output_tokens": 10**6}, "max_output_tokens"),
])
def test_unsupported_parameters_get_a_400_naming_them(sim_stack: Stack, make_tenant, extra,
                                                      param):
    _, key = make_tenant()
    r = httpx.post(sim_stack.base_url + "/v1/responses", timeout=30,
                   headers={"Authorization": f"Bearer {key}"},
                   json={"model": MODEL, "input": "hi", **extra})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_other_tenants_and_other_jobs_are_not_responses(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    _, other_key = make_tenant()
    resp = client(sim_stack, key).responses.create(model=MODEL, input="mine",
                                                   max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client(sim_stack, other_key).responses.retrieve(resp.id)
    with pytest.raises(openai.NotFoundError):
        client(sim_stack, other_key).responses.cancel(resp.id)
    chat = client(sim_stack, key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=2)
    with pytest.raises(openai.NotFoundError):  # a chat completion is a job, not a response
        client(sim_stack, key).responses.retrieve("resp_" + chat.id.split("-", 1)[1])

"""response_format against a stack whose only worker runs the simulated engine, which has no
structured-output decoding: the official openai SDK gets a 400 naming the parameter, never a
free-text answer; a batch line asking for it ends in the error file, naming it too."""

from __future__ import annotations

import io
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest
from sqlalchemy import func, select

from service.cli.bootstrap import create_tenant_with_key
from service.store.db import sync_session
from service.store.models.jobs import Job
from service.store.settings import Settings
from tests.support.stack import Stack, own_stack, wait_until

MODEL = "sim-model"
MESSAGES = [{"role": "user", "content": "Name a city."}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
AS_SCHEMA = {"type": "json_schema", "json_schema": {"name": "City", "schema": SCHEMA}}


def client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0,
                         timeout=30)


def error_of(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.response.json()
    assert set(body) == {"error"}
    return dict(body["error"])


@pytest.mark.parametrize("response_format", [{"type": "json_object"}, AS_SCHEMA])
@pytest.mark.parametrize("stream", [False, True])
def test_an_engine_without_it_gets_a_400_naming_response_format(
        sim_stack: Stack, make_tenant, response_format: dict[str, Any], stream: bool) -> None:
    api = client(sim_stack, make_tenant()[1])
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8,
                                    response_format=response_format, stream=stream)
    error = error_of(info.value)
    assert error["param"] == "response_format" and error["code"] == "unsupported_value"
    assert response_format["type"] in error["message"]


def test_completions_too(sim_stack: Stack, make_tenant) -> None:
    api = client(sim_stack, make_tenant()[1])
    with pytest.raises(openai.BadRequestError) as info:
        api.completions.create(model=MODEL, prompt="{", max_tokens=8,
                               extra_body={"response_format": {"type": "json_object"}})
    assert error_of(info.value)["param"] == "response_format"


def test_text_runs_as_before(sim_stack: Stack, make_tenant) -> None:
    api = client(sim_stack, make_tenant()[1])
    resp = api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8,
                                       response_format={"type": "text"})
    assert resp.choices[0].message.content


def test_a_bad_schema_is_a_400_naming_the_schema(sim_stack: Stack, make_tenant) -> None:
    api = client(sim_stack, make_tenant()[1])
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {
                "name": "City", "schema": {"type": "object", "required": "city"}}})
    error = error_of(info.value)
    assert error["param"] == "response_format.json_schema.schema"
    assert "not a valid JSON Schema" in error["message"]


def test_a_batch_line_asking_for_it_lands_in_the_error_file_naming_it(
        sim_stack: Stack, make_tenant) -> None:
    api = client(sim_stack, make_tenant()[1])

    def line(custom_id: str, **body: Any) -> bytes:
        return json.dumps({"custom_id": custom_id, "method": "POST",
                           "url": "/v1/chat/completions",
                           "body": {"model": MODEL, "messages": MESSAGES, "max_tokens": 8,
                                    "temperature": 0, **body}}).encode() + b"\n"

    data = line("plain") + line("json", response_format={"type": "json_object"}) + \
        line("schema", response_format=AS_SCHEMA)
    f = api.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    batch = api.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                               completion_window="24h")
    deadline = time.monotonic() + 60
    while batch.status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.2)
        batch = api.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    out = [json.loads(x) for x in api.files.content(batch.output_file_id).text.splitlines()]
    assert [x["custom_id"] for x in out] == ["plain"]
    assert batch.error_file_id is not None
    errors = {x["custom_id"]: x for x in
              map(json.loads, api.files.content(batch.error_file_id).text.splitlines())}
    assert set(errors) == {"json", "schema"}
    for entry in errors.values():
        assert entry["response"]["status_code"] == 400
        error = entry["response"]["body"]["error"]
        assert error["param"] == "response_format" and error["code"] == "unsupported_value"
        assert "response_format" in error["message"]


def test_with_no_live_worker_the_worker_that_gets_it_refuses_it() -> None:
    """No live worker serves the model when the request comes: the API cannot know, accepts
    it, and the sim worker that comes up and takes the job refuses it; the client still
    gets a 400 naming response_format, not free text."""
    env = {"FAIRWAY_SERVED_MODEL_NAME": MODEL, "FAIRWAY_HEARTBEAT_SECONDS": "0.5",
           "FAIRWAY_LEASE_SECONDS": "5", "FAIRWAY_SLO_ADMISSION": "false"}
    with own_stack("so_late", env) as stack:
        settings = Settings(database_url=stack.database_url, redis_url=stack.redis_url)
        api = client(stack, create_tenant_with_key(settings, "so-late")[1])
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(api.chat.completions.create, model=MODEL, messages=MESSAGES,
                                 max_tokens=8, response_format={"type": "json_object"},
                                 service_tier="flex")  # no latency target to miss
            wait_until(lambda: _jobs(stack.database_url) == 1, 20, "the job queued", stack)
            stack.start_worker("so-late-1")
            with pytest.raises(openai.BadRequestError) as info:
                answer.result(timeout=60)
    error = error_of(info.value)
    assert error["param"] == "response_format" and error["code"] == "unsupported_value"


def _jobs(database_url: str) -> int:
    with sync_session(database_url) as session:
        return int(session.scalar(select(func.count()).select_from(Job)) or 0)

"""Text Postgres cannot store (U+0000, a lone surrogate) quoted back in an error message or as
an object key: the message is stored and answered with the text escaped, never a 500 and never
a batch that fails as a whole for one bad line."""

from __future__ import annotations

import io
import json
import time

import httpx
import openai
import pytest

from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.stack import Stack

MODEL = "sim-model"
CHAT = "/v1/chat/completions"


def _line(custom_id: str, **body: object) -> str:
    request = {"model": MODEL, "max_tokens": 3, "temperature": 0,
               "messages": [{"role": "user", "content": "hi"}], **body}
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT, "body": request})


def test_poison_quoted_by_a_line_error_does_not_fail_the_batch(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=30)
    # Each bad line's message quotes its poison: the role, the tier, the format type, a
    # second model; a model with NUL on the first line would reach the jobs' model column.
    lines = [_line("ok-1"),
             _line("role", messages=[{"role": "us\x00er", "content": "hi"}]),
             _line("tier", service_tier="fl\x00ex"),
             _line("format", response_format={"type": "te\x00xt"}),
             _line("model", model="sim\x00model"),
             _line("ok-2")]
    data = ("\n".join(lines) + "\n").encode()
    f = api.files.create(file=("poison.jsonl", io.BytesIO(data)), purpose="batch")
    batch = api.batches.create(input_file_id=f.id, endpoint=CHAT, completion_window="24h")
    deadline = time.monotonic() + 60
    while batch.status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.3)
        batch = api.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed,
            batch.request_counts.failed) == (6, 2, 4)
    assert batch.errors is not None and batch.errors.data
    assert all("\x00" not in (e.message or "") for e in batch.errors.data)
    assert batch.error_file_id and batch.output_file_id
    errors = [json.loads(x) for x in api.files.content(batch.error_file_id).text.splitlines()]
    by_id = {e["custom_id"]: e["error"] for e in errors}
    assert set(by_id) == {"role", "tier", "format", "model"}
    assert "us\\u0000er" in by_id["role"]["message"], by_id["role"]
    assert by_id["role"]["param"] == "body.messages[0].role"
    assert by_id["model"]["param"] == "body.model"
    done = {json.loads(x)["custom_id"] for x in api.files.content(
        batch.output_file_id).text.splitlines()}
    assert done == {"ok-1", "ok-2"}


def test_a_lone_surrogate_in_a_batch_line_key_is_an_error_line(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=30)
    data = (_line("ok") + "\n"
            + _line("bias", logit_bias={"\ud800": 1}) + "\n").encode()
    f = api.files.create(file=("keys.jsonl", io.BytesIO(data)), purpose="batch")
    batch = api.batches.create(input_file_id=f.id, endpoint=CHAT, completion_window="24h")
    deadline = time.monotonic() + 60
    while batch.status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.3)
        batch = api.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    assert batch.request_counts is not None and batch.request_counts.failed == 1


def _raw(stack: Stack, method: str, path: str, raw: bytes, token: str) -> httpx.Response:
    return httpx.request(method, stack.base_url + path, content=raw, timeout=30, headers={
        "authorization": f"Bearer {token}", "content-type": "application/json"})


CHAT_BODY = b'"model": "sim-model", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]'


@pytest.mark.parametrize(("path", "body", "param"), [
    (CHAT, b'{' + CHAT_BODY + b', "metadata": {"a\\ud800": "v"}}', "metadata"),
    (CHAT, b'{' + CHAT_BODY + b', "logit_bias": {"\\udfff": 1}}', "logit_bias"),
    ("/v1/responses", b'{"model": "sim-model", "input": "x", "metadata": {"\\ud83d": "v"}}',
     "metadata"),
    ("/v1/batches", b'{"input_file_id": "file-x", "endpoint": "/v1/chat/completions", '
     b'"completion_window": "24h", "metadata": {"k\\ud800": "v"}}', "metadata"),
])
def test_a_lone_surrogate_in_an_object_key_is_a_400(sim_stack: Stack, make_tenant,
                                                     path: str, body: bytes, param: str):
    _, key = make_tenant()
    resp = _raw(sim_stack, "POST", path, body, key)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and "surrogate" in error["message"], error
    assert error["param"].startswith(param), error
    assert "\\ud" in error["param"], error  # the key, quoted visibly


def test_a_lone_surrogate_in_an_admin_object_key_is_a_400(sim_stack: Stack):
    for method, path, body in (
            ("POST", "/admin/tenants", b'{"name": "t", "\\ud800": "v"}'),
            ("PUT", "/admin/tiers/x", b'{"weight": 1, "quotas": {"\\ud800": 1}}')):
        resp = _raw(sim_stack, method, path, body, DEV_ADMIN_TOKEN)
        assert resp.status_code == 400, (path, resp.text)
        assert resp.json()["error"]["type"] == "invalid_request_error"

"""Input Postgres cannot store, or bodies past the limit, get a clear error at the door or
are isolated to their own batch line; none of it gets a 500 or wedges a batch."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import httpx
import openai

from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.admin import NO_LIMITS
from tests.support.stack import Stack

MODEL = "sim-model"
CHAT = "/v1/chat/completions"


def _post_raw(stack: Stack, key: str, path: str, raw: bytes) -> httpx.Response:
    return httpx.post(stack.base_url + path, content=raw, timeout=30, headers={
        "authorization": f"Bearer {key}", "content-type": "application/json"})


def test_a_lone_surrogate_in_a_chat_message_is_a_400_naming_the_field(sim_stack: Stack,
                                                                        make_tenant):
    _, key = make_tenant()
    raw = (b'{"model": "sim-model", "max_tokens": 4, "messages": '
           b'[{"role": "user", "content": "a\\ud800b"}]}')
    resp = _post_raw(sim_stack, key, "/v1/chat/completions", raw)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == "messages[0].content"
    assert "surrogate" in error["message"] and error["type"] == "invalid_request_error"


def test_a_lone_surrogate_in_a_completion_prompt_or_user_is_a_400(sim_stack: Stack,
                                                                   make_tenant):
    _, key = make_tenant()
    for raw, param in (
            (b'{"model": "sim-model", "prompt": "x\\udfff", "max_tokens": 2}', "prompt"),
            (b'{"model": "sim-model", "prompt": "x", "user": "\\ud83d", "max_tokens": 2}',
             "user")):
        resp = _post_raw(sim_stack, key, "/v1/completions", raw)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == param


def test_nul_in_a_chat_message_is_still_served(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    raw = (b'{"model": "sim-model", "max_tokens": 4, "temperature": 0, "messages": '
           b'[{"role": "user", "content": "a\\u0000b"}]}')
    assert _post_raw(sim_stack, key, "/v1/chat/completions", raw).status_code == 200


def test_nul_in_a_path_or_query_parameter_is_a_400_naming_it(sim_stack: Stack, make_tenant):
    # Found by the API fuzz test (test_api_fuzz.py): these reached SQL and failed as a 500.
    _, key = make_tenant()
    tenant = {"authorization": f"Bearer {key}"}
    admin = {"authorization": f"Bearer {DEV_ADMIN_TOKEN}"}
    tier = {"weight": 1, "allowed_service_tiers": ["default"], "ttft_slo_ms": 1000,
            "tpot_slo_ms": 100, "quotas": NO_LIMITS}
    for method, path, headers, body, param in (
            ("GET", "/v1/files?purpose=a%00b", tenant, None, "purpose"),
            ("GET", "/admin/audit?target_id=a%00b", admin, None, "target_id"),
            ("DELETE", "/admin/tiers/a%00b", admin, None, "name"),
            ("PUT", "/admin/tiers/a%00b", admin, tier, "name")):
        resp = httpx.request(method, sim_stack.base_url + path, headers=headers, json=body,
                             timeout=30)
        assert resp.status_code == 400, (path, resp.text)
        error = resp.json()["error"]
        assert error["param"] == param and "NUL" in error["message"], error


def test_a_file_expiry_that_is_not_ascii_digits_is_a_400(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    # "²".isdigit(), but int("²") raises: that was a 500. Fullwidth "3600" is refused too.
    for seconds in ("²", "\uff13\uff16\uff10\uff10", "-3600"):
        resp = httpx.post(sim_stack.base_url + "/v1/files", timeout=30,
                          headers={"authorization": f"Bearer {key}"},
                          data={"purpose": "batch", "expires_after[seconds]": seconds},
                          files={"file": ("in.jsonl", b"{}\n")})
        assert resp.status_code == 400, (seconds, resp.text)
        assert resp.json()["error"]["param"] == "expires_after"


def _chunks(total: int, size: int = 64 * 1024) -> Iterator[bytes]:
    yield b'{"model": "sim-model", "messages": [{"role": "user", "content": "'
    sent = 0
    while sent < total:
        yield b"a" * size
        sent += size
    yield b'"}]}'


def test_a_chunked_body_over_the_limit_gets_413(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    started = time.monotonic()
    resp = httpx.post(sim_stack.base_url + "/v1/chat/completions", content=_chunks(20_000_000),
                      headers={"authorization": f"Bearer {key}",
                               "content-type": "application/json"}, timeout=60)
    assert resp.status_code == 413, resp.text[:200]
    assert resp.json()["error"]["code"] == "request_too_large"
    assert "content-length" not in {k.lower() for k in resp.request.headers}
    assert time.monotonic() - started < 30


def test_batch_metadata_with_nul_is_a_400(sim_stack: Stack, make_tenant):
    _, key = make_tenant()
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0)
    line = {"custom_id": "a", "method": "POST", "url": CHAT,
            "body": {"model": MODEL, "max_tokens": 2,
                     "messages": [{"role": "user", "content": "hi"}]}}
    f = api.files.create(file=("in.jsonl", io.BytesIO(json.dumps(line).encode() + b"\n")),
                         purpose="batch")
    try:
        api.batches.create(input_file_id=f.id, endpoint=CHAT, completion_window="24h",
                           metadata={"note": "a\x00b"})
    except openai.BadRequestError as exc:
        assert exc.body["param"] == "metadata.note"  # type: ignore[index]
    else:
        raise AssertionError("metadata with NUL was accepted")


def test_poison_batch_lines_go_to_the_error_file_and_the_rest_runs(sim_stack: Stack,
                                                                   make_tenant):
    _, key = make_tenant()
    api = openai.OpenAI(base_url=sim_stack.base_url + "/v1", api_key=key, max_retries=0,
                        timeout=30)

    def line(custom_id: str, content: str = "hi") -> str:
        return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT,
                           "body": {"model": MODEL, "max_tokens": 3, "temperature": 0,
                                    "messages": [{"role": "user", "content": content}]}})

    # json.dumps writes U+0000 as \u0000 and a lone surrogate as \ud800: both valid JSON.
    lines = [line("ok-1"), line("nul\x00id"), line("bad-body", "x\ud800y"),
             line("ok-2", "with \x00 inside")]
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
            batch.request_counts.failed) == (4, 2, 2)
    assert batch.error_file_id and batch.output_file_id
    errors = [json.loads(x) for x in api.files.content(batch.error_file_id).text.splitlines()]
    by_line = {e["error"]["line"]: e for e in errors}
    assert set(by_line) == {2, 3}
    assert by_line[2]["error"]["param"] == "custom_id"
    assert by_line[3]["custom_id"] == "bad-body"
    assert by_line[3]["error"]["param"] == "body.messages[0].content"
    done = {json.loads(x)["custom_id"] for x in api.files.content(
        batch.output_file_id).text.splitlines()}
    assert done == {"ok-1", "ok-2"}

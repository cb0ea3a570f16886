"""Where Fairway used to differ from OpenAI's API, seen through the official openai SDK
against the real API process, dispatcher and sim worker: request ids, models, refusal
wording and params, quota 429 headers, suspended tenants, unattainable deadlines."""

from __future__ import annotations

import json
import re
import time
import uuid

import httpx
import openai
import pytest
from redis import Redis

from service.store.keys import outlook_key
from tests.support.admin import Admin
from tests.support.services import PATIENT_PLAN
from tests.support.stack import Stack, wait_until

MODEL = "sim-model"
MESSAGES = [{"role": "user", "content": "hello"}]
GENERATED = re.compile(r"req_[0-9a-f]{32}")


@pytest.fixture
def admin(sim_stack: Stack) -> Admin:
    return Admin(sim_stack.base_url)


def client(stack: Stack, key: str, **kw: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url + "/v1", api_key=key, max_retries=0, **kw)  # type: ignore[arg-type]


def new_key(admin: Admin, plan: str = PATIENT_PLAN) -> tuple[str, str]:
    # A 60 s time-to-first-token target: the door's load shedding (429) stays out of these
    # tests on a busy machine.
    return admin.create_tenant(f"parity-{uuid.uuid4().hex[:8]}", plan)


def test_every_response_has_a_request_id_the_sdk_reads(sim_stack: Stack, admin: Admin):
    _, key = new_key(admin)
    api = client(sim_stack, key)
    done = api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)  # type: ignore[arg-type]
    assert GENERATED.fullmatch(done._request_id or ""), done._request_id
    with api.chat.completions.with_streaming_response.create(
            model=MODEL, messages=MESSAGES, max_tokens=4, stream=True) as stream:  # type: ignore[arg-type]
        assert GENERATED.fullmatch(stream.headers["x-request-id"])
        assert any(stream.iter_lines())
    assert GENERATED.fullmatch(api.models.list()._request_id or "")  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError) as missing:
        api.chat.completions.create(model="no-such-model", messages=MESSAGES)  # type: ignore[arg-type]
    assert GENERATED.fullmatch(missing.value.request_id or "")
    with pytest.raises(openai.AuthenticationError) as bad_key:
        client(sim_stack, "fw-not-a-key").models.list()
    assert GENERATED.fullmatch(bad_key.value.request_id or "")


def test_a_clients_request_id_is_kept_and_finds_the_log_lines(sim_stack: Stack,
                                                              admin: Admin):
    _, key = new_key(admin)
    trace = f"trace-{uuid.uuid4().hex[:12]}"
    api = client(sim_stack, key, default_headers={"X-Request-Id": trace})
    done = api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)  # type: ignore[arg-type]
    assert done._request_id == trace
    job_id = done.id.split("-", 1)[1]
    deadline = time.monotonic() + 10
    lines: list[dict[str, object]] = []
    while time.monotonic() < deadline and not lines:
        text = sim_stack.procs["api"].log_path.read_text(errors="replace")
        lines = [json.loads(line) for line in text.splitlines()
                 if trace in line and line.startswith("{")]
        time.sleep(0.2)
    created = [line for line in lines if line.get("msg") == "job created"]
    assert created and created[0]["request_id"] == trace, lines
    assert uuid.UUID(str(created[0]["job_id"])).hex == job_id  # the request finds its job
    # An id that is not a safe token is replaced, not echoed.
    odd = client(sim_stack, key, default_headers={"X-Request-Id": "a b;c"})
    assert GENERATED.fullmatch(odd.models.list()._request_id or "")  # type: ignore[attr-defined]


def test_models_retrieve_and_created_times(sim_stack: Stack, admin: Admin):
    _, key = new_key(admin)
    api = client(sim_stack, key)
    listed = {m.id: m for m in api.models.list().data}
    assert MODEL in listed
    now = time.time()
    assert all(0 < m.created <= now + 1 for m in listed.values()), listed
    model = api.models.retrieve(MODEL)
    assert (model.id, model.object, model.owned_by) == (MODEL, "model", "fairway")
    assert model.created == listed[MODEL].created  # recorded once, the same everywhere
    for unknown in ("no-such-model", "org/no-such-model"):
        with pytest.raises(openai.NotFoundError) as info:
            api.models.retrieve(unknown)
        body = info.value.body
        assert isinstance(body, dict)
        assert (body["code"], body["param"]) == ("model_not_found", "model")
        assert body["message"] == (f"The model '{unknown}' does not exist or you do not have "
                                   f"access to it.")


@pytest.mark.parametrize(("extra", "param", "code"), [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools",
     "unsupported_parameter"),
    ({"logprobs": True}, "logprobs", "unsupported_parameter"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_type"),
    ({"temperature": 7}, "temperature", "decimal_above_max_value"),
    ({"messages": []}, "messages", "empty_array"),
])
def test_refusals_name_the_param_in_openai_words(sim_stack: Stack, admin: Admin,
                                                 extra: dict[str, object], param: str,
                                                 code: str):
    _, key = new_key(admin)
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4, **extra}
    with pytest.raises(openai.BadRequestError) as info:
        client(sim_stack, key).chat.completions.create(**body)  # type: ignore[call-overload]
    err = info.value
    assert (err.param, err.code, err.type) == (param, code, "invalid_request_error")
    assert "Value error" not in err.message and "Input should" not in err.message
    assert f"'{param}'" in err.message, err.message


def test_quota_429_names_the_limit_and_carries_rate_limit_headers(sim_stack: Stack,
                                                                  admin: Admin):
    tenant_id, key = new_key(admin)
    admin.set_quotas(tenant_id, requests_per_minute=1, tokens_per_minute=10_000)
    api = client(sim_stack, key)
    api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)  # type: ignore[arg-type]
    with pytest.raises(openai.RateLimitError) as info:
        api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)  # type: ignore[arg-type]
    err = info.value
    assert err.code == "rate_limit_exceeded"
    message = err.body["message"]  # type: ignore[index]
    assert re.fullmatch(r"Rate limit reached for requests per minute \(RPM\): Limit 1, Used 1, "
                        r"Requested 1\. Please try again in [0-9.ms]+\.", message), message
    h = err.response.headers
    assert 1 <= int(h["retry-after"]) <= 60
    assert (h["x-ratelimit-limit-requests"], h["x-ratelimit-remaining-requests"]) == ("1", "0")
    assert h["x-ratelimit-reset-requests"].endswith("s")
    assert h["x-ratelimit-limit-tokens"] == "10000"
    assert 9_900 < int(h["x-ratelimit-remaining-tokens"]) <= 10_000  # refunded to real usage
    assert GENERATED.fullmatch(err.request_id or "")


def test_a_suspended_tenant_is_told_so_with_403(sim_stack: Stack, admin: Admin):
    tenant_id, key = new_key(admin)
    admin.ok("PATCH", f"/admin/tenants/{tenant_id}", json={"suspended": True})
    with pytest.raises(openai.PermissionDeniedError) as info:
        client(sim_stack, key).models.list()
    err = info.value
    assert (err.status_code, err.type, err.code) == (403, "permission_error", "tenant_suspended")
    assert "suspended" in err.message
    with pytest.raises(openai.AuthenticationError):  # an unknown key still gets 401
        client(sim_stack, "fw-" + "x" * 40).models.list()


def wait_for_outlook(stack: Stack) -> None:
    """The door judges deadlines by the dispatcher's outlook; a fresh stack has none yet."""
    redis = Redis.from_url(stack.redis_url)
    wait_until(lambda: redis.get(outlook_key(MODEL)) is not None, 30, "an outlook", stack)


def test_an_unattainable_deadline_is_a_400_that_says_the_shortest(sim_stack: Stack,
                                                                  admin: Admin):
    _, key = new_key(admin)
    wait_for_outlook(sim_stack)
    api = client(sim_stack, key)
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4,  # type: ignore[arg-type]
                                    extra_body={"deadline_ms": 1})
    err = info.value
    assert (err.param, err.code) == ("deadline_ms", "deadline_unattainable")
    found = re.search(r"shortest attainable deadline_ms for it is (\d+)", err.message)
    assert found, err.message
    shortest = int(found.group(1))
    assert shortest > 1
    # Above what it names, the request is served (with room for a busy test machine's load).
    done = api.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4,  # type: ignore[arg-type]
                                       extra_body={"deadline_ms": max(shortest * 3, 10_000)})
    assert done.choices[0].message.content


@pytest.mark.parametrize(("method", "path", "status"), [
    ("POST", "/v1/embeddings", 404), ("GET", "/v1/nope", 404),
    ("GET", "/v1/chat/completions", 405)])
def test_unknown_routes_answer_in_openai_shape(sim_stack: Stack, admin: Admin, method: str,
                                               path: str, status: int):
    _, key = new_key(admin)
    resp = httpx.request(method, sim_stack.base_url + path, timeout=30, json={},
                         headers={"authorization": f"Bearer {key}"})
    assert resp.status_code == status
    assert GENERATED.fullmatch(resp.headers["x-request-id"])
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["message"].endswith(f"({method} {path}).")


def test_responses_refuse_an_unattainable_deadline_too(sim_stack: Stack, admin: Admin):
    # The same door as completions (service/api/door.py): a 400 before any quota is taken.
    _, key = new_key(admin)
    wait_for_outlook(sim_stack)
    with pytest.raises(openai.BadRequestError) as info:
        client(sim_stack, key).responses.create(model=MODEL, input="hi", max_output_tokens=4,
                                                extra_body={"deadline_ms": 1})
    assert (info.value.param, info.value.code) == ("deadline_ms", "deadline_unattainable")

"""Structured outputs on the real engine (vLLM's grammar backend on the CPU build), through
the official openai SDK: json_object output parses as JSON, json_schema output parses and is
valid against its schema, streamed or not, and the SDK's own `parse()` helper works."""

from __future__ import annotations

import json
import uuid

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from service.cli.bootstrap import create_tenant_with_key
from service.store.heartbeats import STRUCTURED_OUTPUTS
from service.store.settings import Settings
from tests.support.services import PATIENT_PLAN
from tests.support.stack import Stack

MODEL = "SmolLM2-135M-Instruct"
# A small schema: the model is tiny, and the JSON must close within max_tokens.
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                         "country": {"type": "string", "maxLength": 24}},
        "required": ["city", "country"], "additionalProperties": False}
ASK_CITY = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]


@pytest.fixture(scope="module")
def client(vllm_stack: Stack) -> openai.OpenAI:
    settings = Settings(database_url=vllm_stack.database_url, redis_url=vllm_stack.redis_url)
    key = create_tenant_with_key(settings, f"e2e-so-{uuid.uuid4().hex[:6]}",
                                 plan=PATIENT_PLAN)[1]
    return openai.OpenAI(base_url=vllm_stack.base_url + "/v1", api_key=key, timeout=300,
                         max_retries=0)


def test_the_worker_advertises_the_capability(vllm_stack: Stack) -> None:
    beat = vllm_stack.heartbeat("vllm-1") or {}
    assert STRUCTURED_OUTPUTS in beat.get("capabilities", [])  # type: ignore[operator]


def test_json_object_output_parses(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=96, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Describe a cat as a JSON object with a name "
                                              "and an age. Keep it short."}])
    choice = resp.choices[0]
    assert choice.finish_reason == "stop", choice  # the grammar closed the object
    assert isinstance(json.loads(choice.message.content or ""), dict)


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_output_is_valid_against_the_schema(client: openai.OpenAI,
                                                        stream: bool) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "City", "schema": CITY,
                                                  "strict": True}}
    if stream:
        chunks = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=64,
                                                messages=ASK_CITY, response_format=fmt,
                                                stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        resp = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=64,
                                              messages=ASK_CITY, response_format=fmt)
        assert resp.choices[0].finish_reason == "stop", resp
        text = resp.choices[0].message.content or ""
    value = json.loads(text)
    jsonschema.validate(value, CITY)
    assert set(value) == {"city", "country"}


class City(BaseModel):
    city: str
    country: str


def test_the_sdk_parse_helper_gets_a_typed_answer(client: openai.OpenAI) -> None:
    resp = client.chat.completions.parse(model=MODEL, temperature=0, max_tokens=64,
                                         messages=ASK_CITY, response_format=City)
    parsed = resp.choices[0].message.parsed
    assert isinstance(parsed, City) and parsed.city


def test_a_schema_the_backend_cannot_compile_is_a_400_not_free_text(
        client: openai.OpenAI) -> None:
    # Valid JSON Schema (so the API accepts it), but a `$ref` to nowhere: vLLM's backend
    # refuses it when the request is submitted, and the job fails with a 400.
    broken = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}},
              "required": ["a"]}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL, temperature=0, max_tokens=16, messages=ASK_CITY,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "Broken", "schema": broken}})
    assert info.value.status_code == 400 and info.value.code == "invalid_request"

"""response_format at the door: what is accepted, what is refused and which parameter a
refusal names, how it is stored (realtime and batch lines), and the catalog's capability
answer the API refuses by."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import ValidationError

from service.batches.validation import LineError, LineLimits, LineValidator, ValidLine
from service.jobs.schemas import ChatCompletionRequest, CompletionRequest
from service.store.heartbeats import STRUCTURED_OUTPUTS
from service.store.settings import EngineSettings, Settings
from service.web.catalog import ModelCatalog

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}},
          "required": ["city"], "additionalProperties": False}
MESSAGES = [{"role": "user", "content": "hi"}]


def chat(response_format: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": MESSAGES, "response_format": response_format})


def refusal(response_format: Any) -> tuple[tuple[str | int, ...], str]:
    with pytest.raises(ValidationError) as info:
        chat(response_format)
    first = info.value.errors()[0]
    return first["loc"], first["msg"]


def test_the_three_kinds_are_accepted_and_stored_with_the_wire_names() -> None:
    assert not chat({"type": "text"}).response_format.is_structured  # type: ignore[union-attr]
    assert chat({"type": "json_object"}).response_format.is_structured  # type: ignore[union-attr]
    body = chat({"type": "json_schema",
                 "json_schema": {"name": "City", "schema": SCHEMA, "strict": True}})
    stored = body.model_dump(mode="json", exclude_none=True)  # what the API stores
    assert stored["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "City", "schema": SCHEMA,
                                               "strict": True}}
    assert "response_format" not in chat(None).model_dump(mode="json", exclude_none=True)


def test_completions_take_it_too() -> None:
    body = CompletionRequest.model_validate({"model": "m", "prompt": "p",
                                             "response_format": {"type": "json_object"}})
    assert body.response_format is not None and body.response_format.type == "json_object"


@pytest.mark.parametrize("schema, why", [
    ({"type": "objekt"}, "is not valid under any of the given schemas"),
    ({"type": "object", "properties": {"a": {"type": 3}}}, "at 'properties/a/type'"),
    ({"type": "object", "required": "city"}, "is not of type 'array'"),
    ({"type": "string", "pattern": "("}, "not a valid JSON Schema"),
])
def test_a_bad_schema_is_refused_naming_the_schema(schema: dict[str, Any], why: str) -> None:
    loc, msg = refusal({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert loc == ("response_format", "json_schema", "schema")
    assert "not a valid JSON Schema" in msg and why in msg


@pytest.mark.parametrize("response_format, where", [
    ({"type": "json_schema"}, ("response_format",)),
    ({"type": "json_schema", "json_schema": {"name": "x"}},
     ("response_format", "json_schema", "schema")),
    ({"type": "json_schema", "json_schema": {"name": "no spaces", "schema": SCHEMA}},
     ("response_format", "json_schema", "name")),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}},
     ("response_format", "json_schema", "schema")),
    ({"type": "xml"}, ("response_format", "type")),
    ("json", ("response_format",)),
])
def test_malformed_formats_name_their_field(response_format: Any,
                                            where: tuple[str, ...]) -> None:
    assert refusal(response_format)[0] == where


def validator() -> LineValidator:
    return LineValidator(endpoint="/v1/chat/completions",
                         limits=LineLimits(max_tokens_limit=4096, default_max_tokens=64,
                                           max_model_len=2048))


def line(custom_id: str, response_format: Any) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "m", "messages": MESSAGES,
                                "response_format": response_format}}).encode()


def test_batch_lines_keep_the_format_and_name_a_bad_schema() -> None:
    v = validator()
    good = v.check(line("a", {"type": "json_schema",
                              "json_schema": {"name": "City", "schema": SCHEMA}}), 1)
    assert isinstance(good, ValidLine)
    assert good.request["response_format"]["json_schema"]["schema"] == SCHEMA
    bad = v.check(line("b", {"type": "json_schema",
                             "json_schema": {"name": "City", "schema": {"type": 5}}}), 2)
    assert isinstance(bad, LineError) and bad.code == "invalid_body"
    assert bad.param == "body.response_format.json_schema.schema"


class FakeRedis:
    """The two calls live_workers makes, over a dict of heartbeat keys."""

    def __init__(self, beats: dict[str, dict[str, Any]]) -> None:
        self.beats = {k: json.dumps(v) for k, v in beats.items()}

    async def scan_iter(self, match: str, count: int) -> Any:
        for key in list(self.beats):
            yield key

    async def mget(self, keys: list[str]) -> list[str | None]:
        return [self.beats.get(k) for k in keys]


def supports(beats: dict[str, dict[str, Any]], model: str) -> bool | None:
    catalog = ModelCatalog(Settings(engine=EngineSettings(served_model_name="base")),
                           FakeRedis(beats))  # type: ignore[arg-type]
    return asyncio.run(catalog.supports(model, STRUCTURED_OUTPUTS))


def test_the_catalog_says_supported_only_when_every_worker_serving_the_model_is() -> None:
    able = {"models": ["m"], "capabilities": [STRUCTURED_OUTPUTS]}
    unable = {"models": ["m"], "capabilities": []}
    old = {"models": ["m"]}  # a heartbeat from before capabilities: none
    assert supports({"w1": able}, "m") is True
    assert supports({"w1": able, "w2": able}, "m") is True
    assert supports({"w1": able, "w2": unable}, "m") is False
    assert supports({"w1": old}, "m") is False
    assert supports({"w1": unable}, "m") is False
    # No live worker serves it: unknown, and the worker that gets the job decides.
    assert supports({"w1": able}, "base") is None
    assert supports({}, "m") is None


def nested_schema(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize("depth", [150, 900])
def test_a_schema_nested_too_deeply_is_a_400_not_a_crash(depth: int) -> None:
    """Free-form JSON reaches recursive checks (the storable-text scan, the JSON Schema
    check): Python's recursion limit must end as a refusal, never an unhandled error."""
    with pytest.raises(ValidationError) as info:
        chat({"type": "json_schema",
              "json_schema": {"name": "deep", "schema": nested_schema(depth)}})
    assert "nested too deeply" in info.value.errors()[0]["msg"]


def test_deeply_nested_tools_are_refused_too() -> None:
    tool: Any = {}
    for _ in range(1500):
        tool = {"a": tool}
    with pytest.raises(ValidationError, match="nested too deeply"):
        ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES,
                                              "tools": [tool]})

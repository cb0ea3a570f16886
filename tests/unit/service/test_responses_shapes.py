"""The Responses API's request handling and object shapes, checked against the official SDK's
models: what a body becomes (the job's stored request), what is refused with which param, the
Response object and the stream events the SDK's accumulator reads."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter, ValidationError

from service.jobs.response_schemas import ResponseCreate
from service.jobs.response_view import EventStream, ResponseShape, Usage
from service.store.response_status import RESPONSE_TERMINAL_STATUSES, response_status
from service.web.errors import APIError

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def body(**fields: Any) -> ResponseCreate:
    return ResponseCreate.model_validate({"model": "m", "input": "hi", **fields})


def test_a_string_input_with_instructions_becomes_chat_messages():
    stored = body(instructions="Be brief.", metadata={"k": "v"}, temperature=0,
                  background=True, tools=[], include=[]).stored()
    assert stored["messages"] == [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "hi"}]
    assert stored["metadata"] == {"k": "v"} and stored["background"] is True
    assert "input" not in stored and "tools" not in stored


def test_message_items_join_their_text_parts():
    b = body(input=[{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                                 {"type": "input_text", "text": "b"}]},
                    {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": "c"}]},
                    {"role": "developer", "content": "d"}])
    assert b.messages() == [{"role": "user", "content": "ab"},
                            {"role": "assistant", "content": "c"},
                            {"role": "developer", "content": "d"}]


@pytest.mark.parametrize(("fields", "param"), [
    ({"tools": [{"type": "web_search"}]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"text": {"format": {"type": "json_object"}}}, "text.format"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"background": True, "store": False}, "store"),
])
def test_unsupported_parameters_are_refused_by_name(fields: dict[str, Any], param: str):
    refused = body(**fields).refusal()
    assert isinstance(refused, APIError) and refused.status == 400 and refused.param == param


def test_plain_text_format_and_no_op_tool_choice_are_accepted():
    assert body(text={"format": {"type": "text"}}, tool_choice="auto").refusal() is None
    assert body(text={"verbosity": "low"}).refusal() is None


@pytest.mark.parametrize(("item", "param"), [
    ({"role": "user", "content": [{"type": "input_image", "image_url": "x"}]},
     "input[0].content[0]"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, "input[0]"),
    ({"role": "tool", "content": "x"}, "input[0].role"),
    ({"role": "user", "content": 3}, "input[0].content"),
    ("just a string", "input[0]"),
])
def test_input_items_fairway_cannot_run_name_the_item(item: Any, param: str):
    with pytest.raises(APIError) as err:
        body(input=[item]).messages()
    assert err.value.status == 400 and err.value.param == param


def test_empty_input_list_and_oversized_metadata_are_400():
    with pytest.raises(APIError):
        body(input=[]).messages()
    with pytest.raises(ValidationError):
        body(metadata={f"k{i}": "v" for i in range(17)})


@pytest.mark.parametrize(("status", "finish", "started", "expected"), [
    ("queued", None, None, "queued"),
    ("queued", None, NOW, "in_progress"),  # parked: it ran, and will again
    ("assigned", None, None, "in_progress"),
    ("running", None, NOW, "in_progress"),
    ("succeeded", "stop", NOW, "completed"),
    ("succeeded", "length", NOW, "incomplete"),
    ("failed", None, None, "failed"),
    ("cancelled", None, NOW, "cancelled"),
])
def test_response_status_from_the_job_row(status, finish, started, expected):
    assert response_status(status, finish, started) == expected
    assert (expected in RESPONSE_TERMINAL_STATUSES) == (status in (
        "succeeded", "failed", "cancelled"))


def shape(**request: Any) -> ResponseShape:
    return ResponseShape(uuid.uuid4(), NOW, "m", {"background": False, **request}, "default")


def test_the_response_object_is_the_sdks_response():
    s = shape(instructions="x", metadata={"a": "b"}, max_output_tokens=5)
    done = Response.model_validate(s.body("completed", text="Paris.", usage=Usage(7, 3, 2),
                                          finished_at=NOW))
    assert done.output_text == "Paris." and done.status == "completed"
    assert done.usage is not None and done.usage.total_tokens == 10
    assert done.usage.input_tokens_details.cached_tokens == 2
    assert done.id == "resp_" + s.job_id.hex and done.output[0].id == "msg_" + s.job_id.hex
    failed = Response.model_validate(s.body("failed", error={"status": 429, "message": "busy"}))
    assert failed.error is not None and failed.error.code == "rate_limit_exceeded"
    assert failed.output == []
    short = Response.model_validate(s.body("incomplete", text="Par", usage=Usage(7, 5)))
    assert short.incomplete_details is not None
    assert short.incomplete_details.reason == "max_output_tokens"
    assert short.output[0].status == "incomplete"  # type: ignore[union-attr]


def events_of(chunks: list[bytes]) -> list[Any]:
    out = []
    for chunk in chunks:
        name, data = chunk.decode().removesuffix("\n\n").split("\n")
        event = EVENTS.validate_python(json.loads(data.removeprefix("data: ")))
        assert name == f"event: {event.type}"
        out.append(event)
    return out


@pytest.mark.parametrize("background", [False, True])
def test_the_event_stream_accumulates_in_the_sdks_helper(background: bool):
    s = shape(background=background)
    stream = EventStream(s)
    chunks = stream.start("queued" if background else "in_progress")
    chunks += stream.delta("Par") + stream.delta("is.")
    final = s.body("completed", text="Paris.", usage=Usage(7, 3), finished_at=NOW)
    chunks += stream.finish(final)
    events = events_of(chunks)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[1].type == ("response.queued" if background else "response.in_progress")
    if background:
        assert events[2].type == "response.in_progress"  # when its first text comes
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(event)
    response = state._completed_response
    assert response is not None and response.output_text == "Paris."


def test_a_failed_stream_ends_with_the_failed_object_and_a_cancel_with_an_error_event():
    stream = EventStream(shape())
    stream.start("in_progress")
    failed = events_of([stream.failed({"code": "job_failed", "status": 500, "message": "x"})])
    assert failed[0].type == "response.failed" and failed[0].response.status == "failed"
    cancelled = events_of([stream.failed({"code": "cancelled", "status": 409,
                                          "message": "stop"})])
    assert cancelled[0].type == "error" and cancelled[0].code == "cancelled"

"""Request validation errors read as OpenAI's do: the parameter named in ``param`` (OpenAI's
path notation) and a sentence without pydantic's wording ("Value error, ...")."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from service.jobs.schemas import ChatCompletionRequest, CompletionRequest
from service.web.validation import Problem, describe, param_path

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _problem(schema: Any, body: dict[str, Any]) -> Problem:
    with pytest.raises(ValidationError) as info:
        schema.model_validate(body)
    # FastAPI reports body errors under "body"; the path must not show it.
    return describe([{**e, "loc": ("body", *e["loc"])} for e in info.value.errors()])


@pytest.mark.parametrize(("body", "param", "code", "words"), [
    ({**CHAT, "tools": [{"type": "function"}]}, "tools", "unsupported_parameter",
     "Unsupported parameter: 'tools' is not supported"),
    ({**CHAT, "logprobs": True}, "logprobs", "unsupported_parameter",
     "Unsupported parameter: 'logprobs'"),
    ({"model": "m"}, "messages", "missing_required_parameter",
     "Missing required parameter: 'messages'."),
    ({**CHAT, "messages": [{"role": "user", "content": 5}]}, "messages[0].content",
     "invalid_type", "Invalid type for 'messages[0].content': expected one of a string or an "
                     "array, but got an integer instead."),
    ({**CHAT, "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role",
     "invalid_value", "Invalid value for 'messages[0].role': 'robot'. Supported values are:"),
    ({**CHAT, "temperature": 3}, "temperature", "decimal_above_max_value",
     "Expected a value <= 2.0, but got 3 instead."),
    ({**CHAT, "top_p": 0.0}, "top_p", "decimal_below_min_value", "Expected a value > 0.0"),
    ({**CHAT, "messages": []}, "messages", "empty_array", "Invalid 'messages': empty array."),
    ({**CHAT, "stop": ["a"] * 5}, "stop", "invalid_value",
     "'stop' takes at most 4 non-empty strings."),
    ({**CHAT, "model": "m" * 300}, "model", "string_above_max_length", "string too long"),
    ({**CHAT, "stream_options": 3}, "stream_options", "invalid_type",
     "expected an object, but got an integer instead."),
])
def test_chat_refusals_name_the_param_in_openai_words(body: dict[str, Any], param: str,
                                                      code: str, words: str) -> None:
    problem = _problem(ChatCompletionRequest, body)
    assert (problem.param, problem.code) == (param, code), problem
    assert words in problem.message, problem.message
    assert "Value error" not in problem.message and "Input should" not in problem.message


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m", "prompt": ["a", "b"]}, "prompt"),
    ({"model": "m", "prompt": "a", "echo": True}, "echo"),
    ({"model": "m", "prompt": "a", "suffix": "z"}, "suffix"),
])
def test_unsupported_completion_features_name_the_param(body: dict[str, Any],
                                                        param: str) -> None:
    problem = _problem(CompletionRequest, body)
    assert (problem.param, problem.code) == (param, "unsupported_parameter"), problem
    assert problem.message.startswith(f"Unsupported parameter: '{param}'"), problem.message


def test_the_storable_check_keeps_naming_its_field() -> None:
    problem = _problem(ChatCompletionRequest,
                       {**CHAT, "messages": [{"role": "user", "content": "a\ud800"}]})
    assert problem.param == "messages[0].content" and "surrogate" in problem.message


def test_paths_drop_the_location_and_union_members() -> None:
    assert param_path(("body", "messages", 0, "content", "list[TextPart]", 1, "text")) == \
        "messages[0].content[1].text"
    assert param_path(("query", "limit")) == "limit"
    assert param_path(("path", "name")) == "name"
    assert param_path(("body", "metadata", "note")) == "metadata.note"
    assert param_path(("body",)) is None


def test_unparseable_json_says_so_without_a_param() -> None:
    problem = describe([{"type": "json_invalid", "loc": ("body", 12), "msg": "JSON decode error",
                         "input": {}, "ctx": {"error": "Expecting value"}}])
    assert problem.param is None and problem.code == "invalid_json"
    assert problem.message.startswith("We could not parse the JSON body of your request")


def test_a_plain_value_error_keeps_its_words_without_pydantics_prefix() -> None:
    from service.batches.schemas import BatchCreate

    with pytest.raises(ValidationError) as info:
        BatchCreate.model_validate({"input_file_id": "file-1", "endpoint": "/v1/embeddings",
                                    "completion_window": "24h"})
    problem = describe(info.value.errors())
    assert problem.param == "endpoint" and problem.code == "invalid_value"
    assert problem.message.startswith("Invalid value for 'endpoint': endpoint must be one of")


def test_a_missing_or_non_object_body_says_what_it_expects() -> None:
    empty = describe([{"type": "missing", "loc": ("body",), "msg": "Field required",
                       "input": None}])
    assert (empty.param, empty.code) == (None, "invalid_json")
    assert empty.message == "The request has no body. The API expects a JSON object."
    array = describe([{"type": "model_attributes_type", "loc": ("body",), "input": [1],
                       "msg": "Input should be a valid dictionary or object"}])
    assert array.message == ("Invalid type for the request body: expected an object, but got "
                             "an array instead.")

"""Line-by-line validation of batch input files: each bad line gets its code and line number."""

from __future__ import annotations

import io
import json

import pytest

from service.batches.ingest import iter_lines
from service.batches.schemas import BatchCreate, allowed_windows, parse_window
from service.batches.validation import LineError, LineLimits, LineValidator, ValidLine

LIMITS = LineLimits(max_tokens_limit=4096, default_max_tokens=256, max_model_len=2048)
CHAT = "/v1/chat/completions"


def line(custom_id: str = "r1", *, url: str = CHAT, method: str = "POST", **body: object) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}
    return json.dumps({"custom_id": custom_id, "method": method, "url": url,
                       "body": body}).encode()


def check(raw: bytes, validator: LineValidator | None = None, n: int = 1):  # type: ignore[no-untyped-def]
    return (validator or LineValidator(endpoint=CHAT, limits=LIMITS)).check(raw, n)


def test_valid_chat_line_is_normalised():
    result = check(line(max_tokens=12, stop="x", service_tier="priority", deadline_ms=5))
    assert isinstance(result, ValidLine)
    assert (result.custom_id, result.model, result.max_tokens, result.line) == ("r1", "m", 12, 1)
    assert result.request["stop"] == ["x"]  # the worker expects a list, as realtime stores it
    assert "service_tier" not in result.request and "deadline_ms" not in result.request


def test_default_max_tokens_applies():
    result = check(line())
    assert isinstance(result, ValidLine) and result.max_tokens == 256


@pytest.mark.parametrize(("raw", "code", "param"), [
    (b"{not json", "invalid_json", None),
    (b"[1, 2]", "invalid_json", None),
    (json.dumps({"method": "POST", "url": CHAT, "body": {}}).encode(), "missing_custom_id",
     "custom_id"),
    (line(method="GET"), "invalid_method", "method"),
    (line(url="/v1/completions"), "invalid_url", "url"),
    (json.dumps({"custom_id": "a", "method": "POST", "url": CHAT}).encode(), "missing_body",
     "body"),
    (line(stream=True), "stream_unsupported", "body.stream"),
    (line(messages=[]), "invalid_body", "body.messages"),
    (line(max_tokens=5000), "max_tokens_too_large", "body.max_tokens"),
    (line(messages=[{"role": "user", "content": "word " * 2000}], max_tokens=1000),
     "context_length_exceeded", "body"),
])
def test_bad_lines_get_a_code_and_their_line_number(raw: bytes, code: str, param: str | None):
    result = check(raw, n=7)
    assert isinstance(result, LineError)
    assert (result.code, result.line, result.param) == (code, 7, param)
    entry = result.as_error_line()
    assert entry["response"] is None and entry["error"]["line"] == 7
    assert "Line 7" in entry["error"]["message"]
    assert result.as_batch_error() == {"code": code, "line": 7, "message": result.message,
                                       "param": param}


def test_duplicate_custom_id_and_second_model():
    validator = LineValidator(endpoint=CHAT, limits=LIMITS)
    assert isinstance(validator.check(line("a"), 1), ValidLine)
    dup = validator.check(line("a"), 2)
    assert isinstance(dup, LineError) and dup.code == "duplicate_custom_id" and dup.line == 2
    other = validator.check(line("b", model="other"), 3)
    assert isinstance(other, LineError) and other.code == "model_mismatch"
    assert isinstance(validator.check(line("c"), 4), ValidLine)


def test_invalid_line_still_reserves_its_custom_id():
    # Every custom_id must end up exactly once in the output or error file.
    validator = LineValidator(endpoint=CHAT, limits=LIMITS)
    assert isinstance(validator.check(line("a", method="GET"), 1), LineError)
    again = validator.check(line("a"), 2)
    assert isinstance(again, LineError) and again.code == "duplicate_custom_id"


def test_completions_endpoint():
    validator = LineValidator(endpoint="/v1/completions", limits=LIMITS)
    raw = json.dumps({"custom_id": "p", "method": "POST", "url": "/v1/completions",
                      "body": {"model": "m", "prompt": "once upon"}}).encode()
    result = validator.check(raw, 1)
    assert isinstance(result, ValidLine) and result.max_tokens == 16
    assert result.request["prompt"] == "once upon"


def test_iter_lines_skips_blanks_and_bounds_long_lines():
    data = b'{"a":1}\n\n   \n' + b"x" * 50 + b"\n" + b'{"b":2}'
    lines = list(iter_lines(io.BytesIO(data), max_len=20))
    assert lines == [(1, b'{"a":1}\n'), (4, None), (5, b'{"b":2}')]


def test_windows():
    assert parse_window("24h").total_seconds() == 86400
    assert parse_window("30s").total_seconds() == 30
    assert parse_window("0s") is None and parse_window("1w") is None
    assert sorted(allowed_windows("24h, 5s,bogus")) == ["24h", "5s"]


def test_metadata_limits():
    with pytest.raises(ValueError):
        BatchCreate(input_file_id="f", endpoint=CHAT, completion_window="24h",
                    metadata={f"k{i}": "v" for i in range(17)})
    with pytest.raises(ValueError):
        BatchCreate(input_file_id="f", endpoint="/v1/embeddings", completion_window="24h")


def test_nul_in_a_line_is_accepted_and_stored_escaped() -> None:
    from service.store import nul_codec

    raw = line(messages=[{"role": "user", "content": "a\x00b"}])
    result = check(raw)
    assert isinstance(result, ValidLine)
    assert "\\u0000" not in result.request_json  # what a JSONB COPY refuses
    stored = json.loads(result.request_json)
    assert nul_codec.decode(stored)["messages"][0]["content"] == "a\x00b"


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "us\x00er", "content": "hi"}]},
    {"service_tier": "fl\x00ex"},
    {"response_format": {"type": "te\x00xt"}},
    {"model": "m\x00"},
    {"logit_bias": {"\ud800": 1}},
])
def test_what_an_error_quotes_is_storable(body: dict[str, object]) -> None:
    # The message and param go to the batch's errors (JSONB): no NUL, no lone surrogate.
    result = check(line(**body))
    assert isinstance(result, LineError), result
    for text in (result.message, result.param or ""):
        assert "\x00" not in text and text.encode("utf-8")


def test_a_model_with_nul_is_an_error_line() -> None:
    # A valid line's model goes to the jobs' model column (text): NUL there fails the COPY.
    validator = LineValidator(endpoint=CHAT, limits=LIMITS)
    assert isinstance(check(line("a"), validator), ValidLine)
    result = check(line("b", model="m2\x00"), validator, 2)
    assert isinstance(result, LineError) and result.param == "body.model"


def test_a_line_error_quotes_poison_visibly() -> None:
    error = LineError(3, "model_mismatch", "asks for 'a\x00b'", "id\ud800", "body.x\x00")
    assert (error.message, error.custom_id, error.param) == (
        "asks for 'a\\u0000b'", "id\\ud800", "body.x\\u0000")

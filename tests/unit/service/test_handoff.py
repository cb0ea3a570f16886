"""The realtime hand-off message: one codec, round trips, and junk decodes to None."""

from __future__ import annotations

import pytest

from service.store import handoff
from service.store.handoff import Handoff

JOB = "0b6f1f3e-5d0c-4f5e-9a43-3c2d1e0f9a11"


@pytest.mark.parametrize("message", [
    Handoff(JOB, 1),
    Handoff(JOB, 7, {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
    Handoff(JOB, 2, {"traceparent": "00-x-y-01", "tracestate": "fw=1,other=a:b"}),
])
def test_round_trip_through_the_fields_redis_returns(message: Handoff) -> None:
    fields = handoff.encode(message)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
    as_redis_returns = {k.encode(): v.encode() for k, v in fields.items()}
    assert handoff.decode(as_redis_returns) == message
    assert handoff.decode(fields) == message


def test_no_trace_field_when_there_is_no_trace() -> None:
    assert "trace" not in handoff.encode(Handoff(JOB, 1))
    assert "trace" not in handoff.encode(Handoff(JOB, 1, {}))


@pytest.mark.parametrize("fields", [
    {},
    {b"job": JOB.encode()},
    {b"attempt": b"1"},
    {b"job": JOB.encode(), b"attempt": b"one"},
    {b"job": JOB.encode(), b"attempt": b"0"},
    {b"job": b"", b"attempt": b"1"},
    {b"job": JOB.encode(), b"attempt": b"1", b"trace": b"{not json"},
    {b"job": JOB.encode(), b"attempt": b"1", b"trace": b"[1, 2]"},
    {b"job": JOB.encode(), b"attempt": b"1", b"trace": b'{"traceparent": 5}'},
    {b"job": b"\xff\xfe", b"attempt": b"1"},
])
def test_junk_decodes_to_none(fields: dict[bytes, bytes]) -> None:
    assert handoff.decode(fields) is None


BODY = handoff.JobBody("chat.completions", {"messages": [{"role": "user", "content": "a"}]},
                       16, 0, "6f0c2d43-2f2e-4f4a-9c3e-0d0f5b1c2a33")


def test_a_body_round_trips_with_its_hand_off() -> None:
    message = Handoff(JOB, 1, {"traceparent": "00-x-y-01"}, BODY)
    fields = {k.encode(): v.encode() for k, v in handoff.encode(message).items()}
    assert handoff.decode(fields) == message
    assert "body" not in handoff.encode(Handoff(JOB, 1))


@pytest.mark.parametrize("body", [b"{not json", b"[1]", b'{"endpoint": "x"}',
                                  b'{"endpoint": "x", "request": [], "max_tokens": 1, '
                                  b'"priority": 0, "tenant_id": "t"}',
                                  b'{"endpoint": "x", "request": {}, "max_tokens": "1", '
                                  b'"priority": 0, "tenant_id": "t"}'])
def test_an_unreadable_body_is_dropped_not_the_hand_off(body: bytes) -> None:
    """The job then starts from its claim's row, as without a body."""
    assert handoff.decode({b"job": JOB.encode(), b"attempt": b"3", b"body": body}) == Handoff(
        JOB, 3)


def test_a_large_request_is_not_carried() -> None:
    small = {"messages": [{"role": "user", "content": "x" * 100}]}
    large = {"messages": [{"role": "user", "content": "x" * handoff.BODY_MAX_CHARS}]}
    assert handoff.carried_body("chat.completions", small, max_tokens=1, priority=0,
                                tenant_id="t") is not None
    assert handoff.carried_body("chat.completions", large, max_tokens=1, priority=0,
                                tenant_id="t") is None


def test_an_entry_sent_alongside_its_insert_says_so() -> None:
    ahead = Handoff(JOB, 1, ahead=True)
    assert handoff.encode(ahead)["ahead"] == "1"
    assert handoff.decode(handoff.encode(ahead)) == ahead
    assert "ahead" not in handoff.encode(Handoff(JOB, 1))
    assert handoff.decode(handoff.encode(Handoff(JOB, 1))) == Handoff(JOB, 1, ahead=False)

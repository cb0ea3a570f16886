"""A streamed completion's end (finish chunk, usage chunk, [DONE]) leaves in one write: one
send through the middleware and one syscall, with the same bytes as before."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from service.api import openai_routes
from service.api.relay import NewText, RelayEvent, TimedOut
from service.jobs.shapes import ShapeBuilder
from service.store.job_stream import Failure, Final
from service.store.settings import Settings


def _writes(events: list[RelayEvent], monkeypatch: pytest.MonkeyPatch, *,
            include_usage: bool = True) -> list[bytes]:
    async def relay(*_: Any, **__: Any) -> AsyncIterator[RelayEvent]:
        for event in events:
            yield event

    monkeypatch.setattr(openai_routes, "follow_job", relay)
    monkeypatch.setattr(openai_routes, "row_reader", lambda *_: None)
    request: Any = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(redis=None)))
    builder = ShapeBuilder(chat=True, public_id="chatcmpl-x", created=1, model="m",
                           service_tier="default")

    async def collect() -> list[bytes]:
        return [w async for w in openai_routes._stream(request, uuid.uuid4(), builder,
                                                        include_usage, Settings())]
    return asyncio.run(collect())


def _events(write: bytes) -> list[Any]:
    out: list[Any] = []
    for block in write.decode().split("\n\n"):
        if block:
            assert block.startswith("data: ")
            data = block.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_the_end_of_a_stream_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    writes = _writes([NewText("Hi"), NewText(" there"), Final(1, "stop", 3, 2)], monkeypatch)
    assert len(writes) == 3  # two tokens, then the end in one piece
    assert [_events(w)[0]["choices"][0]["delta"] for w in writes[:2]] == [
        {"role": "assistant", "content": "Hi"}, {"content": " there"}]
    finish, usage, done = _events(writes[2])
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert done == "[DONE]"


def test_a_job_with_no_text_still_sends_the_role_first_in_that_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    writes = _writes([Final(1, "length", 3, 0)], monkeypatch, include_usage=False)
    assert len(writes) == 1
    role, finish, done = _events(writes[0])
    assert role["choices"][0]["delta"]["role"] == "assistant"
    assert finish["choices"][0]["finish_reason"] == "length" and done == "[DONE]"


@pytest.mark.parametrize("end", [Failure(1, 500, "engine_error", "boom"), TimedOut()])
def test_an_error_end_and_done_are_one_write(end: RelayEvent,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_routes, "cancel_for_client", _no_cancel)
    writes = _writes([NewText("Hi"), end], monkeypatch)
    assert len(writes) == 2
    error, done = _events(writes[1])
    assert "error" in error and done == "[DONE]"


async def _no_cancel(*_: Any) -> None:
    return None

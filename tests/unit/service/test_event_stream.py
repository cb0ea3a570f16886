"""A streamed completion's last chunk ends the response in the same ASGI send:
no empty body after it, one trip through the middleware and one syscall fewer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from service.api.event_stream import EventStream, LastChunk


def _sends(chunks: list[bytes]) -> list[tuple[bytes, bool]]:
    finished: list[str] = []

    async def body() -> AsyncIterator[bytes]:
        try:
            for chunk in chunks:
                yield chunk
        finally:
            finished.append("wrapper done")

    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        await asyncio.sleep(3600)  # the client stays

    response = EventStream(body(), media_type="text/event-stream")
    asyncio.run(response({"type": "http", "asgi": {"spec_version": "2.3"}}, receive, send))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert finished == ["wrapper done"]  # the iterator ran to its end
    return [(m["body"], m["more_body"]) for m in sent[1:]]


def test_the_last_chunk_carries_the_end() -> None:
    assert _sends([b"data: a\n\n", LastChunk(b"data: [DONE]\n\n")]) == [
        (b"data: a\n\n", True), (b"data: [DONE]\n\n", False)]


def test_a_stream_without_a_last_chunk_ends_as_starlette_ends_it() -> None:
    assert _sends([b"data: a\n\n"]) == [(b"data: a\n\n", True), (b"", False)]


def test_nothing_is_sent_after_the_last_chunk(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="fairway.api"):
        assert _sends([LastChunk(b"data: [DONE]\n\n"), b"data: late\n\n"]) == [
            (b"data: [DONE]\n\n", False)]
    assert "after its last chunk" in caplog.text

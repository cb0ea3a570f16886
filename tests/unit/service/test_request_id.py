"""x-request-id on every response (success, error, 404, 500, streamed), the client's own id
kept when sane, and the id on the JSON log lines written while serving the request."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.store.settings import Settings
from service.store.telemetry.logfmt import JsonFormatter
from service.web.errors import APIError, install_error_handlers
from service.web.request_id import RequestId

GENERATED = re.compile(r"req_[0-9a-f]{32}")
log = logging.getLogger("fairway.test.request_id")


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/ok")
    async def ok() -> dict[str, str]:
        log.info("serving ok")
        return {"ok": "yes"}

    @app.get("/refused")
    async def refused() -> None:
        raise APIError(429, "Slow down.", headers={"Retry-After": "1"})

    @app.get("/slow")
    async def slow() -> dict[str, str]:
        await asyncio.sleep(0.05)
        return {"ok": "late"}

    @app.get("/broken")
    async def broken() -> None:
        raise RuntimeError("boom")

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def chunks() -> Iterator[bytes]:  # type: ignore[misc]
            log.info("streaming")
            yield b"data: 1\n\n"
        return StreamingResponse(chunks(), media_type="text/event-stream")  # type: ignore[arg-type]

    app.add_middleware(RequestId)
    return app


@pytest.fixture
def client() -> TestClient:
    return TestClient(_app(), raise_server_exceptions=False)


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield out
    log.removeHandler(handler)


@pytest.mark.parametrize(("path", "status"), [("/ok", 200), ("/refused", 429),
                                              ("/broken", 500), ("/stream", 200),
                                              ("/nope", 404)])
def test_every_response_carries_a_generated_request_id(client: TestClient, path: str,
                                                       status: int) -> None:
    resp = client.get(path)
    assert resp.status_code == status
    assert GENERATED.fullmatch(resp.headers["x-request-id"]), resp.headers
    assert int(resp.headers["openai-processing-ms"]) >= 0


def test_processing_ms_is_the_servers_time_to_its_response(client: TestClient) -> None:
    assert int(client.get("/slow").headers["openai-processing-ms"]) >= 50
    assert int(client.get("/ok").headers["openai-processing-ms"]) < 50


def test_each_request_gets_its_own_id(client: TestClient) -> None:
    assert client.get("/ok").headers["x-request-id"] != client.get("/ok").headers["x-request-id"]


@pytest.mark.parametrize("incoming", ["trace-42", "abc.DEF_1:2", "7" * 128])
def test_a_sane_incoming_id_is_kept(client: TestClient, incoming: str) -> None:
    assert client.get("/ok", headers={"X-Request-Id": incoming}).headers["x-request-id"] == \
        incoming


@pytest.mark.parametrize("incoming", ["", "has space", "x" * 129, "-leading", "semi;colon",
                                      "new\\nline"])
def test_an_insane_incoming_id_is_replaced(client: TestClient, incoming: str) -> None:
    got = client.get("/ok", headers={"X-Request-Id": incoming}).headers["x-request-id"]
    assert GENERATED.fullmatch(got), got


def test_log_lines_carry_the_request_id(client: TestClient, lines: io.StringIO) -> None:
    for path in ("/ok", "/stream"):
        rid = client.get(path, headers={"X-Request-Id": f"find-me{path[1:]}"}).headers[
            "x-request-id"]
        records = [json.loads(line) for line in lines.getvalue().splitlines()]
        assert records[-1]["request_id"] == rid == f"find-me{path[1:]}", records


def test_the_whole_app_sends_it() -> None:
    app = create_app(Settings(database_url="postgresql://unused", redis_url="redis://unused"))
    resp = TestClient(app).get("/healthz", headers={"x-request-id": "mine"})
    assert resp.headers["x-request-id"] == "mine"
    assert GENERATED.fullmatch(TestClient(app).get("/v1/nope").headers["x-request-id"])

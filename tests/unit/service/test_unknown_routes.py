"""A route we do not serve answers as OpenAI does: 404 "Invalid URL (METHOD /path)" in the error
shape, and 405 in the same shape for a known URL with the wrong method."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.store.settings import Settings


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings(database_url="postgresql://unused",
                                          redis_url="redis://unused")))


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/embeddings"), ("GET", "/v1/nope"),
                                              ("DELETE", "/v2/models")])
def test_unknown_routes_get_openais_404(client: TestClient, method: str, path: str) -> None:
    resp = client.request(method, path, headers={"authorization": "Bearer fw-whatever"})
    assert resp.status_code == 404
    assert resp.json() == {"error": {"message": f"Invalid URL ({method} {path}).",
                                     "type": "invalid_request_error", "param": None,
                                     "code": "unknown_url"}}


def test_a_wrong_method_gets_405_in_the_same_shape(client: TestClient) -> None:
    resp = client.get("/v1/chat/completions")
    assert resp.status_code == 405 and "POST" in resp.headers["allow"]
    assert resp.json() == {"error": {
        "message": "Invalid method for URL (GET /v1/chat/completions).",
        "type": "invalid_request_error", "param": None, "code": "method_not_allowed"}}

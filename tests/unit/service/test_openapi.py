"""The OpenAPI document lists the error responses the API really gives, in OpenAI's shape.

The fuzz test (tests/integration/test_api_fuzz.py) holds live responses to the document;
this checks the document itself, without a stack.
"""

from __future__ import annotations

from typing import Any

import pytest

from service.api.app import create_app
from service.store.settings import Settings

ERROR_REF = "#/components/schemas/ErrorResponse"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    settings = Settings(database_url="postgresql://unused", redis_url="redis://unused")
    return create_app(settings).openapi()


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, ops in document["paths"].items()
            for method, op in ops.items()]


def test_no_422_is_documented_since_invalid_input_is_a_400(document: dict[str, Any]) -> None:
    for method, path, op in _operations(document):
        assert "422" not in op["responses"], (method, path)
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_every_api_route_documents_its_errors_in_openai_shape(document: dict[str, Any]) -> None:
    error = document["components"]["schemas"]["ErrorDetail"]
    assert set(error["properties"]) == {"message", "type", "param", "code"}
    for method, path, op in _operations(document):
        if not path.startswith(("/v1/", "/admin/")):
            continue
        expected = {"400", "401", "503"} | ({"403"} if path.startswith("/admin/") else set())
        if "requestBody" in op:
            expected.add("413")
        assert expected <= set(op["responses"]), (method, path, sorted(op["responses"]))
        for status, response in op["responses"].items():
            if status.startswith(("4", "5")):
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": ERROR_REF}, (method, path, status)
            if status in ("429", "503"):
                assert response["headers"]["Retry-After"]["required"], (method, path, status)


def test_route_specific_statuses_and_content_types(document: dict[str, Any]) -> None:
    paths = document["paths"]
    for path in ("/v1/chat/completions", "/v1/completions"):
        responses = paths[path]["post"]["responses"]
        assert {"403", "404", "429", "504"} <= set(responses)
        assert set(responses["200"]["content"]) == {"application/json", "text/event-stream"}
    upload = paths["/v1/files"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert upload["schema"]["required"] == ["file", "purpose"]
    content = paths["/v1/files/{file_id}/content"]["get"]["responses"]["200"]["content"]
    assert set(content) == {"application/octet-stream"}
    assert "409" in paths["/v1/batches/{batch_id}/cancel"]["post"]["responses"]
    assert "429" in paths["/v1/batches"]["post"]["responses"]
    assert "409" in paths["/admin/tenants"]["post"]["responses"]
    assert set(paths["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    assert "503" in paths["/readyz"]["get"]["responses"]


def test_every_response_documents_its_request_id(document: dict[str, Any]) -> None:
    for method, path, op in _operations(document):
        for status, response in op["responses"].items():
            assert response["headers"]["x-request-id"]["required"], (method, path, status)


def test_rate_limits_and_the_models_routes_are_documented(document: dict[str, Any]) -> None:
    paths = document["paths"]
    for path in ("/v1/chat/completions", "/v1/completions"):
        responses = paths[path]["post"]["responses"]
        for status in ("200", "429"):
            assert "x-ratelimit-remaining-requests" in responses[status]["headers"]
    retrieve = paths["/v1/models/{model}"]["get"]["responses"]
    assert {"200", "401", "403", "404"} <= set(retrieve)

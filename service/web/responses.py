"""What the OpenAPI document says about errors: OpenAI's error shape as a schema, and the
status codes each route can answer, so clients see them (and the API fuzz test,
tests/integration/test_api_fuzz.py, holds every response to them).

Routers take a common set (``TENANT_ROUTES``, ``ADMIN_ROUTES``); a route adds what only it
can answer with ``errors(404, 409, ...)``. Invalid input is a 400 (errors.py), never FastAPI's
422, so ``install_openapi`` takes the 422 FastAPI documents by default out of the document.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    message: str = Field(description="What went wrong, for a person.")
    type: str = Field(description="The error class, e.g. invalid_request_error.")
    param: str | None = Field(description="The parameter or field at fault, if one is.")
    code: str | None = Field(description="A machine-readable code, e.g. model_not_found.")


class ErrorResponse(BaseModel):
    """Every error the API answers, in OpenAI's shape."""

    error: ErrorDetail


_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.",
                                "required": True, "schema": {"type": "integer"}}}
# OpenAI's rate-limit headers: on an admitted completion and on a quota's 429, for each
# per-minute limit the tenant has (service.quotas.headers); absent when it has none.
RATE_LIMIT_HEADERS = {
    f"x-ratelimit-{what}-{kind}": {
        "description": f"{text} ({'requests' if kind == 'requests' else 'tokens'} per minute).",
        "required": False, "schema": {"type": "string" if what == "reset" else "integer"}}
    for kind in ("requests", "tokens")
    for what, text in (("limit", "The limit"), ("remaining", "What is left of it"),
                       ("reset", "Time until it is full again, e.g. 6s or 1m0s"))}
# On every response: the request's id (the client's sane X-Request-Id, else req_<hex>).
REQUEST_ID_HEADER = {"x-request-id": {
    "description": "This request's id, as in the API's logs: the client's X-Request-Id if it "
                   "is a token of letters, digits and ._:- (at most 128), else a new one.",
    "required": True, "schema": {"type": "string"}}}

_DESCRIPTIONS = {
    400: "Invalid request: a parameter or the body is malformed or out of range.",
    401: "Missing, unknown, revoked or expired credential.",
    403: "The credential may not do this (or its tenant is suspended).",
    404: "No such object (or model), or not this tenant's.",
    409: "The object's state does not allow this.",
    413: "The request body is over its limit.",
    429: "A rate limit, quota or latency target refused the request; retry after Retry-After.",
    503: "A dependency (Postgres, Redis) is unavailable, or the job's stream was interrupted; "
         "retry after Retry-After.",
    504: "The request timed out before its job finished.",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error statuses, each with the OpenAI error schema."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        out[status] = {"model": ErrorResponse, "description": _DESCRIPTIONS[status]}
        if status in (429, 503):
            out[status]["headers"] = dict(_RETRY_AFTER)
        if status == 429:
            out[status]["headers"].update(RATE_LIMIT_HEADERS)
    return out


# Any route behind a tenant key: bad parameters, a bad key, a suspended tenant, an outage.
TENANT_ROUTES = errors(400, 401, 403, 503)
# Any /admin route: the same, a credential that is not the admin's, and too many of those
# from one address (service.web.admin_guard).
ADMIN_ROUTES = errors(400, 401, 403, 429, 503)
# The request body is read: it may be too large.
WITH_BODY = errors(413)


def install_openapi(app: FastAPI) -> None:
    """Build the document as FastAPI does, then drop the 422 responses (and their schemas) it
    adds to every route with parameters: invalid input here is a 400 in OpenAI's shape. Every
    response documents x-request-id (service.web.request_id)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        fresh = app.openapi_schema is None
        schema = build()
        if fresh:
            for path in schema.get("paths", {}).values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
                    for response in operation.get("responses", {}).values():
                        response["headers"] = {**response.get("headers", {}),
                                               **REQUEST_ID_HEADER}
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]

"""Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}, never a bare 500."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.store.outages import POSTGRES, DependencyState, is_outage
from service.web.request_id import identity_headers, request_id_of
from service.web.validation import describe

log = logging.getLogger("fairway.api")
DATABASE = DependencyState(POSTGRES, log)  # the API's view of Postgres, for logs and metrics

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type_: str | None = None,
        headers: dict[str, str] | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type_ or _TYPES.get(status, "api_error")
        self.headers = headers
        # Machine-readable cause for metrics (e.g. the quota limit that refused); not sent.
        self.reason = reason

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)


class BodyTooLarge(StarletteHTTPException):
    """A request body past its limit, found while it streams in (service.api.body_limit). An
    HTTP exception, so FastAPI's body reader passes it through instead of calling it a parse
    error."""

    code = "request_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"Request body exceeds {limit} bytes.")


def error_body(
    message: str, type_: str, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class _ErrorResponse(JSONResponse):
    """An error body that always encodes: one quoting a lone surrogate the client sent is
    written with JSON escapes (ASCII) instead of failing as UTF-8 into a bare 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, separators=(",", ":")).encode("ascii")


def _json(status: int, body: dict[str, Any], headers: Mapping[str, str] | None = None
          ) -> JSONResponse:
    return _ErrorResponse(status_code=status, content=body, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return _json(exc.status, exc.body(), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        problem = describe(exc.errors())
        return _json(400, error_body(problem.message, "invalid_request_error", problem.code,
                                     problem.param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code in (404, 405) and exc.detail in ("Not Found", "Method Not Allowed"):
            # No such route (or not with this method): OpenAI's words and shape.
            what = "URL" if exc.status_code == 404 else "method for URL"
            return _json(exc.status_code, error_body(
                f"Invalid {what} ({request.method} {request.url.path}).",
                "invalid_request_error", "unknown_url" if exc.status_code == 404
                else "method_not_allowed"), exc.headers)
        return _json(exc.status_code, error_body(
            str(exc.detail), _TYPES.get(exc.status_code, "api_error"),
            getattr(exc, "code", None)), exc.headers)

    async def _database(_: Request, exc: Exception) -> JSONResponse:
        if not is_outage(exc):
            log.exception("database error", exc_info=exc)
            return _json(500, error_body("Internal server error", "api_error", "internal_error"))
        DATABASE.failed(exc)  # logged once per outage
        return _json(503, error_body("The database is unavailable; retry shortly.",
                                     "service_unavailable", "database_unavailable"),
                     {"Retry-After": "2"})

    # An outage of Postgres answers 503 + Retry-After on every route, never a 500.
    app.add_exception_handler(DBAPIError, _database)
    app.add_exception_handler(psycopg.Error, _database)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette answers this one outside every middleware: the request id is added here.
        request_id = request_id_of(request.scope)
        log.exception("unhandled error", exc_info=exc, extra={"request_id": request_id})
        return _json(500, error_body("Internal server error", "api_error", "internal_error"),
                     identity_headers(request.scope) or None)

"""Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}, never a bare 500."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.store.outages import POSTGRES, DependencyState, is_outage

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


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=body, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    first = exc.errors()[0] if exc.errors() else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    msg = first.get("msg", "Invalid request")
    if not loc and (first.get("ctx") or {}).get("path"):  # a whole-body check names its field
        return msg, str(first["ctx"]["path"])
    param = ".".join(loc) or None
    return (f"{param}: {msg}" if param else msg), param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return _json(exc.status, exc.body(), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return _json(400, error_body(message, "invalid_request_error", "invalid_value", param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _json(exc.status_code, error_body(
            str(exc.detail), _TYPES.get(exc.status_code, "api_error"),
            getattr(exc, "code", None)))

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
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return _json(500, error_body("Internal server error", "api_error", "internal_error"))

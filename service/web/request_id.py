"""``x-request-id`` on every response, as OpenAI sends it (the openai SDK exposes it as
``_request_id``), and on every log line written while serving the request; and, as OpenAI
sends it too, ``openai-processing-ms``: the server's milliseconds from the request reaching
the app to its response starting (a stream's headers; a refusal's whole answer), which tells
a client's own queueing and network apart from the service's.

A client's own ``X-Request-Id`` is kept when it is sane (a short token of letters, digits and
``._:-``), so a caller's trace id carries through; otherwise a new ``req_<32 hex>`` is made.
A pure ASGI middleware, so streamed responses get the header too and the log context holds
for the whole stream (the relay runs inside the request's context).
"""

from __future__ import annotations

import re
import time
import uuid

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.store.telemetry.logfmt import bind_request, unbind_request

HEADER = "x-request-id"
PROCESSING_HEADER = "openai-processing-ms"
_SANE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}")
_STATE_KEY = "request_id"
_STARTED_KEY = "request_started"


def new_request_id() -> str:
    return f"req_{uuid.uuid4().hex}"


def accepted_request_id(incoming: str | None) -> str:
    """The client's id if it is safe to echo and log, else a fresh one."""
    if incoming is not None and _SANE.fullmatch(incoming):
        return incoming
    return new_request_id()


def request_id_of(scope: Scope) -> str | None:
    """The id the middleware gave this request (for responses sent outside it: the 500s)."""
    state = scope.get("state") or {}
    value = state.get(_STATE_KEY)
    return value if isinstance(value, str) else None


def identity_headers(scope: Scope) -> dict[str, str]:
    """The headers the middleware would have added, for a response sent outside it."""
    state = scope.get("state") or {}
    request_id, started = state.get(_STATE_KEY), state.get(_STARTED_KEY)
    headers = {HEADER: request_id} if isinstance(request_id, str) else {}
    if isinstance(started, float):
        headers[PROCESSING_HEADER] = _processing_ms(started)
    return headers


def request_started(scope: Scope) -> float | None:
    """When the request reached the app (a ``time.perf_counter()`` reading); None outside
    the middleware."""
    started = (scope.get("state") or {}).get(_STARTED_KEY)
    return started if isinstance(started, float) else None


def _processing_ms(started: float) -> str:
    return str(round((time.perf_counter() - started) * 1000))


class RequestId:
    """Outermost of the app's middlewares (add it last)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((v.decode("latin-1") for k, v in scope["headers"]
                         if k == HEADER.encode()), None)
        request_id = accepted_request_id(incoming)
        started = time.perf_counter()
        state = scope.setdefault("state", {})
        state[_STATE_KEY], state[_STARTED_KEY] = request_id, started

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers[HEADER] = request_id
                headers[PROCESSING_HEADER] = _processing_ms(started)
            await send(message)

        token = bind_request(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            unbind_request(token)

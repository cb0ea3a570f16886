"""The request body limit, counted in bytes as they arrive: a body sent with
``Transfer-Encoding: chunked`` (no Content-Length) is cut off with 413 the moment it crosses
the limit, before anything parses or stores it."""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.web.errors import BodyTooLarge, error_body


class BodyLimit:
    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int]) -> None:
        self.app = app
        self.limit_for = limit_for  # path -> bytes allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > limit:  # refused before reading a byte
            await _send_413(send, limit)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)  # the app's handler answers 413
            return message

        await self.app(scope, counted, send)


async def _send_413(send: Send, limit: int) -> None:
    body = json.dumps(error_body(f"Request body exceeds {limit} bytes.",
                                 "invalid_request_error", BodyTooLarge.code)).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

"""Limits on a request's header section, which uvicorn's httptools protocol does not have: a
size cap and a read timeout.

Unbounded, one client's 100 MB header held the event loop for seconds while httptools grew its
buffer (every other client stalled), two of them tripled the process's memory, and a header
sent halfway held its connection open for as long as the client liked (uvicorn's keep-alive
timeout only starts after a first response). Here a header section past ``max_header_bytes``
gets a 431 and the connection closes; one not complete within ``header_timeout_s`` of its
first byte (or of the connection, for a client that sends nothing) gets a 408 and closes.

While the header section is incomplete, the bytes read so far count (so a header that never
ends is cut off after one socket read past the cap, asyncio reads 256 KiB at a time); once it
is complete, its exact size does.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the header limits; ``guarded_protocol`` sets them."""

    max_header_bytes = 64 * 1024
    header_timeout_s = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_header = True  # a new connection waits for its first request's header
        self._header_bytes = 0
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused = False  # answered 431 or 408: the connection is closing

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_header:
            self._header_bytes += len(data)
        super().data_received(data)
        # Still in the header: every byte counted since it began is the header's.
        if (self._in_header and self._header_bytes > self.max_header_bytes
                and not self.transport.is_closing()):  # (not after uvicorn's own 400)
            self._refuse_too_large()

    def _refuse_too_large(self) -> None:
        self._refuse(431, b"Request Header Fields Too Large", "request_header_too_large",
                     f"The request's header exceeds {self.max_header_bytes} bytes.")

    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        if not self._in_header:  # the next request on a kept-alive connection
            self._in_header, self._header_bytes = True, 0
            self._arm_header_timer()

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_header, self._header_bytes = False, 0
        self._disarm_header_timer()
        # The read count above misses the read that completes the header: the exact size
        # (the request line's target and each "name: value\r\n") decides here.
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.max_header_bytes:
            self._refuse_too_large()
            return
        super().on_headers_complete()

    # The parser goes on through the rest of a read after a refusal: nothing more may start.
    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            super().on_message_complete()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        if not self._in_header or self._refused or self.transport.is_closing():
            return
        if self._responding():  # a pipelined header waits (unread) behind a long response
            self._arm_header_timer()
            return
        self._refuse(408, b"Request Timeout", "request_header_timeout",
                     f"The request's header was not complete within {self.header_timeout_s:g} s.")

    def _responding(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _refuse(self, status: int, reason: bytes, code: str, message: str) -> None:
        """Answer in OpenAI's error shape and close; only close where a response is still
        under way on this connection (a pipelined request's header): no answer can go into
        the middle of another."""
        self._disarm_header_timer()
        self._in_header, self._refused = False, True
        if self._responding():
            self.transport.close()
            return
        self.logger.info("request header refused: %s", message)
        body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                     "param": None, "code": code}}).encode()
        self.transport.write(b"".join([
            b"HTTP/1.1 %d %s\r\n" % (status, reason),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n", body]))
        self.transport.close()


def guarded_protocol(*, max_header_bytes: int,
                     header_timeout_s: float) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for ``uvicorn.run(http=...)`` with these limits."""
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {
        "max_header_bytes": max_header_bytes, "header_timeout_s": header_timeout_s})

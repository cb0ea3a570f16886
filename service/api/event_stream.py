"""A streamed response whose last chunk ends the response in the same send.

Starlette's StreamingResponse sends every chunk with ``more_body`` and then an empty body to
end the response: one more trip through the middleware and one more syscall (uvicorn writes
the chunked encoding's terminator by itself) for every streamed completion. A chunk marked
``LastChunk`` carries the end instead; the bytes on the wire are the same.
"""

from __future__ import annotations

import logging

from fastapi.responses import StreamingResponse
from starlette.types import Send

log = logging.getLogger("fairway.api")


class LastChunk(bytes):
    """A stream's final chunk: the response ends with it. Nothing may follow it."""


class EventStream(StreamingResponse):
    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        ended = False
        async for chunk in self.body_iterator:
            # The iterator runs to its end even after the last chunk, so that the wrappers
            # around it (quota release, in-flight gauge) finish as they would.
            if ended:
                log.error("a stream yielded after its last chunk; not sent")
                continue
            if not isinstance(chunk, bytes | memoryview):
                chunk = chunk.encode(self.charset)
            ended = isinstance(chunk, LastChunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": not ended})
        if not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

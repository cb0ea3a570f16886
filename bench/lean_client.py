"""A lean load generator's HTTP client: one keep-alive HTTP/1.1 connection on asyncio streams,
for benches whose load generator shares the box with what it measures.

httpx costs ~1.6 ms of CPU per streamed request on the 2-core box (bench/control_plane.py,
"load generator"), more than some of the processes measured; this client parses only what a
bench needs (the status, the chunked SSE body, ``data: [DONE]``) and costs a fraction of it.
It is a bench tool, not a general client: no TLS, no redirects, no compression, no proxies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(slots=True)
class Answer:
    status: int
    body: bytes  # the whole body, chunks joined
    done: bool  # a streamed body carried ``data: [DONE]``

    def error_code(self) -> str:
        """The OpenAI-shaped error's code, else the status."""
        try:
            return str(json.loads(self.body)["error"].get("code") or self.status)
        except (ValueError, KeyError, TypeError, AttributeError):
            return str(self.status)


class LeanConnection:
    """Requests one after another over one connection, reconnecting when the server closes."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post_json(self, path: str, body: dict[str, object],
                        headers: dict[str, str]) -> Answer:
        payload = json.dumps(body).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        request = (f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\n"
                   f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n"
                   f"{head}\r\n").encode() + payload
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._writer.write(request)
        try:
            return await self._answer(self._reader)
        except BaseException:
            await self.close()  # a half-read answer leaves the connection unusable
            raise

    async def _answer(self, reader: asyncio.StreamReader) -> Answer:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in
                  (line.partition(":") for line in lines[1:] if line)}
        if fields.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunk = await reader.readexactly(size + 2)  # the chunk and its CRLF
                if size == 0:
                    break
                body += chunk[:-2]
        else:
            body = bytearray(await reader.readexactly(int(fields.get("content-length", "0"))))
        if fields.get("connection", "").lower() == "close":
            await self.close()
        return Answer(status, bytes(body), b"data: [DONE]" in body)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None

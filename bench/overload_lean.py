"""bench/overload.py's requests by a lean client: one raw HTTP/1.1 connection per stream on
asyncio streams, timing the status line and the first token, and parsing only what the
report needs. httpx costs ~1.6 ms of CPU per streamed request (bench/lean_client.py): in a
burst of 400 on the 2-core box that shares the load generator with the service, the last
request left the client most of a second after the first, which the service cannot see and
which counted in every TTFT "at the client"."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

_JOB_ID = re.compile(rb'"id":\s*"chatcmpl-([0-9a-f]{32})"')
_CONTENT = re.compile(rb'"content":\s*"[^"]')
_PROCESSING = b"openai-processing-ms:"


async def lean_one(base: str, key: str, body: dict[str, Any], out: Any,
                         clock: Callable[[], float] = time.perf_counter) -> Any:
    """Fill ``out`` (bench/overload.py's Outcome) as ``one`` does, by a raw connection: the
    status line's time, the first chunk with content (TTFT), the end, the job's id."""
    parts = urlsplit(base)
    payload = json.dumps(body).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {parts.hostname}\r\n"
               f"authorization: Bearer {key}\r\ncontent-type: application/json\r\n"
               f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n").encode() + payload
    t0 = clock()
    writer = None
    try:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        out.latency_s = clock() - t0
        out.status = int(head.split(b" ", 2)[1])
        for line in head.lower().split(b"\r\n"):
            if line.startswith(_PROCESSING):
                out.server_ms = int(line[len(_PROCESSING):].strip())
        seen = bytearray()
        while True:
            data = await reader.read(65536)
            if not data:
                break
            seen += data
            if out.ttft_s is None and out.status == 200 and _CONTENT.search(seen):
                out.ttft_s = clock() - t0
        rest = bytes(seen)
        if out.status != 200:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                out.error_code = json.loads(rest[rest.find(b"{"):rest.rfind(b"}") + 1]
                                            )["error"].get("code")
            return out
        out.finished = b"data: [DONE]" in rest and b'"finish_reason":"' in rest.replace(
            b" ", b"")
        if b'"error":' in rest:
            out.error_code = "error"
        found = _JOB_ID.search(rest)
        out.job_hex = found.group(1).decode() if found else None
    except (OSError, asyncio.IncompleteReadError, ValueError):
        out.status = out.status or -1
    finally:
        if writer is not None:
            writer.close()
    return out

"""The benches' lean HTTP client (bench/lean_client.py) against a local asyncio server: a
chunked SSE answer read to ``[DONE]``, an error answer with its OpenAI code, and several
requests over one kept-alive connection."""

from __future__ import annotations

import asyncio
import json

from bench.lean_client import LeanConnection

SSE = [b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n', b"data: [DONE]\n\n"]


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 accepted: list[int]) -> None:
    accepted.append(1)
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            break
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        body = json.loads(await reader.readexactly(length))
        if body.get("fail"):
            error = json.dumps({"error": {"code": "rate_limit_exceeded"}}).encode()
            writer.write(b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(error), error))
        else:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            for chunk in SSE:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            writer.write(b"0\r\n\r\n")
        await writer.drain()
    writer.close()


def test_streamed_answers_errors_and_keep_alive() -> None:
    async def run() -> None:
        accepted: list[int] = []
        server = await asyncio.start_server(lambda r, w: _serve(r, w, accepted), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = LeanConnection(f"http://127.0.0.1:{port}")
        try:
            ok = await conn.post_json("/v1/chat/completions", {"stream": True}, {"x": "y"})
            assert ok.status == 200 and ok.done and ok.body == b"".join(SSE)
            refused = await conn.post_json("/v1/chat/completions", {"fail": True}, {})
            assert refused.status == 429 and not refused.done
            assert refused.error_code() == "rate_limit_exceeded"
            again = await conn.post_json("/v1/chat/completions", {}, {})
            assert again.done
            assert len(accepted) == 1  # all three over one connection
        finally:
            await conn.close()
            server.close()
            await server.wait_closed()

    asyncio.run(run())

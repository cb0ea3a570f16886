"""The served API bounds a request's header section (service/api/http_guard.py): past its size
a 431, not complete in time a 408, and either way the connection closes; meanwhile other
clients are answered as usual. Raw sockets: an HTTP client would not send such requests."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.cli.embedded import free_port
from tests.support.stack import Stack, wait_until

TIMEOUT_S = 1.0
MAX_HEADER = 64 * 1024


@pytest.fixture(scope="module")
def api(sim_stack: Stack) -> Iterator[tuple[str, int, int]]:
    """(host, port, pid) of an API process of its own, with a short header timeout."""
    port = free_port()
    proc = sim_stack.spawn("api-headers", ["api", "--port", str(port)],
                           FAIRWAY_HEADER_TIMEOUT_SECONDS=str(TIMEOUT_S),
                           FAIRWAY_MAX_HEADER_BYTES=str(MAX_HEADER))
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(base + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, 60, "api-headers", sim_stack)
    yield "127.0.0.1", port, proc.popen.pid
    sim_stack.kill("api-headers")


def _connect(api: tuple[str, int, int]) -> socket.socket:
    return socket.create_connection(api[:2], timeout=10)


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _status_and_body(raw: bytes) -> tuple[int, dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def _rss_kb(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1])
    raise AssertionError("no VmRSS")


def test_a_header_past_the_limit_is_a_431_in_openai_shape(api):
    with _connect(api) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (MAX_HEADER + 10)
                     + b"\r\n\r\n")
        status, body = _status_and_body(_read_all(sock))  # read to the server's close
    assert status == 431
    assert body["error"] == {"message": f"The request's header exceeds {MAX_HEADER} bytes.",
                             "type": "invalid_request_error", "param": None,
                             "code": "request_header_too_large"}


def test_a_huge_header_is_cut_off_early_and_others_are_served(api):
    """100 MB sent as one header: the connection is closed within the first megabytes, other
    clients' requests are answered as usual meanwhile, and the process hardly grows."""
    rss_before = _rss_kb(api[2])
    sent = 0
    latencies: list[float] = []
    stop = threading.Event()

    def others() -> None:
        with httpx.Client(base_url=f"http://{api[0]}:{api[1]}", timeout=10) as client:
            while not stop.is_set():
                started = time.monotonic()
                assert client.get("/healthz").status_code == 200
                latencies.append(time.monotonic() - started)

    thread = threading.Thread(target=others, daemon=True)
    thread.start()
    try:
        with _connect(api) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ")
            chunk = b"a" * (1 << 20)
            with pytest.raises(OSError):  # reset or broken pipe once the server has closed
                while sent < 100 * (1 << 20):
                    sock.sendall(chunk)
                    sent += len(chunk)
    finally:
        time.sleep(0.2)
        stop.set()
        thread.join(10)
    assert sent <= 8 * (1 << 20), sent  # socket buffers hold a few MB before the reset shows
    assert latencies and max(latencies) < 0.5, max(latencies)
    assert _rss_kb(api[2]) - rss_before < 20_000


def test_a_half_sent_header_gets_a_408_and_is_closed(api):
    with _connect(api) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
        started = time.monotonic()
        raw = _read_all(sock)
        waited = time.monotonic() - started
    status, body = _status_and_body(raw)
    assert status == 408 and body["error"]["code"] == "request_header_timeout"  # type: ignore[index]
    assert TIMEOUT_S * 0.8 < waited < TIMEOUT_S + 2, waited


def test_a_connection_that_sends_nothing_is_closed(api):
    with _connect(api) as sock:
        started = time.monotonic()
        assert _read_all(sock).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - started < TIMEOUT_S + 2


def test_kept_alive_requests_and_a_large_body_are_not_limited(api):
    """The limits are the header's: each request on a kept-alive connection starts its own
    count and clock, and a body sent with its header does not count."""
    conn = http.client.HTTPConnection(*api[:2], timeout=10)
    for _ in range(3):
        conn.request("GET", "/healthz", headers={"x-pad": "a" * (MAX_HEADER // 2)})
        assert conn.getresponse().read() == b'{"status":"ok"}'
        time.sleep(TIMEOUT_S * 0.6)  # together past the timeout, each within it
    conn.close()
    body = json.dumps({"input": "x" * 500_000}).encode()
    with _connect(api) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nhost: x\r\ncontent-type: "
                     b"application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        assert not sock.recv(65536).startswith(b"HTTP/1.1 431")

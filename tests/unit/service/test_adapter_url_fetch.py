"""An admin's registration by URL, against a local HTTP server: a good archive is checked and
stored like an upload; too big (without a Content-Length, with a false one, with an honest one
over the limit), an upstream 404, a redirect off http(s) and other schemes are refused in
OpenAI's error shape with nothing stored."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from service.adapters.fetch_url import FetchRefused, check_url, download, redacted_url
from service.adapters.upload import AcceptedAdapter, accept_url
from service.files.storage import LocalStorage
from service.store.settings import AdapterSettings
from service.web.errors import APIError
from tests.support.lora_adapter import adapter_zip

ARCHIVE = adapter_zip()
LIMIT = len(ARCHIVE) + 1024
# Each path: (status, headers, body chunks). Without a Content-Length the server closes the
# connection to end the body (HTTP/1.0), so the client cannot know the size in advance.
Route = tuple[int, dict[str, str], list[bytes]]


def _routes(base: str) -> dict[str, Route]:
    huge = [b"x" * 65536] * 256  # 16 MiB: far more than sockets buffer between the two
    return {
        "/good.zip": (200, {"Content-Length": str(len(ARCHIVE))}, [ARCHIVE]),
        "/chunked.zip": (200, {}, [ARCHIVE[:100], ARCHIVE[100:]]),
        "/endless": (200, {}, huge),
        "/honest-huge": (200, {"Content-Length": str(LIMIT + 1)}, huge),
        "/lying": (200, {"Content-Length": "100"}, huge),
        "/missing": (404, {"Content-Length": "9"}, [b"not found"]),
        "/hop": (302, {"Location": f"{base}/good.zip", "Content-Length": "0"}, []),
        "/to-file": (302, {"Location": "file:///etc/passwd", "Content-Length": "0"}, []),
        "/loop": (302, {"Location": "/loop", "Content-Length": "0"}, []),
    }


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, dict[str, int]]]:
    sent: dict[str, int] = {}  # bytes the server wrote per path, before the client hung up

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            status, headers, chunks = routes.get(self.path, (404, {}, []))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            sent[self.path] = 0
            try:
                for chunk in chunks:
                    self.wfile.write(chunk)
                    sent[self.path] += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading: what it refused

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    routes = _routes(base)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield base, sent
    httpd.shutdown()
    httpd.server_close()


async def _served(name: str) -> bool:
    return name == "base-model"


def _accept(url: str, tmp_path: Path, **limits: float) -> Callable[[], AcceptedAdapter]:
    settings = AdapterSettings(max_adapter_bytes=int(limits.get("max_bytes", LIMIT)),
                               adapter_url_timeout_s=limits.get("timeout_s", 30.0))
    storage = LocalStorage(tmp_path / "files")

    def run() -> AcceptedAdapter:
        return asyncio.run(accept_url(url, name="from-url", base="base-model",
                                      settings=settings, storage=storage, key="adapters/t/a",
                                      is_served=_served))
    return run


def _stored(tmp_path: Path) -> list[str]:
    root = tmp_path / "files"
    return sorted(p.name for p in root.rglob("*") if p.is_file()) if root.exists() else []


def _refusal(run: Callable[[], AcceptedAdapter]) -> APIError:
    with pytest.raises(APIError) as info:
        run()
    assert info.value.status == 400
    return info.value


def test_a_good_archive_is_checked_and_stored(server: tuple[str, dict[str, int]],
                                               tmp_path: Path) -> None:
    base, _ = server
    for path in ("/good.zip", "/chunked.zip", "/hop"):
        where = tmp_path / path.strip("/").replace(".", "-")
        accepted = _accept(base + path, where)()
        assert (accepted.name, accepted.base_model, accepted.info.rank) == (
            "from-url", "base-model", 8)
        assert _stored(where) == ["adapter_config.json", "adapter_model.safetensors"]


def test_too_big_is_refused_as_it_arrives(server: tuple[str, dict[str, int]],
                                          tmp_path: Path) -> None:
    base, sent = server
    for path in ("/endless", "/honest-huge"):
        err = _refusal(_accept(base + path, tmp_path))
        assert (err.code, err.param) == ("invalid_adapter", "url")
        assert "size limit" in err.message, err.message
    # The client hung up early: the server got out what socket buffers hold, not the 16 MiB.
    assert sent["/endless"] < 4 << 20 and sent["/honest-huge"] < 4 << 20, sent
    # A Content-Length that undercounts bounds what is read: the rest is never stored, and
    # the cut archive is not an adapter.
    err = _refusal(_accept(base + "/lying", tmp_path))
    assert (err.code, err.param) == ("invalid_adapter", "url")
    assert _stored(tmp_path) == []
    # A limit below a good archive's size refuses it too.
    err = _refusal(_accept(base + "/good.zip", tmp_path, max_bytes=len(ARCHIVE) - 1))
    assert "size limit" in err.message


def test_upstream_failures_are_400s_that_say_why(server: tuple[str, dict[str, int]],
                                                 tmp_path: Path) -> None:
    base, _ = server
    assert "HTTP 404" in _refusal(_accept(base + "/missing", tmp_path)).message
    assert "not http(s)" in _refusal(_accept(base + "/to-file", tmp_path)).message
    assert "more than 5 times" in _refusal(_accept(base + "/loop", tmp_path)).message
    # Nothing listens on port 9 of this host: a connection failure, not a 500.
    assert "failed" in _refusal(_accept("http://127.0.0.1:9/x.zip", tmp_path)).message
    assert _stored(tmp_path) == []


def test_a_slow_server_hits_the_deadline(tmp_path: Path) -> None:
    stop = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            stop.wait(5)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/a.zip"
        err = _refusal(_accept(url, tmp_path, timeout_s=0.5))
        assert "longer than 0.5 s" in err.message
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()


def test_only_http_urls_are_taken(tmp_path: Path) -> None:
    for url in ("s3://bucket/adapter.zip", "file:///etc/passwd", "ftp://host/a.zip",
                "https:///no-host", "http://[::1", "adapter.zip"):
        err = _refusal(_accept(url, tmp_path))
        assert (err.code, err.param) == ("invalid_value", "url"), url
    assert "presigned https://" in _refusal(_accept("s3://b/a.zip", tmp_path)).message
    with pytest.raises(FetchRefused):
        asyncio.run(download("gopher://x/a", tmp_path / "a", max_bytes=1, timeout_s=1))
    assert check_url("https://example.test/a.zip") == "https://example.test/a.zip"


def test_the_audit_keeps_no_presigned_credential() -> None:
    assert redacted_url("https://user:pw@bucket.example.test:8443/a/b.zip?X-Sig=s#f") == (
        "https://bucket.example.test:8443/a/b.zip")

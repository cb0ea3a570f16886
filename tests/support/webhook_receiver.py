"""A real HTTP webhook receiver on 127.0.0.1 for tests: it verifies every request's Standard
Webhooks signature with the `standardwebhooks` package, as a tenant's server would, and keeps
what it accepted. It can be down (not listening), answer an error status, or answer slowly."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from service.cli.embedded import free_port


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True
    # socketserver's default backlog is 5: two senders of 4 connections each overflowed it
    # on a loaded CI box, the kernel dropped a SYN, and its 1 s retransmit outlasted the
    # tests' 1 s connect timeout (a failed attempt, then a retry, where none was expected).
    request_queue_size = 128


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    event: dict[str, Any]


@dataclass
class Receiver:
    secrets: list[str] = field(default_factory=list)  # any one verifying is enough
    status: int = 200
    delay_s: float = 0.0
    port: int = field(default_factory=free_port)
    received: list[Received] = field(default_factory=list)
    refused: int = 0  # requests that failed verification or got `status` >= 300
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                event = receiver._verify(body, headers)
                code = receiver.status if event is not None else 400
                with receiver._lock:
                    if event is not None and code < 300:
                        receiver.received.append(Received(headers, body, event))
                    else:
                        receiver.refused += 1
                self.send_response(code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = _Server(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _verify(self, body: bytes, headers: dict[str, str]) -> dict[str, Any] | None:
        for secret in self.secrets:
            try:
                Webhook(secret).verify(body, headers)
            except WebhookVerificationError:
                continue
            event: dict[str, Any] = json.loads(body)
            return event
        return None

    def event_ids(self) -> Counter[str]:
        with self._lock:
            return Counter(r.event["id"] for r in self.received)

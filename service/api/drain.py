"""An API process's graceful stop (SIGTERM): `/readyz` answers 503 first, for
`FAIRWAY_API_DRAIN_DELAY_SECONDS`, while the API still serves everything (a balancer stops
sending it new connections meanwhile); then uvicorn's graceful shutdown stops accepting and
gives the requests and streams in flight `FAIRWAY_API_DRAIN_GRACE_SECONDS` to finish; then the
process exits 0. Nothing accepted is lost: every job is a row before its answer starts, and
one cut at the grace's end still ends and is fetchable (`GET /v1/jobs/{id}`).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from service.store.settings import Settings

log = logging.getLogger("fairway.api")

READYZ = "/readyz"
DRAINING_BODY = json.dumps({"status": "not_ready", "checks": {},
                            "reasons": ["draining: this API process is stopping"]}).encode()


class DrainGate:
    """Answers `/readyz` with 503 once draining; everything else passes through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.draining = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.draining and scope["type"] == "http" and scope["path"] == READYZ:
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"retry-after", b"1"),
                (b"content-length", str(len(DRAINING_BODY)).encode())]})
            await send({"type": "http.response.body", "body": DRAINING_BODY})
            return
        await self.app(scope, receive, send)


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose SIGTERM first marks the gate draining and stops accepting only
    after the delay. A second SIGTERM, or SIGINT, stops as uvicorn does."""

    def __init__(self, config: uvicorn.Config, gate: DrainGate, delay_s: float) -> None:
        super().__init__(config)
        self.gate = gate
        self.delay_s = delay_s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGTERM or self.gate.draining:
            super().handle_exit(sig, frame)
            return
        self.gate.draining = True
        log.info("draining: readiness false; accepting for %.1f s more", self.delay_s)
        # Not recorded as a captured signal: uvicorn would raise it again once stopped, and
        # a drained API exits 0 rather than by the signal.
        timer = threading.Timer(self.delay_s, self._stop_accepting)
        timer.daemon = True
        timer.start()

    def _stop_accepting(self) -> None:
        log.info("draining: no new connections; %.0f s for those in flight",
                 self.config.timeout_graceful_shutdown or 0)
        self.should_exit = True


def run_draining(app: ASGIApp, settings: Settings, **config: Any) -> None:
    """``uvicorn.run(app, **config)`` with the drain above."""
    gate = DrainGate(app)
    server = DrainingServer(
        uvicorn.Config(gate, timeout_graceful_shutdown=int(settings.api.drain_grace_seconds),
                       **config),
        gate, settings.api.drain_delay_seconds)
    server.run()

"""The /metrics HTTP endpoint of the dispatcher and the workers (the API serves its own).

Port 0 picks a free port. Either way the endpoint is published in Redis, at
``fairway:metrics:<role>:<instance>`` = {"host", "port", "pid"}, refreshed while the process
lives (TTL ``PUBLISH_TTL_S``), so tests and file-based service discovery can find it; the
worker also puts ``metrics_port`` in its heartbeat.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

from prometheus_client import start_http_server
from redis import Redis

from service.store.settings import Settings
from service.store.telemetry.metrics import REGISTRY
from service.store.telemetry.state import configure, enabled

log = logging.getLogger("fairway.metrics")
KEY_PREFIX = "fairway:metrics:"
PUBLISH_TTL_S = 30


def endpoint_key(role: str, instance: str) -> str:
    return f"{KEY_PREFIX}{role}:{instance}"


def start_metrics_endpoint(settings: Settings, *, role: str, port: int,
                           instance: str | None = None) -> int | None:
    """Serve REGISTRY on ``port`` (0: any free one); returns the bound port, None when off."""
    configure(settings.metrics, settings.database_url)
    if not enabled():
        return None
    server, _thread = start_http_server(port, addr=settings.metrics.host, registry=REGISTRY)
    bound = int(server.server_port)
    instance = instance or f"{socket.gethostname()}-{os.getpid()}"
    log.info("metrics on %s:%d/metrics", settings.metrics.host, bound,
             extra={"role": role, "instance": instance})
    if settings.redis_url:
        _Publisher(settings.redis_url, endpoint_key(role, instance), bound).start()
    return bound


class _Publisher(threading.Thread):
    def __init__(self, redis_url: str, key: str, port: int) -> None:
        super().__init__(name="metrics-publisher", daemon=True)
        self.redis = Redis.from_url(redis_url)
        self.key = key
        self.value = json.dumps({"host": socket.gethostname(), "port": port,
                                 "pid": os.getpid()})

    def run(self) -> None:
        while True:
            try:
                self.redis.set(self.key, self.value, ex=PUBLISH_TTL_S)
            except Exception:  # Redis down: the endpoint still serves; retry next time
                log.warning("could not publish the metrics endpoint")
            time.sleep(PUBLISH_TTL_S / 3)

"""Serving the API: one process, or ``workers`` processes behind one port.

With several workers uvicorn's supervisor binds the port and starts each worker in a fresh
interpreter (multiprocessing's spawn), which builds its own app from the environment: the
app and the HTTP protocol travel as import strings, so nothing built here has to be pickled.
Their metrics merge through prometheus_client's multiprocess files
(service.store.telemetry.multiproc), set up here before any worker starts. The supervisor
starts a worker again if one dies.

What each worker holds alone is what an API pod holds alone (docs/observability.md): the
door's count of requests admitted since the last outlook, its policy cache (bound by the
policy generation in Redis), the SLO windows' gauges; quotas, admin throttling and
everything else live in Redis or Postgres and are shared.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from service.api.drain import run_draining
from service.api.http_guard import GuardedHttpToolsProtocol, guarded_protocol
from service.store.settings import Settings


class WorkerProtocol(GuardedHttpToolsProtocol):
    """The guarded protocol by import path; ``worker_app`` sets its limits in each worker."""


def _start(settings: Settings, role: str) -> FastAPI:
    from service.api.app import create_app
    from service.store.telemetry.gc_pauses import freeze_startup_heap
    from service.store.telemetry.logs import configure_logging

    configure_logging(settings.logging.level)  # uvicorn's own loggers then log JSON lines too
    app = create_app(settings)
    freeze_startup_heap(role)
    return app


def worker_app() -> FastAPI:
    """uvicorn's factory in each worker: the settings come from the environment the
    supervisor passed on (``serve`` puts a port given on the command line there)."""
    settings = Settings()
    WorkerProtocol.max_header_bytes = settings.api.max_header_bytes
    WorkerProtocol.header_timeout_s = settings.api.header_timeout_seconds
    return _start(settings, "api")


def serve(settings: Settings, workers: int = 1) -> None:
    import os
    import shutil

    import uvicorn

    common: dict[str, Any] = dict(host=settings.api.host, port=settings.api.port,
                                  log_level=settings.logging.level.lower(), access_log=False,
                                  log_config=None)
    if workers <= 1:
        app = _start(settings, "api")
        http = guarded_protocol(max_header_bytes=settings.api.max_header_bytes,
                                header_timeout_s=settings.api.header_timeout_seconds)
        run_draining(app, settings, http=http, **common)  # SIGTERM: service.api.drain
        return
    from service.store.telemetry.logs import configure_logging
    from service.store.telemetry.multiproc import ENV, prepare_directory

    configure_logging(settings.logging.level)
    os.environ["FAIRWAY_API_PORT"] = str(settings.api.port)  # the workers' Settings() read it
    given = os.environ.get(ENV)
    directory = prepare_directory() if settings.metrics.enabled else None
    try:
        # In flight at a SIGTERM: as one process's drain, without its readiness delay.
        uvicorn.run(f"{__name__}:worker_app", factory=True, workers=workers,
                    http=f"{__name__}:WorkerProtocol",
                    timeout_graceful_shutdown=int(settings.api.drain_grace_seconds), **common)
    finally:
        if directory and not given:  # a temporary one of our own: nothing reads it after us
            shutil.rmtree(directory, ignore_errors=True)

"""The FastAPI application factory (no work at import time)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.responses import PlainTextResponse
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from service.adapters.admin_routes import router as admin_adapters_router
from service.adapters.router import router as adapters_router
from service.admin.routes import router as admin_router
from service.admin.routes_state import router as admin_state_router
from service.admin.routes_views import router as admin_views_router
from service.admin.ui import router as admin_ui_router
from service.admin.webhook_routes import router as admin_webhooks_router
from service.api.body_limit import BodyLimit
from service.api.door import Door
from service.api.jobs_routes import router as jobs_router
from service.api.model_routes import router as model_router
from service.api.openai_routes import router as openai_router
from service.api.outlook_poller import outlook_poller
from service.api.responses_routes import router as responses_router
from service.api.slo_gate import SloGate
from service.api.usage_routes import admin_router as admin_usage_router
from service.api.usage_routes import router as usage_router
from service.api.warmup import warm_up
from service.batches.router import router as batches_router
from service.files.router import router as files_router
from service.observability import http as obs_http
from service.quotas.door_policy import DoorPolicies, PolicyCache
from service.quotas.reservation import RequestQuotas, install_redis_unavailable_handler
from service.spend.routes import router as spend_router
from service.store import tracing
from service.store.db import async_engine, async_sessionmaker_for
from service.store.quota_store import QuotaStore
from service.store.settings import Settings, get_settings
from service.store.telemetry.logs import configure_logging
from service.store.telemetry.state import configure as configure_metrics
from service.web.catalog import ModelCatalog
from service.web.deps import storable_params
from service.web.errors import install_error_handlers
from service.web.request_id import RequestId
from service.web.responses import install_openapi


def api_redis(settings: Settings) -> Redis:
    """The API's Redis client. A Redis that hangs (stopped, wedged) answers nothing: each
    command and connection gives up after ``redis_timeout_seconds``, and a timeout is not
    tried again (a refused or reset connection still is), so the request gets its 503 then
    instead of after several timeouts."""
    timeout_s = settings.api.redis_timeout_seconds
    return Redis.from_url(
        settings.redis_url, max_connections=settings.redis_max_connections,
        socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=1), 10,
                    supported_errors=(RedisConnectionError,)))


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_logging(settings.logging.level)
        app.state.settings = settings
        deadline_s = settings.api.database_timeout_seconds
        app.state.sessionmaker = async_sessionmaker_for(settings.database_url, deadline_s)
        app.state.redis = api_redis(settings)
        app.state.catalog = ModelCatalog(settings, app.state.redis)
        app.state.slo_gate = SloGate(app.state.redis)
        app.state.slo_gate.backlog.loop_lag.start()
        app.state.slo_gate.poller = outlook_poller(
            settings.redis_url, settings.api.redis_timeout_seconds, app.state.slo_gate.keep)
        app.state.slo_gate.poller.start()
        app.state.quota_store = QuotaStore(app.state.redis)
        policies = DoorPolicies(PolicyCache(), app.state.sessionmaker)
        app.state.door = Door(settings, app.state.slo_gate, policies,
                              RequestQuotas(app.state.quota_store, policies))
        db = async_engine(settings.database_url, deadline_s)
        await warm_up(db, app.state.redis, connections=db.pool.size())  # type: ignore[attr-defined]
        try:
            yield
        finally:
            await app.state.slo_gate.backlog.loop_lag.stop()
            app.state.slo_gate.poller.stop()
            await app.state.redis.aclose()
            await async_engine(settings.database_url, deadline_s).dispose()

    app = FastAPI(title="Fairway", version="0.1.0", lifespan=lifespan,
                  dependencies=[Depends(storable_params)])
    install_error_handlers(app)
    install_openapi(app)
    install_redis_unavailable_handler(app)

    def body_limit(path: str) -> int:
        # Uploads stream to storage and count their own limit exactly (service/files/upload.py);
        # this one only adds room for the multipart framing.
        if path == "/v1/files":
            return settings.batches.max_file_bytes + 1024 * 1024
        if path == "/v1/adapters":  # the same for adapter uploads (service/adapters/upload.py)
            return settings.adapters.max_adapter_bytes + 1024 * 1024
        return settings.limits.max_request_bytes

    app.add_middleware(BodyLimit, limit_for=body_limit)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    # Observability (docs/observability.md): /readyz always; /metrics unless metrics are off.
    app.add_api_route("/readyz", obs_http.readyz_response, methods=["GET"], responses={
        503: {"description": "Not ready; `reasons` says why.",
              "content": {"application/json": {"schema": {"type": "object"}}}}})
    configure_metrics(settings.metrics, settings.database_url)
    if settings.metrics.enabled:
        app.add_api_route("/metrics", obs_http.metrics_response, methods=["GET"],
                          response_class=PlainTextResponse)
        app.add_middleware(obs_http.RequestCounter)

    app.include_router(openai_router)
    app.include_router(model_router)
    app.include_router(spend_router)
    for router in (admin_router, admin_state_router, admin_ui_router, admin_webhooks_router,
                   admin_views_router):
        app.include_router(router)
    app.include_router(files_router)
    app.include_router(adapters_router)
    app.include_router(admin_adapters_router)
    app.include_router(batches_router)
    app.include_router(jobs_router)
    app.include_router(responses_router)
    app.include_router(usage_router)
    app.include_router(admin_usage_router)
    app.add_middleware(RequestId)  # last added runs first: every response gets x-request-id
    if tracing.configure(settings.tracing, "fairway-api"):
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        # The request's server span is each trace's root; one span per body chunk sent
        # ("send") would be one per token.
        FastAPIInstrumentor.instrument_app(app, exclude_spans=["receive", "send"],
                                           excluded_urls="healthz,readyz,metrics")
    return app

"""The FastAPI application factory (no work at import time)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from redis.asyncio import Redis

from service.api.openai_routes import router as openai_router
from service.api.workers_view import ModelCatalog
from service.db.session import async_engine, async_sessionmaker_for
from service.errors import error_body, install_error_handlers
from service.logs import configure_logging
from service.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        configure_logging(settings.log_level)
        app.state.settings = settings
        app.state.sessionmaker = async_sessionmaker_for(settings.database_url)
        app.state.redis = Redis.from_url(settings.redis_url)
        app.state.catalog = ModelCatalog(settings, app.state.redis)
        try:
            yield
        finally:
            await app.state.redis.aclose()
            await async_engine(settings.database_url).dispose()

    app = FastAPI(title="Fairway", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)

    @app.middleware("http")
    async def limit_body_size(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > settings.max_request_bytes:
            return JSONResponse(status_code=413, content=error_body(
                f"Request body exceeds {settings.max_request_bytes} bytes.",
                "invalid_request_error", "request_too_large"))
        return await call_next(request)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(openai_router)
    return app

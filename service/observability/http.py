"""The API side: /metrics, /readyz and a pure-ASGI middleware counting requests per route."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.store.heartbeats import LeaderBeat
from service.store.keys import LEADER_KEY, LEADER_TTL_S
from service.store.telemetry import metrics as m
from service.store.telemetry.metrics import REGISTRY
from service.web.errors import DATABASE

CHECK_TIMEOUT_S = 2.0


class RequestCounter:
    """Counts HTTP requests by method, route template (bounded) and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            m.HTTP_REQUESTS.labels(scope["method"], path, str(status)).inc()


async def metrics_response(_: Request) -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


async def readiness(state: Any) -> tuple[bool, dict[str, Any]]:
    """DB, Redis, and a live worker for every model this API serves; reasons when not."""
    from service.web.catalog import live_workers

    checks: dict[str, Any] = {}
    reasons: list[str] = []
    try:
        async with state.sessionmaker() as session:
            await asyncio.wait_for(session.execute(text("SELECT 1")), CHECK_TIMEOUT_S)
        checks["database"] = "ok"
        DATABASE.ok()
    except Exception as exc:
        checks["database"] = "down"
        reasons.append(f"database unreachable: {type(exc).__name__}")
    workers: list[dict[str, Any]] = []
    try:
        await asyncio.wait_for(state.redis.ping(), CHECK_TIMEOUT_S)
        checks["redis"] = "ok"
        workers = await asyncio.wait_for(live_workers(state.redis), CHECK_TIMEOUT_S)
        leader = LeaderBeat.decode(await asyncio.wait_for(state.redis.get(LEADER_KEY),
                                                          CHECK_TIMEOUT_S))
        age = time.time() - leader.ts if leader else None
        checks["dispatcher"] = ({"leader": leader.dispatcher, "age_s": round(age, 2)}
                                if leader and age is not None and age <= LEADER_TTL_S
                                else "none")
        if checks["dispatcher"] == "none":
            reasons.append("no live dispatcher: nothing is scheduling jobs")
    except Exception as exc:
        checks["redis"] = "down"
        reasons.append(f"redis unreachable: {type(exc).__name__}")
    served = {state.settings.engine.served_model_name}
    per_model = {name: 0 for name in served}
    for worker in workers:
        for name in worker.get("models", []):
            per_model[name] = per_model.get(name, 0) + 1
    checks["workers"] = per_model
    if checks["redis"] == "ok":
        reasons += [f"no live worker serves model '{name}'" for name in sorted(served)
                    if per_model.get(name, 0) == 0]
    return not reasons, {"status": "ready" if not reasons else "not_ready",
                         "checks": checks, "reasons": reasons}


async def readyz_response(request: Request) -> JSONResponse:
    ready, body = await readiness(request.app.state)
    return JSONResponse(body, status_code=200 if ready else 503)

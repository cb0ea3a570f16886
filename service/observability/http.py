"""The API side: /metrics, /readyz and a pure-ASGI middleware counting requests per route."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics
from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.store.heartbeats import LeaderBeat
from service.store.keys import LEADER_KEY, LEADER_TTL_S
from service.store.telemetry import metrics as m
from service.store.telemetry import multiproc
from service.store.telemetry.metrics import REGISTRY
from service.web.errors import DATABASE

CHECK_TIMEOUT_S = 1.0  # a probe's own timeout is often 1 s (Kubernetes' default)
RETRY_AFTER_S = 2
T = TypeVar("T")


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


async def metrics_response(request: Request) -> Response:
    # Several workers behind this port: every worker's files merged, whichever one answers.
    registry = multiproc.merged_registry() if multiproc.active() else REGISTRY
    # A scraper that asks for OpenMetrics (Prometheus does) gets it, with the exemplars
    # (latencies' job ids) that the text format cannot carry; names as they are (vLLM's
    # have colons, which the default escaping would turn into underscores).
    if "application/openmetrics-text" in request.headers.get("accept", ""):
        body = openmetrics.generate_latest(  # type: ignore[no-untyped-call]
            registry, escaping=openmetrics.ALLOWUTF8)
        return Response(body, media_type=openmetrics.CONTENT_TYPE_LATEST)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


async def _within(call: Awaitable[T], budget_s: float) -> T:
    """``call``'s result, or TimeoutError after ``budget_s``. Unlike ``asyncio.wait_for``, this
    does not wait for the cancelled call to unwind: psycopg, cancelled on a Postgres that
    hangs, waits up to 10 s more trying to cancel the query on the server."""
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=budget_s)
    if not done:
        task.cancel()
        _unwinding.add(task)
        task.add_done_callback(_forget)
        raise TimeoutError(f"no answer within {budget_s:g} s")
    return task.result()


_unwinding: set[asyncio.Future[Any]] = set()  # cancelled checks still unwinding (referenced)


def _forget(task: asyncio.Future[Any]) -> None:
    _unwinding.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a check that failed late is not logged as unhandled


async def _database_check(state: Any) -> None:
    async with state.sessionmaker() as session:
        await session.execute(text("SELECT 1"))


async def _redis_check(state: Any) -> tuple[list[dict[str, Any]], LeaderBeat | None]:
    from service.web.catalog import live_workers

    await state.redis.ping()
    workers = await live_workers(state.redis)
    return workers, LeaderBeat.decode(await state.redis.get(LEADER_KEY))


async def readiness(state: Any) -> tuple[bool, dict[str, Any]]:
    """DB, Redis, a dispatcher, and (only without a waiting room) a live worker for the
    configured model; reasons when not. The
    checks run side by side, each within CHECK_TIMEOUT_S: a dependency that hangs makes the
    answer "not ready" in that time, not a probe that waits with it."""
    checks: dict[str, Any] = {}
    reasons: list[str] = []
    database, redis = await asyncio.gather(
        _within(_database_check(state), CHECK_TIMEOUT_S),
        _within(_redis_check(state), CHECK_TIMEOUT_S), return_exceptions=True)
    if isinstance(database, BaseException):
        checks["database"] = "down"
        reasons.append(f"database unreachable: {type(database).__name__}")
    else:
        checks["database"] = "ok"
        DATABASE.ok()
    workers: list[dict[str, Any]] = []
    if isinstance(redis, BaseException):
        checks["redis"] = "down"
        reasons.append(f"redis unreachable: {type(redis).__name__}")
    else:
        checks["redis"] = "ok"
        workers, leader = redis
        age = time.time() - leader.ts if leader else None
        checks["dispatcher"] = ({"leader": leader.dispatcher, "age_s": round(age, 2)}
                                if leader and age is not None and age <= LEADER_TTL_S
                                else "none")
        if checks["dispatcher"] == "none":
            reasons.append("no live dispatcher: nothing is scheduling jobs")
    served = {state.settings.engine.served_model_name}
    per_model = {name: 0 for name in served}
    for worker in workers:
        if worker.get("draining"):  # stopping (worker.drain): nothing is placed there now
            continue
        for name in worker.get("models", []):
            per_model[name] = per_model.get(name, 0) + 1
    checks["workers"] = per_model
    # With a waiting room a model without workers (scaled to zero, or starting) is not a
    # reason to take the API out of its balancer: its requests wait for a worker there.
    if checks["redis"] == "ok" and state.settings.api.waiting_room_seconds <= 0:
        reasons += [f"no live worker serves model '{name}'" for name in sorted(served)
                    if per_model.get(name, 0) == 0]
    return not reasons, {"status": "ready" if not reasons else "not_ready",
                         "checks": checks, "reasons": reasons}


async def readyz_response(request: Request) -> JSONResponse:
    ready, body = await readiness(request.app.state)
    if ready:
        return JSONResponse(body)
    return JSONResponse(body, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

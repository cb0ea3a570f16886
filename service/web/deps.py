"""Request dependencies: settings, DB session, Redis, and the authenticated tenant."""

from __future__ import annotations

import datetime as dt
import hmac
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession

from service.store.models.tenants import Tenant
from service.store.settings import Settings
from service.store.storable import first_unstorable
from service.tenants.accounts import KeyExpired, TenantSuspended, authenticate_caller
from service.tenants.key_cache import key_cache
from service.web import admin_guard
from service.web.errors import APIError


# Every dependency here is ``async def``, though none awaits: FastAPI runs a plain ``def``
# dependency in a worker thread, a thread hop per dependency per request.
async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    session: AsyncSession = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        if session.in_transaction():
            # It holds a connection: closed to completion even if the request is being
            # cancelled, in a task of its own, as AsyncSession's context manager does.
            async with session:
                pass
        else:
            # Nothing to give back: closed here, without that task. Every request paid it,
            # one or two turns of a busy event loop (p90 16 ms at the door under overload,
            # bench/overload.py), though most never touch the database (a refusal, a cached key).
            await session.close()


async def get_redis(request: Request) -> Redis:
    redis: Redis = request.app.state.redis
    return redis


async def storable_params(request: Request) -> None:
    """Path and query parameters reach SQL as text, so one Postgres cannot store (U+0000) is
    refused with a 400 that names it, as the same text in a body is (service.store.storable).
    The app runs this before every route."""
    params = [*request.path_params.items(), *request.query_params.multi_items()]
    for name, value in params:
        found = first_unstorable(value, allow_nul=False, path=name)
        if found is not None:
            raise APIError(400, f"{found[0]} {found[1]}", code="invalid_value", param=name)


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
SessionDep = Annotated[AsyncSession, Depends(get_session)]
RedisDep = Annotated[Redis, Depends(get_redis)]


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise APIError(401, "Missing API key: send 'Authorization: Bearer <key>'.",
                       code="invalid_api_key")
    return token.strip()


async def current_tenant(request: Request, session: SessionDep, settings: SettingsDep) -> Tenant:
    try:
        found = await authenticate_caller(session, clear_key=_bearer(request),
                                          secret=settings.secret_key,
                                          cache=key_cache(request.app.state),
                                          sessions=request.app.state.sessionmaker)
    except KeyExpired as exc:
        when = exc.expires_at.astimezone(dt.UTC)
        raise APIError(401, f"This API key expired at {when:%Y-%m-%d %H:%M} UTC. Ask your "
                            "administrator for a new key.",
                       code="invalid_api_key") from exc
    except TenantSuspended as exc:
        raise APIError(403, "Your account is suspended: an administrator suspended this API "
                            "key's tenant. Contact your administrator to restore access.",
                       code="tenant_suspended", type_="permission_error") from exc
    if found is None:
        raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
    # Jobs record their key (per-key usage); the door enforces its policy.
    request.state.api_key_id, request.state.api_key_policy = found.key_id, found.policy
    return found.tenant


CurrentTenant = Annotated[Tenant, Depends(current_tenant)]


async def require_admin(request: Request, settings: SettingsDep) -> str:
    """The admin credential is its own secret, never a tenant key. Returns the actor name for
    the audit log (X-Fairway-Actor if the caller names itself, else "admin")."""
    redis: Redis = request.app.state.redis
    client = request.client.host if request.client else "unknown"
    limit = settings.api.admin_auth_failures_per_minute
    await admin_guard.refuse_if_throttled(redis, client, limit)
    token = _bearer(request)
    if not hmac.compare_digest(token.encode(), settings.admin_token.encode()):
        await admin_guard.record_failure(redis, client, limit)
        raise APIError(403, "This route needs the admin credential.", code="forbidden")
    actor = request.headers.get("x-fairway-actor", "").strip()[:64]
    return f"admin:{actor}" if actor else "admin"


AdminDep = Annotated[str, Depends(require_admin)]

"""Request dependencies: settings, DB session, Redis, and the authenticated tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession

from service.errors import APIError
from service.settings import Settings
from service.tenants.models import Tenant
from service.tenants.service import authenticate


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.app.state.sessionmaker() as session:
        yield session


def get_redis(request: Request) -> Redis:
    redis: Redis = request.app.state.redis
    return redis


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
    tenant = await authenticate(session, clear_key=_bearer(request), secret=settings.secret_key)
    if tenant is None:
        raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
    return tenant


CurrentTenant = Annotated[Tenant, Depends(current_tenant)]

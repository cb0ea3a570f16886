"""Tenant and key operations (keyword-only functions over a session)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

from service.store.models.tenants import ApiKey, Tenant
from service.tenants.key_cache import KeyCache, KeyLookup
from service.tenants.key_policy import KeyPolicy, expired
from service.tenants.keys import display_prefix, generate_key, hash_key


def create_tenant(session: Session, *, name: str, plan: str = "standard",
                  weight: float = 1.0) -> Tenant:
    tenant = Tenant(name=name, plan=plan, weight=weight)
    session.add(tenant)
    session.flush()
    return tenant


def get_tenant_by_name(session: Session, *, name: str) -> Tenant | None:
    return session.scalar(select(Tenant).where(Tenant.name == name))


def issue_key(session: Session, *, tenant_id: uuid.UUID, secret: str,
              name: str = "default", expires_at: dt.datetime | None = None) -> tuple[ApiKey, str]:
    """Returns the stored row and the clear key, which is never stored and shown only now."""
    clear = generate_key()
    row = ApiKey(tenant_id=tenant_id, name=name, prefix=display_prefix(clear),
                 key_hash=hash_key(clear, secret), expires_at=expires_at)
    session.add(row)
    session.flush()
    return row, clear


def revoke_key(session: Session, *, key_id: uuid.UUID) -> None:
    session.execute(update(ApiKey).where(ApiKey.id == key_id)
                    .values(revoked_at=dt.datetime.now(dt.UTC)))


class TenantSuspended(Exception):
    """A live key of a suspended tenant: the caller is known, and may not use the API."""

    def __init__(self, tenant: Tenant) -> None:
        super().__init__(f"tenant {tenant.id} is suspended")
        self.tenant = tenant


class KeyExpired(Exception):
    """A key past its expiry: its holder is told it expired, not that it is wrong."""

    def __init__(self, expires_at: dt.datetime) -> None:
        super().__init__(f"the key expired at {expires_at.isoformat()}")
        self.expires_at = expires_at


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a live key belongs to: its tenant, the key's id (jobs record it) and its policy."""

    tenant: Tenant
    key_id: uuid.UUID
    policy: KeyPolicy


async def authenticate(session: AsyncSession, *, clear_key: str, secret: str) -> Tenant | None:
    """The tenant for a live key, or None (unknown, revoked or expired key). A live key of a
    suspended tenant raises TenantSuspended: its holder is told why, not that the key is bad."""
    found = await authenticate_key(session, clear_key=clear_key, secret=secret)
    return found[0] if found else None


async def authenticate_key(session: AsyncSession, *, clear_key: str, secret: str,
                           cache: KeyCache | None = None,
                           sessions: async_sessionmaker[AsyncSession] | None = None
                           ) -> tuple[Tenant, uuid.UUID] | None:
    """The tenant and the key's id (jobs record it, for per-key usage), as `authenticate`
    (an expired key: None)."""
    try:
        caller = await authenticate_caller(session, clear_key=clear_key, secret=secret,
                                           cache=cache, sessions=sessions)
    except KeyExpired:
        return None
    return None if caller is None else (caller.tenant, caller.key_id)


async def authenticate_caller(session: AsyncSession, *, clear_key: str, secret: str,
                              cache: KeyCache | None = None,
                              sessions: async_sessionmaker[AsyncSession] | None = None
                              ) -> Caller | None:
    """The caller of a live key, or None (unknown or revoked key); KeyExpired for a key past
    its expiry, TenantSuspended for a suspended tenant's. With a ``cache``, a key looked up
    within its TTL costs no query (service.tenants.key_cache: a revocation, a suspension or a
    policy edit made elsewhere binds within that TTL); with ``sessions`` too, a busy key's
    entry is renewed in the background before it expires."""
    now = dt.datetime.now(dt.UTC)
    key_hash = hash_key(clear_key, secret)
    found = cache.get(key_hash) if cache is not None else None
    if found is not None and cache is not None and sessions is not None:
        cache.refresh_ahead(key_hash, lambda: _read_key_apart(sessions, key_hash))
    if found is None:
        if cache is not None:
            found = await cache.read_once(key_hash, lambda: _read_key(session, key_hash, now))
        else:
            found = await _read_key(session, key_hash, now)
        if found is None:
            return None  # never cached: a new key works at once, guesses fill nothing
    if found.revoked_at is not None:
        return None
    if found.expires_at is not None and expired(found.expires_at, now):
        raise KeyExpired(found.expires_at)
    if found.suspended_at is not None:
        raise TenantSuspended(found.tenant())
    return Caller(found.tenant(), found.key_id, found.policy)


async def _read_key_apart(sessions: async_sessionmaker[AsyncSession],
                          key_hash: str) -> KeyLookup | None:
    async with sessions() as session:
        return await _read_key(session, key_hash, dt.datetime.now(dt.UTC))


async def _read_key(session: AsyncSession, key_hash: str, now: dt.datetime) -> KeyLookup | None:
    row = (await session.execute(
        select(ApiKey, Tenant).join(Tenant, Tenant.id == ApiKey.tenant_id)
        .where(ApiKey.key_hash == key_hash)
    )).first()
    if row is None:
        return None
    found = KeyLookup.of(*row)
    # Coarse last-used stamp: one write a minute per key is plenty for an admin list.
    if (found.revoked_at is None and found.suspended_at is None
            and (found.expires_at is None or found.expires_at > now)
            and (found.last_used_at is None
                 or now - found.last_used_at > dt.timedelta(minutes=1))):
        await session.execute(update(ApiKey).where(ApiKey.id == found.key_id)
                              .values(last_used_at=now))
        await session.commit()
    return found

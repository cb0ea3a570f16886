"""An API process's short-lived memory of API-key lookups, so a busy key costs no query per
request.

What is kept is the row as read (key id, revocation, expiry, the key's own policy, the
tenant's id, name, plan, weight and suspension), keyed by the key's HMAC (never the clear key),
for ``ttl_s`` seconds. The checks run on every request against that copy: an expiry time takes
effect exactly; a revocation, a suspension, a change of plan or of the key's policy made
elsewhere takes effect within ``ttl_s`` (`FAIRWAY_KEY_CACHE_SECONDS`) on every API process,
since an entry is never older than that (a renewal replaces it, it never extends it). The
admin routes of this process clear it at once. Unknown keys are never kept: a key issued a
moment ago works on its first request, and guessing cannot fill the cache.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from service.store.models.tenants import ApiKey, Tenant
from service.store.single_flight import RENEW_AFTER_S, SingleFlight, renew_delay
from service.tenants.key_policy import NO_POLICY, KeyPolicy

MAX_ENTRIES = 10_000  # distinct live keys remembered at once; the oldest go first


@dataclass(frozen=True, slots=True)
class KeyLookup:
    """One key's row and its tenant's, as read from the database."""

    key_id: uuid.UUID
    revoked_at: dt.datetime | None
    expires_at: dt.datetime | None
    last_used_at: dt.datetime | None
    tenant_id: uuid.UUID
    tenant_name: str
    plan: str
    weight: float
    suspended_at: dt.datetime | None
    tenant_created_at: dt.datetime
    policy: KeyPolicy = NO_POLICY  # the key's own limits and models

    @classmethod
    def of(cls, key: ApiKey, tenant: Tenant) -> KeyLookup:
        return cls(key.id, key.revoked_at, key.expires_at, key.last_used_at, tenant.id,
                   tenant.name, tenant.plan, tenant.weight, tenant.suspended_at,
                   tenant.created_at, KeyPolicy.of(key))

    def tenant(self) -> Tenant:
        """A fresh, detached Tenant per request: no session holds it, nothing shares it."""
        return Tenant(id=self.tenant_id, name=self.tenant_name, plan=self.plan,
                      weight=self.weight, suspended_at=self.suspended_at,
                      created_at=self.tenant_created_at)


class KeyCache:
    def __init__(self, ttl_s: float, *, clock: Callable[[], float] = time.monotonic,
                 max_entries: int = MAX_ENTRIES, renew_after_s: float = RENEW_AFTER_S) -> None:
        self.ttl_s = ttl_s
        self.renew_after_s = renew_delay(ttl_s, renew_after_s)
        self.clock = clock
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, KeyLookup]] = {}
        self._reading: dict[str, asyncio.Future[KeyLookup | None]] = {}
        self._renewals: SingleFlight[str, KeyLookup | None] = SingleFlight()

    def get(self, key_hash: str) -> KeyLookup | None:
        entry = self._entries.get(key_hash)
        if entry is None:
            return None
        if self.clock() >= entry[0]:
            del self._entries[key_hash]
            return None
        return entry[1]

    def put(self, key_hash: str, lookup: KeyLookup) -> None:
        if self.ttl_s <= 0:
            return
        self._entries.pop(key_hash, None)
        while len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]  # the oldest insertion
        self._entries[key_hash] = (self.clock() + self.ttl_s, lookup)

    def clear(self) -> None:
        self._entries.clear()

    async def read_once(self, key_hash: str,
                        read: Callable[[], Awaitable[KeyLookup | None]]) -> KeyLookup | None:
        """``read()`` the key, unless a read of it is under way: then share that one's answer.
        A burst on a key not (or no longer) cached would otherwise send one query per request
        at once (each with its own pooled connection), and they stood in line for ~100s of ms
        after a start. A waiter whose shared read failed reads on its own."""
        pending = self._reading.get(key_hash)
        if pending is not None:
            try:
                return await asyncio.shield(pending)
            except Exception:
                return await read()
        future: asyncio.Future[KeyLookup | None] = asyncio.get_running_loop().create_future()
        self._reading[key_hash] = future
        try:
            found = await read()
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            self._reading.pop(key_hash, None)
        if found is not None:
            self.put(key_hash, found)
        else:
            self._entries.pop(key_hash, None)  # deleted meanwhile
        future.set_result(found)
        return found

    def refresh_ahead(self, key_hash: str,
                      read: Callable[[], Awaitable[KeyLookup | None]]) -> None:
        """Past half its TTL, an entry still answers while one background read renews it: a
        busy key is never read on a request's path (a burst at the TTL's end all waited on
        that read, behind a busy pool's connections). The read starts ``renew_after_s``
        later, after the request's own critical path. What is kept is never older than
        ``ttl_s``, so a revocation still binds within it."""
        entry = self._entries.get(key_hash)
        if (entry is None or key_hash in self._reading
                or self.clock() < entry[0] - self.ttl_s / 2):
            return
        # A failed renewal is dropped: the entry expires, and the next miss reads it.
        self._renewals.run(key_hash, lambda: self.read_once(key_hash, read),
                           after_s=self.renew_after_s)

    def __len__(self) -> int:
        return len(self._entries)


def key_cache(state: Any) -> KeyCache:
    """The app's cache, made on first use with the settings' TTL."""
    cache: KeyCache | None = getattr(state, "key_cache", None)
    if cache is None:
        cache = state.key_cache = KeyCache(state.settings.api.key_cache_seconds)
    return cache

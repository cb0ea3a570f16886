"""A key's own policy at the door: the models it may use, and its own limits (requests and
tokens per minute, concurrent requests) counted in Redis across API replicas by the tenant's
quota script, keyed by the key's id instead of the tenant's (its buckets are its own, in its
own slot). A request must pass both: the key's first, then the tenant's at the door.

A key's tokens per minute count what the request asks (the prompt's estimate plus
max_tokens), as OpenAI's limits do; they are not corrected to what it used. Its concurrency
slot is held until the request ends (a background response's, until it is queued). A key with
no limits of its own costs nothing here: no Redis call."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.exceptions import RedisError

from service.jobs.door_request import DoorRequest
from service.observability.requests import record_refusal
from service.quotas.held import release_after, release_when_done
from service.quotas.refusal import refusal
from service.quotas.reservation import quota_store, unavailable
from service.store.quota_store import Decision, QuotaStore
from service.tenants.key_policy import NO_POLICY, KeyPolicy
from service.web.errors import APIError

log = logging.getLogger("fairway.quotas")
T = TypeVar("T")


def key_policy_of(request: Any) -> KeyPolicy:
    """The policy of the key the request came with (none: an admin's or a test's call)."""
    policy: KeyPolicy = getattr(request.state, "api_key_policy", NO_POLICY)
    return policy


def model_not_allowed(model: str) -> APIError:
    # OpenAI answers a project key restricted from a model with 403 model_not_found.
    return APIError(403, f"This API key does not have access to model '{model}'. Ask your "
                         f"administrator to add it to the key's allowed models.",
                    code="model_not_found", param="model", type_="invalid_request_error",
                    reason="key_model_not_allowed")


def check_model(request: Any, model: str) -> None:
    """Raise the 403 for a model outside the key's allow-list."""
    if not key_policy_of(request).allows(model):
        raise model_not_allowed(model)


def key_refusal(decision: Decision, policy: KeyPolicy, requested: int) -> APIError:
    """The tenant's 429, said of the key: same headers and Retry-After."""
    base = refusal(decision, policy.limits(), requested=requested)
    return APIError(429, f"This API key's own limit: {base.message}", code=base.code,
                    type_=base.type, headers=base.headers,
                    reason=f"key_{decision.reason or 'refused'}")


@dataclass(slots=True)
class KeyHold:
    """What one request took of its key's limits; ``store`` None: nothing (no limits)."""

    store: QuotaStore | None
    key_id: uuid.UUID
    ticket: uuid.UUID
    tokens: int
    _released: bool = field(default=False)

    async def release(self) -> None:
        """The request ended (or went to the background): free its slot; its tokens stay
        counted."""
        await self._settle(self.tokens)

    async def refund(self) -> None:
        """Refused after the key's limits took it: the tokens and the slot go back (the
        request still counts against the key's requests per minute)."""
        await self._settle(0)

    async def guard(self, work: Awaitable[T]) -> T:
        """Await the tenant's admission; refused or failed, give back what the key took."""
        try:
            return await work
        except BaseException:
            await self.refund()
            raise

    async def around(self, work: Awaitable[T]) -> T:
        return await release_after(work, self.release)

    def wrap(self, stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        return release_when_done(stream, self.release)

    async def _settle(self, tokens: int) -> None:
        if self._released or self.store is None:
            return
        self._released = True
        try:
            await self.store.settle(tenant_id=self.key_id, ref=self.ticket,
                                    actual_tokens=tokens, free_slot=self.ticket)
        except RedisError:  # the slot's expiry score frees it later
            log.warning("key quota release failed", extra={"api_key_id": str(self.key_id)})


async def take_key_limits(request: Any, req: DoorRequest, *, slot_ttl_s: float) -> KeyHold:
    """Take the request from its key's own limits, or raise their 429 (503 without Redis)."""
    policy = key_policy_of(request)
    tokens = req.prompt_tokens + req.max_tokens
    if req.api_key_id is None or not policy.limited:
        return KeyHold(None, uuid.UUID(int=0), uuid.UUID(int=0), tokens)
    store = quota_store(request.app.state)
    ticket = uuid.uuid4()
    try:
        decision = await store.admit(tenant_id=req.api_key_id, limits=policy.limits(),
                                     tokens=tokens, ticket=ticket, batch=False,
                                     hold_slot=True, slot_ttl_s=slot_ttl_s)
    except RedisError as exc:
        raise unavailable() from exc
    if not decision.admitted:
        error = key_refusal(decision, policy, tokens)
        record_refusal(req.tenant.id, error)
        raise error
    return KeyHold(store, req.api_key_id, ticket, tokens)

"""The quota state in Redis: admit, bind, settle, and read back. No HTTP or SQL here."""

from __future__ import annotations

import calendar
import dataclasses
import datetime as dt
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from redis import Redis as SyncRedis
from redis.asyncio import Redis

from service.store import quota_scripts as scripts
from service.store.handoff import ExpressEntry
from service.store.keys import HANDOFF_MAXLEN, express_key, handoff_stream
from service.store.quota_limits import QuotaLimits

MONTH_TTL_S = 40 * 24 * 3600
REALTIME_RESERVATION_TTL_S = 2 * 3600
BATCH_RESERVATION_TTL_S = 48 * 3600


def _n(limit: int | None) -> int:
    return -1 if limit is None else int(limit)


def month_tag(now: dt.datetime) -> str:
    return now.strftime("%Y%m")


def seconds_to_next_month(now: dt.datetime) -> int:
    days = calendar.monthrange(now.year, now.month)[1]
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return max(1, math.ceil((start + dt.timedelta(days=days) - now).total_seconds()))


@dataclass(frozen=True, slots=True)
class TenantKeys:
    tenant_id: str

    def key(self, suffix: str) -> str:
        # The hash tag keeps one tenant's keys in one Cluster slot (the scripts touch several).
        return f"fw:q:{{{self.tenant_id}}}:{suffix}"

    @property
    def rpm(self) -> str:
        return self.key("rpm")

    @property
    def tpm(self) -> str:
        return self.key("tpm")

    @property
    def conc(self) -> str:
        return self.key("conc")

    @property
    def batch(self) -> str:
        return self.key("batch")

    def month(self, tag: str) -> str:
        return self.key(f"m:{tag}")

    def reservation(self, ref: uuid.UUID | str) -> str:
        return self.key(f"res:{ref}")

    @property
    def policy_generation(self) -> str:
        """Bumped after every admin change to this tenant's policy (service.quotas.door_policy);
        in the tenant's slot, so the admission script checks it in the same call."""
        return self.key("gen")


@dataclass(frozen=True, slots=True)
class Decision:
    admitted: bool
    reason: str = ""  # the limit that refused, e.g. "requests_per_minute"
    retry_after_s: int = 0
    alert_crossed: bool = False  # this admission took the month past the soft alert level
    needs_seed: bool = False  # the month counter is missing (new month, or Redis lost it)
    # The buckets after this admission, or as they stand on a refusal (None: that limit is
    # off), for the x-ratelimit headers.
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    # On a refusal by concurrent_requests, batch_enqueued_tokens or monthly_tokens: what that
    # limit counts now (open requests, enqueued tokens, tokens this month), for the message.
    used: int | None = None
    # The tenant's policy generation as the script read it; stale: it was not the expected
    # one, and nothing was taken (service.quotas.door_policy).
    generation: int = 0
    stale: bool = False
    # The express ticket (``<worker>|<ticket>``) the admission popped, its job's hand-off
    # entry now in that worker's stream (``QuotaStore.admit(express=...)``); None: not placed.
    express_ticket: str | None = None


def _admit_call(*, tenant_id: uuid.UUID, limits: QuotaLimits, tokens: int, ticket: uuid.UUID,
                batch: bool, hold_slot: bool, slot_ttl_s: float, now: dt.datetime,
                expect_generation: int | None = None) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of the ADMIT script (shared by the async and sync stores)."""
    keys = TenantKeys(str(tenant_id))
    t = time.time()
    res_ttl = BATCH_RESERVATION_TTL_S if batch else REALTIME_RESERVATION_TTL_S
    return ([keys.rpm, keys.tpm, keys.conc, keys.month(month_tag(now)), keys.batch,
             keys.reservation(ticket), keys.policy_generation],
            [repr(t), _n(limits.requests_per_minute), _n(limits.tokens_per_minute),
             _n(limits.concurrent_requests), _n(limits.monthly_tokens),
             _n(limits.batch_enqueued_tokens), int(tokens), str(ticket), repr(t + slot_ttl_s),
             int(batch), int(hold_slot), res_ttl, MONTH_TTL_S, _n(limits.monthly_alert_tokens),
             "" if expect_generation is None else int(expect_generation)])


def _decision(out: list[Any], now: dt.datetime) -> Decision:
    code, generation = int(out[0]), int(out[-1])
    if code == -2:
        return Decision(False, generation=generation, stale=True)
    if code == -1:
        return Decision(False, needs_seed=True, generation=generation)
    if code == 1:
        left = [int(v) for v in out[2:4]] + [-1, -1]
        return Decision(True, alert_crossed=bool(int(out[1])),
                        remaining_requests=left[0] if left[0] >= 0 else None,
                        remaining_tokens=left[1] if left[1] >= 0 else None,
                        generation=generation)
    reason = out[1].decode() if isinstance(out[1], bytes) else str(out[1])
    retry_ms = int(out[2])
    req, tok, used = (int(v) for v in out[3:6])
    retry_s = (seconds_to_next_month(now) if reason == "monthly_tokens"
               else max(1, math.ceil(retry_ms / 1000)))
    return Decision(False, reason, retry_s, remaining_requests=req if req >= 0 else None,
                    remaining_tokens=tok if tok >= 0 else None,
                    used=used if used >= 0 else None, generation=generation)


def _settle_call(*, tenant_id: uuid.UUID, ref: uuid.UUID | str, actual_tokens: int,
                 free_slot: uuid.UUID | None) -> tuple[list[str], list[Any]]:
    keys = TenantKeys(str(tenant_id))
    args: list[Any] = [repr(time.time()), int(actual_tokens)]
    if free_slot is not None:
        args.append(str(free_slot))
    return [keys.reservation(ref), keys.tpm, keys.conc, keys.batch], args


class QuotaStore:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._admit = redis.register_script(scripts.ADMIT)
        self._settle = redis.register_script(scripts.SETTLE)
        self._admit_and_hand_off = redis.register_script(scripts.ADMIT_AND_HAND_OFF)

    async def admit(self, *, tenant_id: uuid.UUID, limits: QuotaLimits, tokens: int,
                    ticket: uuid.UUID, batch: bool, hold_slot: bool, slot_ttl_s: float,
                    now: dt.datetime | None = None, expect_generation: int | None = None,
                    express: ExpressEntry | None = None) -> Decision:
        """``expect_generation``: the tenant's policy generation ``limits`` were read under;
        another one makes the decision ``stale``, with nothing taken. ``express``: on an
        admission, also place the request on the worker of the model's next lent ticket and
        add its hand-off entry there, in the same call (``Decision.express_ticket``)."""
        now = now or dt.datetime.now(dt.UTC)
        keys, args = _admit_call(tenant_id=tenant_id, limits=limits, tokens=tokens,
                                 ticket=ticket, batch=batch, hold_slot=hold_slot,
                                 slot_ttl_s=slot_ttl_s, now=now,
                                 expect_generation=expect_generation)
        if express is None:
            return _decision(await self._admit(keys=keys, args=args), now)
        args += [handoff_stream(""), HANDOFF_MAXLEN]
        for field, value in express.fields.items():
            args += [field, value]
        raw, out = await self._admit_and_hand_off(keys=[*keys, express_key(express.model)],
                                                  args=args)
        decision = _decision(out, now)
        if not raw:
            return decision
        return dataclasses.replace(decision, express_ticket=raw.decode()
                                   if isinstance(raw, bytes) else str(raw))

    async def seed_month(self, *, tenant_id: uuid.UUID, used_tokens: int,
                         now: dt.datetime | None = None) -> None:
        """Start the month counter from Postgres' usage; NX so a racing seed can't double it."""
        key = TenantKeys(str(tenant_id)).month(month_tag(now or dt.datetime.now(dt.UTC)))
        await self.redis.set(key, int(used_tokens), nx=True, ex=MONTH_TTL_S)

    async def month_used(self, *, tenant_id: uuid.UUID, now: dt.datetime | None = None
                         ) -> int | None:
        """Tokens charged this month, or None when the counter is missing (needs a seed)."""
        key = TenantKeys(str(tenant_id)).month(month_tag(now or dt.datetime.now(dt.UTC)))
        raw = await self.redis.get(key)
        return None if raw is None else int(raw)

    async def settle(self, *, tenant_id: uuid.UUID, ref: uuid.UUID | str, actual_tokens: int,
                     free_slot: uuid.UUID | None = None) -> int | None:
        """Correct the reservation `ref` to the real token count; None if already settled.
        `free_slot` also frees that concurrency slot, settled or not (one round trip)."""
        keys, args = _settle_call(tenant_id=tenant_id, ref=ref, actual_tokens=actual_tokens,
                                  free_slot=free_slot)
        out = int(await self._settle(keys=keys, args=args))
        return None if out < 0 else out

    async def release_slot(self, *, tenant_id: uuid.UUID, ticket: uuid.UUID) -> None:
        await self.redis.zrem(TenantKeys(str(tenant_id)).conc, str(ticket))

    async def state(self, *, tenant_id: uuid.UUID, limits: QuotaLimits,
                    month_used: int | None = None) -> dict[str, Any]:
        """What the dashboard shows: remaining bucket levels, open requests, month used
        (`month_used` when given: the caller read it, from the counter or Postgres)."""
        keys = TenantKeys(str(tenant_id))
        now = time.time()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.rpm, "tokens", "ts")
            pipe.hmget(keys.tpm, "tokens", "ts")
            pipe.zcount(keys.conc, now, "+inf")
            pipe.get(keys.month(month_tag(dt.datetime.now(dt.UTC))))
            pipe.get(keys.batch)
            rpm, tpm, conc, month, batch = await pipe.execute()
        if month_used is not None:
            month = month_used

        def level(raw: list[Any], cap: int | None) -> float | None:
            if cap is None:
                return None
            if raw[0] is None:
                return float(cap)
            return min(cap, float(raw[0]) + max(0.0, now - float(raw[1])) * cap / 60.0)

        used = int(month or 0)
        alert = limits.monthly_alert_tokens
        return {"requests_per_minute_available": level(rpm, limits.requests_per_minute),
                "tokens_per_minute_available": level(tpm, limits.tokens_per_minute),
                "concurrent_requests_open": int(conc),
                "monthly_tokens_used": used,
                "monthly_alert": alert is not None and used >= alert,
                "batch_enqueued_tokens": int(batch or 0)}


class SyncQuotaStore:
    """The same scripts over a synchronous Redis client, for code that runs in threads (batch
    ingest, the dispatcher's batch maintenance). Only what batches need."""

    def __init__(self, redis: SyncRedis) -> None:
        self.redis = redis
        self._admit = redis.register_script(scripts.ADMIT)
        self._settle = redis.register_script(scripts.SETTLE)

    def admit(self, *, tenant_id: uuid.UUID, limits: QuotaLimits, tokens: int,
              ticket: uuid.UUID, batch: bool, now: dt.datetime | None = None) -> Decision:
        now = now or dt.datetime.now(dt.UTC)
        keys, args = _admit_call(tenant_id=tenant_id, limits=limits, tokens=tokens,
                                 ticket=ticket, batch=batch, hold_slot=False,
                                 slot_ttl_s=BATCH_RESERVATION_TTL_S, now=now)
        return _decision(self._admit(keys=keys, args=args), now)

    def seed_month(self, *, tenant_id: uuid.UUID, used_tokens: int,
                   now: dt.datetime | None = None) -> None:
        key = TenantKeys(str(tenant_id)).month(month_tag(now or dt.datetime.now(dt.UTC)))
        self.redis.set(key, int(used_tokens), nx=True, ex=MONTH_TTL_S)

    def settle(self, *, tenant_id: uuid.UUID, ref: uuid.UUID | str,
               actual_tokens: int) -> int | None:
        keys, args = _settle_call(tenant_id=tenant_id, ref=ref, actual_tokens=actual_tokens,
                                  free_slot=None)
        out = int(self._settle(keys=keys, args=args))
        return None if out < 0 else out

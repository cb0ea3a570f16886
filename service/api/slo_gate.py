"""Admission by predicted time to first token, at the door.

A realtime request whose predicted TTFT exceeds its target is refused with 429 and a
Retry-After before anything is stored (unless it would miss even on an idle pool, where
refusing it relieves nothing): under overload the queue is not filled past every
target, and a refusal costs milliseconds. The prediction is the policy's (scheduler.outlook):
the dispatcher publishes each model's outlook a few times a second, and this process adds the
requests it admitted since, so a burst between two outlooks is counted too, and the time a
request spends in this API before its job exists (service.api.api_backlog). Without an outlook
(no dispatcher yet, or Redis away) the request is admitted; the dispatcher still judges it.
The app keeps each judged model's outlook fresh from a thread (service.api.outlook_poller), so
while the API is in use no request waits on a read of it on the event loop.

Distinct from that load-dependent 429: a ``deadline_ms`` shorter than the request's time to
first token on an idle pool can never be met, whatever the load, so retrying is pointless;
``check_deadline`` refuses it with a 400 that says the shortest deadline it could meet.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from scheduler.outlook import (
    DoorVerdict,
    RealtimeOutlook,
    admitted_ahead,
    alone_ttft,
    door_verdict,
    predict_new_ttft,
)
from scheduler.ttft_calibration import TtftCalibration
from service.api.api_backlog import ApiBacklog
from service.api.outlook_poller import OutlookPoller
from service.store.heartbeats import decode_outlook
from service.store.keys import outlook_key
from service.store.single_flight import SingleFlight
from service.web.errors import APIError

# How stale an outlook this process reuses before reading it again, and judges refusals by
# without waiting on a read. The dispatcher publishes every 0.1 s; at 0.05 s under overload
# most refusals waited on a re-read in a busy event loop (p99 37 ms of a 50 ms budget at the
# door, bench/overload.py). 0.2 s: at most ~0.3 s behind the dispatcher, and requests admitted here
# since are counted on top (``_admitted``).
REFRESH_S = 0.2
# How stale one may still admit (never refuse) while a background read refreshes it. At 1 s
# every request of a quiet service waited on that read (~0.6 ms and a wake-up of Redis,
# bench/idle_ttft_pairs.py). An older outlook only admits: what it would refuse is judged on a
# fresh read, and requests admitted on it are counted on top (``_admitted``), so a burst after
# the quiet is refused by its own count or by the read that the first of it started.
STALE_S = 30.0
# While this process's own event loop lags, a read of Redis costs that lag before its answer is
# seen: an outlook no older than twice the lag is then as fresh as waiting for a new one would
# make it, and judging on it keeps a burst's refusals from all waiting on one read behind the
# burst (a 400-stream burst: refusals p50 256 ms in the API that way). Never older than this.
LAGGING_REFRESH_MAX_S = 1.0
# No outlook admits everything, so its absence is looked at again sooner: at start-up the
# dispatcher publishes its first one moments after the API serves, and a burst in between
# would otherwise all be admitted on one empty read.
ABSENT_REFRESH_S = 0.05


@dataclass(frozen=True, slots=True)
class _Rule:
    """What one request is judged by."""
    prompt_tokens: int
    target_s: float
    tenant: str | None
    weight: float
    max_wait_s: float | None
    adapter: str | None = None  # its LoRA adapter's ft: name: a load when none is warm
    due_in_s: float | None = None  # its first-token deadline, by which EDF orders it


@dataclass(frozen=True, slots=True)
class _Admitted:
    """A request admitted here that the model's outlook has not seen yet."""
    at: float  # epoch seconds
    tenant: str
    due_at: float  # its first-token deadline, epoch seconds (inf: not ordered by one)


class SloGate:
    def __init__(self, redis: Redis, backlog: ApiBacklog | None = None) -> None:
        self.redis = redis
        # This process's own queue ahead of the job row (in a burst, the largest part).
        self.backlog = backlog or ApiBacklog()
        # What each model's first tokens took against the predictions they were admitted on.
        self.calibration = TtftCalibration()
        self._outlooks: dict[str, tuple[float, RealtimeOutlook | None]] = {}
        self._reading: SingleFlight[str, RealtimeOutlook | None] = SingleFlight()
        # model -> each request admitted here, until an outlook has it
        self._admitted: dict[str, deque[_Admitted]] = defaultdict(deque)
        self._on_the_way: dict[str, int] = defaultdict(int)  # model -> between the looks
        # Set by the app: reads judged models' outlooks off the event loop (keep).
        self.poller: OutlookPoller | None = None

    async def check(self, model: str, *, prompt_tokens: int, target_s: float,
                    count: bool = True, tenant: str | None = None, weight: float = 1.0,
                    max_wait_s: float | None = None) -> int | None:
        """None: admitted (and, with ``count``, counted against the next request). Else the
        seconds after which a retry may be admitted (``judge``'s Retry-After)."""
        verdict = await self.judge(model, prompt_tokens=prompt_tokens, target_s=target_s,
                                   count=count, tenant=tenant, weight=weight,
                                   max_wait_s=max_wait_s)
        return None if verdict is None else verdict.retry_after

    async def judge(self, model: str, *, prompt_tokens: int, target_s: float,
                    count: bool = True, tenant: str | None = None, weight: float = 1.0,
                    max_wait_s: float | None = None, adapter: str | None = None,
                    due_in_s: float | None = None) -> DoorVerdict | None:
        """The request's predicted TTFT and, if refused, the seconds after which a retry may
        be admitted; None without an outlook (admitted unjudged). Admitted with ``count``,
        it is counted against the next request. With ``tenant`` (and its fair-share
        ``weight``), judged by that tenant's share of the queue (scheduler.outlook).

        A stale outlook may admit, never refuse: a refusal it would make is judged again on a
        fresh read (one read shared by every request waiting on it). A stale outlook from a
        busy moment must not refuse a request on a pool that has gone quiet since (its
        clients gone, their jobs cancelled). Except in a burst in this process (its door
        full, ``ApiBacklog.bursting``), where every refusal would wait on that read behind
        the whole burst: then a stale outlook refuses what it would refuse even if the pool
        had worked through its whole age since (its wait that much shorter).
        ``max_wait_s``: the plan queues (scheduler.outlook.door_refusal), ``target_s`` is then
        the request's deadline. ``adapter``: the request's LoRA adapter (its ft: name), whose
        load counts when the outlook lists no worker holding it. ``due_in_s``: its plan's
        TTFT target (or deadline if sooner), by which the policy orders it among other
        tenants' queued jobs (EDF: only theirs due first count ahead)."""
        outlook, fresh = await self._outlook(model)
        rule = _Rule(prompt_tokens, target_s, tenant, weight, max_wait_s, adapter, due_in_s)
        verdict = self._judge(outlook, model, rule)
        if verdict is not None and verdict.retry_after is not None and not fresh:
            aged = (self._judge(outlook, model, rule, age_s=self._age_s(model))
                    if self.backlog.bursting() else None)
            if aged is None or aged.retry_after is None:
                outlook, _ = await self._outlook(model, fresh=True)
                verdict = self._judge(outlook, model, rule)
        if verdict is not None and verdict.retry_after is None and count:
            now = time.time()
            due_at = math.inf if due_in_s is None else now + due_in_s
            self._admitted[model].append(_Admitted(now, tenant or "", due_at))
        return verdict

    def predicted_ttft_s(self, model: str, *, prompt_tokens: int, tenant: str,
                         weight: float = 1.0, adapter: str | None = None) -> float | None:
        """The request's predicted TTFT from the outlook at hand (no read, no judgement), as
        ``judge`` would predict it; None without one. For a request admitted without a look
        (placed on a lent ticket), so its prediction can be checked against what came."""
        cached = self._outlooks.get(model)
        if cached is None or cached[1] is None:
            return None
        admitted = self._admitted[model]
        own = sum(1 for a in admitted if a.tenant == tenant)
        return self.calibration.factor(model) * (self.backlog.delay_s() + predict_new_ttft(
            cached[1], adapter=adapter, prompt_tokens=prompt_tokens, extra_jobs=len(admitted),
            tenant=tenant,
            weight=weight, own_extra=own, elapsed_s=_elapsed_s(cached[1])))

    def first_token(self, model: str, *, ttft_s: float, predicted_ttft_s: float | None
                    ) -> None:
        """A request admitted on ``predicted_ttft_s`` (as judged, calibrated) had its first
        token after ``ttft_s``: calibration learns from it."""
        if predicted_ttft_s is None:
            return
        factor = self.calibration.factor(model)
        self.calibration.observe(model, actual_s=ttft_s,
                                 raw_predicted_s=predicted_ttft_s / factor)

    @contextlib.contextmanager
    def on_the_way(self, model: str) -> Iterator[None]:
        """A request that passed the first look and awaits its quota: every look meanwhile
        counts it ahead, as an admitted one (the second look counts it for good)."""
        self._on_the_way[model] += 1
        try:
            yield
        finally:
            self._on_the_way[model] -= 1

    def count(self, model: str, tenant: str) -> None:
        """Count an admission made without a look (a job placed on a lent express ticket),
        against the next request, as ``check`` counts one it admits."""
        cached = self._outlooks.get(model)
        if cached is not None and cached[1] is not None:
            self._admitted[model].append(_Admitted(time.time(), tenant, math.inf))

    def keep(self, model: str, outlook: RealtimeOutlook | None) -> None:
        """``model``'s outlook, read now off the event loop (service.api.outlook_poller)."""
        self._outlooks[model] = (time.monotonic(), outlook)

    def _age_s(self, model: str) -> float:
        cached = self._outlooks.get(model)
        return math.inf if cached is None else time.monotonic() - cached[0]

    def _judge(self, outlook: RealtimeOutlook | None, model: str, rule: _Rule,
               age_s: float = 0.0) -> DoorVerdict | None:
        """``age_s``: judge as if the pool had served that many seconds of the wait since."""
        if outlook is None:
            return None
        admitted = self._admitted[model]
        while admitted and admitted[0].at <= outlook.at:  # the outlook has seen those
            admitted.popleft()
        tenant = rule.tenant
        own = sum(1 for a in admitted if a.tenant == tenant) if tenant is not None else 0
        return door_verdict(outlook, prompt_tokens=rule.prompt_tokens, target_s=rule.target_s,
                            extra_jobs=self._ahead(admitted, tenant, rule.due_in_s)
                            + self._on_the_way[model],
                            tenant=tenant, weight=rule.weight, adapter=rule.adapter,
                            own_extra=own, max_wait_s=rule.max_wait_s,
                            api_delay_s=self.backlog.delay_s(), age_s=age_s,
                            elapsed_s=_elapsed_s(outlook), due_in_s=rule.due_in_s,
                            calibration=self.calibration.factor(model))

    @staticmethod
    def _ahead(admitted: deque[_Admitted], tenant: str | None, due_in_s: float | None) -> int:
        due_at = None if due_in_s is None else time.time() + due_in_s
        return admitted_ahead(((a.tenant, a.due_at) for a in admitted), tenant=tenant,
                              due_at=due_at)

    async def idle_ttft_s(self, model: str, *, prompt_tokens: int) -> float | None:
        """The request's predicted time to first token on an idle pool; None without an
        outlook (nothing to judge by)."""
        outlook, _ = await self._outlook(model)
        return None if outlook is None else alone_ttft(outlook, prompt_tokens=prompt_tokens)

    async def _outlook(self, model: str, *, fresh: bool = False
                       ) -> tuple[RealtimeOutlook | None, bool]:
        """The model's outlook, and whether it is fresh (read in the last REFRESH_S). An older
        one, up to STALE_S, is returned at once while one background read refreshes it (no
        request waits on Redis to be admitted); ``fresh`` waits for that read instead, as does
        a request after an empty read (which would admit it unjudged)."""
        if self.poller is not None:
            self.poller.watch(model)
        now = time.monotonic()
        cached = self._outlooks.get(model)
        if cached is not None and now - cached[0] < (
                self._refresh_s() if cached[1] is not None else ABSENT_REFRESH_S):
            return cached[1], True
        if not fresh and cached is not None and cached[1] is not None \
                and now - cached[0] < STALE_S:
            self._reading.run(model, lambda: self._read(model))
            return cached[1], False
        return await self._reading.run(model, lambda: self._read(model)), True

    def _refresh_s(self) -> float:
        """How old an outlook is still fresh: REFRESH_S, or twice the loop's lag while it
        lags (LAGGING_REFRESH_MAX_S at most)."""
        return min(LAGGING_REFRESH_MAX_S, max(REFRESH_S, 2 * self.backlog.loop_lag.lag_s()))

    async def _read(self, model: str) -> RealtimeOutlook | None:
        try:
            outlook = decode_outlook(await self.redis.get(outlook_key(model)))
        except RedisError:
            outlook = None
        self._outlooks[model] = (time.monotonic(), outlook)
        return outlook


# The time since an outlook was computed that counts for the slots its pool freed since: the
# dispatcher's clock, so bounded (another host's clock may be off; an old outlook is re-read).
ELAPSED_MAX_S = 1.0


def _elapsed_s(outlook: RealtimeOutlook) -> float:
    return min(ELAPSED_MAX_S, max(0.0, time.time() - outlook.at))


async def check_deadline(gate: SloGate, model: str, *, deadline_ms: int,
                         prompt_tokens: int) -> None:
    """400 ``deadline_unattainable`` for a deadline shorter than the first token takes even on
    an idle pool: no load shedding or retry can meet it. A deadline the idle pool can meet
    is left to the load-dependent checks (429 + Retry-After)."""
    idle_s = await gate.idle_ttft_s(model, prompt_tokens=prompt_tokens)
    if idle_s is None or deadline_ms / 1000 >= idle_s:
        return
    shortest = math.ceil(idle_s * 1000)
    raise APIError(400, f"deadline_ms={deadline_ms} cannot be met: even when the service is "
                        f"idle, the first token of this request takes about {shortest} ms. "
                        f"The shortest attainable deadline_ms for it is {shortest}; send at "
                        f"least that, or omit deadline_ms.",
                   code="deadline_unattainable", param="deadline_ms",
                   reason="deadline_unattainable")

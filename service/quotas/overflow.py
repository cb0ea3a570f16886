"""Overflow: a realtime request past its plan's rate limits, run at batch priority instead of
refused, when the plan says so (``over_quota: overflow``; docs/tenancy.md, "Over quota").

The request becomes flex-class work (the dispatcher runs it on idle capacity and preempts it
for realtime, and sheds it under realtime pressure) with the realtime request's own deadline,
and its tokens are asked of the quota again with the rate limits lifted and no concurrency
slot held: overflow is what the rate limits keep out of realtime, not of the month. The
monthly budget (and every refusal that is not a rate limit) still binds.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.tiers import tier_rule
from service.jobs.door_request import Classification
from service.quotas.reservation import QuotaAsk
from service.store.models.jobs import JobKind
from service.store.models.plans import OVERFLOW
from service.web.errors import APIError

# The refusals overflow replaces: the rate limits, not the month or the batch budget.
RATE_LIMITS = frozenset({"requests_per_minute", "tokens_per_minute", "concurrent_requests"})
OVERFLOW_TIER = "flex"


def overflows(error: APIError, ask: QuotaAsk, classification: Classification) -> bool:
    """Whether this refusal of a realtime request's quota becomes an overflow admission."""
    return (ask.policy.over_quota == OVERFLOW and classification.kind == JobKind.REALTIME
            and error.reason in RATE_LIMITS)


def overflow_ask(ask: QuotaAsk) -> QuotaAsk:
    """The same ask with the rate limits lifted, no slot held and no express hand-off (a
    batch-class job goes the dispatcher's way)."""
    limits = replace(ask.policy.limits, requests_per_minute=None, tokens_per_minute=None,
                     concurrent_requests=None)
    return replace(ask, policy=replace(ask.policy, limits=limits), hold_slot=False,
                   express=None)


def overflow_classification(classification: Classification) -> Classification:
    """Flex class and priority, the request's own deadline; its response says ``flex``."""
    rule = tier_rule(OVERFLOW_TIER)
    assert rule.echoed is not None
    return replace(classification, kind=JobKind.BATCH, priority=rule.priority,
                   service_tier=rule.echoed)

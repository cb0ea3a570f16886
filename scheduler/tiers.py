"""The service tiers: what each one makes of a job, for every layer that needs to know.

| service_tier       | class    | priority | echoed   |
|--------------------|----------|----------|----------|
| priority           | realtime | 0        | priority |
| default, auto, -   | realtime | 1        | default  |
| flex               | batch    | 2        | flex     |
| (batch file line)  | batch    | 3        | -        |

Lower priority values run first (vLLM's convention), and the engine receives the same value,
so the engine can tell the classes apart by priority alone: batch class is ``priority >=
FLEX_TIER``. Flex rides the batch class: it fills idle capacity, may be preempted, and is
refused first when realtime cannot meet its SLO.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

from scheduler.types import JobClass

# The names, stated once for every layer (Literals, so the API's schemas can list them): the
# tiers, first-served first, and what a request's ``service_tier`` may name, "auto" meaning
# "default", in the order the API's schema lists them. _RULES below has a rule for each tier.
TierName = Literal["priority", "default", "flex"]
ServiceTier = Literal["auto", "default", "flex", "priority"]
TIER_NAMES: tuple[TierName, ...] = get_args(TierName)
SERVICE_TIERS: tuple[ServiceTier, ...] = get_args(ServiceTier)

# JobView.priority of each tier.
PRIORITY_TIER = 0
DEFAULT_TIER = 1
FLEX_TIER = 2
BATCH_TIER = 3


class TierRule(NamedTuple):
    job_class: JobClass
    priority: int
    echoed: str | None  # the service_tier a response reports; None for batch file lines


_RULES: dict[str, TierRule] = {
    "priority": TierRule(JobClass.REALTIME, PRIORITY_TIER, "priority"),
    "default": TierRule(JobClass.REALTIME, DEFAULT_TIER, "default"),
    "flex": TierRule(JobClass.BATCH, FLEX_TIER, "flex"),
}

BATCH_LINE = TierRule(JobClass.BATCH, BATCH_TIER, None)
"""A line of a batch file: it names no tier."""


def tier_rule(service_tier: str | None) -> TierRule:
    """The class, priority and echoed tier of a request's ``service_tier`` (None or "auto"
    mean "default"). An unknown tier raises ValueError: the API validates it first."""
    tier = "default" if service_tier is None or service_tier == "auto" else service_tier
    try:
        return _RULES[tier]
    except KeyError:
        raise ValueError(f"unknown service_tier {service_tier!r}") from None


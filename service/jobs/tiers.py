"""How `service_tier` and a deadline pick a job's class, priority and deadline.

| service_tier       | class    | priority | default deadline              | echoed  |
|--------------------|----------|----------|-------------------------------|---------|
| priority           | realtime | 0        | realtime_deadline_seconds     | priority|
| default, auto, -   | realtime | 1        | realtime_deadline_seconds     | default |
| flex               | batch    | 2        | flex_deadline_seconds         | flex    |
| (batch file line)  | batch    | 3        | the batch's completion window | -       |

Lower priority values run first (vLLM's convention), and the engine receives the same value.
`deadline_ms` in the body overrides the default deadline. Flex work rides the batch class: it
fills idle capacity and may be refused (429) when the system is busy.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from service.store.models.jobs import JobKind


@dataclass(frozen=True, slots=True)
class Classification:
    kind: JobKind
    priority: int
    service_tier: str
    deadline_at: dt.datetime


PRIORITY_BY_TIER = {"priority": 0, "default": 1, "flex": 2}
BATCH_PRIORITY = 3


def classify(
    service_tier: str | None,
    deadline_ms: int | None,
    *,
    now: dt.datetime,
    realtime_deadline_s: float,
    flex_deadline_s: float,
) -> Classification:
    tier = "default" if service_tier in (None, "auto") else service_tier
    kind = JobKind.BATCH if tier == "flex" else JobKind.REALTIME
    default_s = flex_deadline_s if kind is JobKind.BATCH else realtime_deadline_s
    window = dt.timedelta(milliseconds=deadline_ms) if deadline_ms else dt.timedelta(
        seconds=default_s)
    return Classification(kind, PRIORITY_BY_TIER[tier], tier, now + window)

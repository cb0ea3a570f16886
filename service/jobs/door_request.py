"""One request at the door (``DoorRequest``), carried whole through its steps
(service.api.door) and into its job's insert (service.jobs.job_records.create_job), and its class,
priority and deadline from its ``service_tier`` and ``deadline_ms`` (``classify``).

The tier table itself (class, priority, echoed tier) is ``scheduler.tiers``, shared with the
policy and the engine's guard; this adds the deadlines, which are the API's settings:

| service_tier       | default deadline              |
|--------------------|-------------------------------|
| priority           | realtime_deadline_seconds     |
| default, auto, -   | realtime_deadline_seconds     |
| flex               | flex_deadline_seconds         |
| (background response) | flex_deadline_seconds, at flex class and priority |
| (batch file line)  | the batch's completion window |

``deadline_ms`` in the body overrides the default deadline.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any

from scheduler.tiers import tier_rule
from scheduler.types import JobClass
from service.store import nul_codec
from service.store.job_queries import prompt_estimate
from service.store.models.jobs import JobKind
from service.store.models.tenants import Tenant


@dataclass(frozen=True, slots=True)
class Classification:
    kind: JobKind
    priority: int
    service_tier: str
    deadline_at: dt.datetime


def classify(
    service_tier: str | None,
    deadline_ms: int | None,
    *,
    now: dt.datetime,
    realtime_deadline_s: float,
    flex_deadline_s: float,
) -> Classification:
    rule = tier_rule(service_tier)
    batch = rule.job_class is JobClass.BATCH
    default_s = flex_deadline_s if batch else realtime_deadline_s
    window = dt.timedelta(milliseconds=deadline_ms) if deadline_ms else dt.timedelta(
        seconds=default_s)
    assert rule.echoed is not None  # every service_tier echoes one
    return Classification(JobKind.BATCH if batch else JobKind.REALTIME, rule.priority,
                          rule.echoed, now + window)


def classify_background(deadline_ms: int | None, *, now: dt.datetime,
                        flex_deadline_s: float) -> Classification:
    """A background response (``POST /v1/responses`` with ``background: true``) is offline
    work whatever tier it names: the flex rule's class and priority (it fills idle capacity
    and may be preempted for realtime) and, unless ``deadline_ms`` says otherwise, the flex
    deadline. Its Response reports ``service_tier: "flex"``, the tier it ran on."""
    return classify("flex", deadline_ms, now=now, realtime_deadline_s=flex_deadline_s,
                    flex_deadline_s=flex_deadline_s)


@dataclass(frozen=True, slots=True)
class AdmittedSlo:
    """The plan and targets a realtime request is admitted under, stored on its job: its
    attainment is judged against them, whatever the tenant's plan is later."""

    plan: str
    ttft_slo_ms: int
    tpot_slo_ms: int


@dataclass(frozen=True, slots=True)
class DoorRequest:
    tenant: Tenant
    api_key_id: uuid.UUID | None  # the key it came with (None: an admin's or a test's call)
    model: str
    endpoint: str  # "chat.completions", "completions" or "responses"
    payload: dict[str, Any]  # the request body as the job row stores it
    max_tokens: int  # resolved: the body's, or the deployment's default
    deadline_ms: int | None
    stream: bool = False
    background: bool = False  # a background response: offline work, never placed ahead
    # When it reached the API (a time.perf_counter() reading), for the API's own backlog
    # (service.api.api_backlog); None: not known.
    arrived_at: float | None = None
    # The prompt's token estimate, once: it serializes the whole prompt.
    prompt_tokens: int = field(init=False)
    # The payload as the job row stores it (JSONB cannot hold U+0000, nul_codec.py), once:
    # the insert and an express hand-off both carry it.
    stored: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_tokens", prompt_estimate(self.payload))
        object.__setattr__(self, "stored", nul_codec.encode(self.payload))

    @property
    def requested_service_tier(self) -> str | None:
        tier = self.payload.get("service_tier")
        return tier if isinstance(tier, str) else None

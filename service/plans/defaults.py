"""The plans a fresh install starts with (the migration seeds them; admins edit them after).

Weights feed the scheduler's weighted fair share; SLOs are realtime targets the admin live
view measures attainment against. Standard is generous on purpose: it is the default plan for
new tenants (and of every tenant made before plans existed), and a limit should be a
decision, not a surprise. Only free withholds the `priority` service tier.
"""

from __future__ import annotations

from typing import Any

from scheduler.tiers import SERVICE_TIERS

DEFAULT_PLANS: list[dict[str, Any]] = [
    {"name": "free", "weight": 0.5, "allowed_service_tiers": ["auto", "default", "flex"],
     "ttft_slo_ms": 3000, "tpot_slo_ms": 200,
     "quotas": {"requests_per_minute": 20, "tokens_per_minute": 20_000,
                "concurrent_requests": 2, "batch_enqueued_tokens": 200_000,
                "monthly_tokens": 1_000_000, "monthly_alert_percent": 80}},
    {"name": "standard", "weight": 1.0, "allowed_service_tiers": list(SERVICE_TIERS),
     "ttft_slo_ms": 1000, "tpot_slo_ms": 100,
     "quotas": {"requests_per_minute": 3_000, "tokens_per_minute": 2_000_000,
                "concurrent_requests": 256, "batch_enqueued_tokens": 50_000_000,
                "monthly_tokens": None, "monthly_alert_percent": 80}},
    {"name": "premium", "weight": 2.0, "allowed_service_tiers": list(SERVICE_TIERS),
     "ttft_slo_ms": 500, "tpot_slo_ms": 50,
     "quotas": {"requests_per_minute": 6_000, "tokens_per_minute": 5_000_000,
                "concurrent_requests": 512, "batch_enqueued_tokens": 200_000_000,
                "monthly_tokens": None, "monthly_alert_percent": 80}},
    {"name": "enterprise", "weight": 4.0, "allowed_service_tiers": list(SERVICE_TIERS),
     "ttft_slo_ms": 300, "tpot_slo_ms": 40,
     "quotas": {"requests_per_minute": None, "tokens_per_minute": None,
                "concurrent_requests": 2_048, "batch_enqueued_tokens": None,
                "monthly_tokens": None, "monthly_alert_percent": 80}},
]

# The plans every install has: they can be edited, not deleted (new tenants default to
# standard, and docs, CLI defaults and tests name them).
BUILTIN_PLANS = frozenset(p["name"] for p in DEFAULT_PLANS)

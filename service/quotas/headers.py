"""OpenAI's x-ratelimit-* response headers, from an admission's buckets.

Clients (and the openai SDK's raw responses) read these to pace themselves. Buckets refill
continuously at limit/60 per second (scripts.py), so "reset" is the time until the bucket is
full again. A limit that is off sends no headers.
"""

from __future__ import annotations

from service.store.quota_limits import QuotaLimits
from service.store.quota_store import Decision


def duration(seconds: float) -> str:
    """OpenAI's format: "20ms", "1.5s", "6m0s" (and "26h3m0s" past an hour)."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes}m{rest}s"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours}h{rest // 60}m{rest % 60}s"


def rate_limit_headers(limits: QuotaLimits, decision: Decision) -> dict[str, str]:
    headers: dict[str, str] = {}
    for kind, limit, left in (
        ("requests", limits.requests_per_minute, decision.remaining_requests),
        ("tokens", limits.tokens_per_minute, decision.remaining_tokens),
    ):
        if limit is None or left is None or limit <= 0:
            continue
        left = max(0, min(limit, left))
        headers[f"x-ratelimit-limit-{kind}"] = str(limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(left)
        headers[f"x-ratelimit-reset-{kind}"] = duration((limit - left) * 60.0 / limit)
    return headers

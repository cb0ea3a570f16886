"""Quota policy pieces that need no services: merging, validation, service tier
resolution, errors."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from service.plans.defaults import DEFAULT_PLANS
from service.quotas.policy import resolve_service_tier
from service.quotas.reservation import estimate_prompt_tokens, refusal
from service.store.quota_limits import QuotaLimits, effective_limits, validate_quota_doc
from service.store.quota_store import Decision, seconds_to_next_month

TIER = {"requests_per_minute": 20, "tokens_per_minute": 1000, "concurrent_requests": 2,
        "batch_enqueued_tokens": 5000, "monthly_tokens": 10_000, "monthly_alert_percent": 80}


def test_overrides_replace_inherit_and_lift():
    limits = effective_limits(TIER, {"requests_per_minute": 1, "monthly_tokens": None})
    assert limits.requests_per_minute == 1  # replaced
    assert limits.tokens_per_minute == 1000  # inherited
    assert limits.monthly_tokens is None and limits.monthly_alert_tokens is None  # lifted


def test_alert_level_and_unknown_keys_ignored():
    limits = effective_limits(TIER, {"monthly_alert_percent": 50, "stray": 1})
    assert limits.monthly_alert_tokens == 5000
    assert effective_limits({}, None) == QuotaLimits()


def test_validate_quota_doc_keeps_only_sent_keys():
    assert validate_quota_doc({"requests_per_minute": 3, "monthly_tokens": None}) == {
        "requests_per_minute": 3, "monthly_tokens": None}
    with pytest.raises(ValidationError):
        validate_quota_doc({"requests_per_minute": -1})
    with pytest.raises(ValidationError):
        validate_quota_doc({"monthly_alert_percent": 0})
    with pytest.raises(ValidationError):
        validate_quota_doc({"nope": 1})


def test_seeded_plans_are_valid_and_ordered_by_weight():
    for plan in DEFAULT_PLANS:
        validate_quota_doc(plan["quotas"])
    weights = [t["weight"] for t in DEFAULT_PLANS]
    assert weights == sorted(weights)


@pytest.mark.parametrize(("requested", "allowed", "expected"), [
    (None, ("auto", "default", "flex"), "default"),
    ("auto", ("auto", "default", "flex"), "default"),
    ("priority", ("auto", "default", "flex"), None),
    ("priority", ("default", "priority"), "priority"),
    (None, ("flex",), "flex"),  # a flex-only plan still gets service
    ("default", ("flex",), None),
    (None, (), None),
])
def test_resolve_service_tier(requested, allowed, expected):
    assert resolve_service_tier(requested, allowed) == expected


def test_prompt_estimate_is_positive_and_grows():
    short = estimate_prompt_tokens({"messages": [{"role": "user", "content": "hi"}]})
    long = estimate_prompt_tokens({"messages": [{"role": "user", "content": "x" * 4000}]})
    assert 1 <= short < long and long >= 1000
    assert estimate_prompt_tokens({"prompt": ""}) == 1


def test_refusals_use_openai_codes_and_retry_after():
    rate = refusal(Decision(False, "requests_per_minute", 7))
    assert (rate.status, rate.code, rate.type) == (429, "rate_limit_exceeded", "rate_limit_error")
    assert rate.headers == {"Retry-After": "7"}
    budget = refusal(Decision(False, "monthly_tokens", 3600))
    assert (budget.code, budget.type) == ("insufficient_quota", "insufficient_quota")


def test_seconds_to_next_month():
    now = dt.datetime(2026, 2, 28, 23, 59, 0, tzinfo=dt.UTC)
    assert seconds_to_next_month(now) == 60
    dec = dt.datetime(2026, 12, 31, 0, 0, 0, tzinfo=dt.UTC)
    assert seconds_to_next_month(dec) == 86400


def test_rate_limit_headers_follow_openai() -> None:
    from service.quotas.headers import rate_limit_headers
    from service.store.quota_limits import QuotaLimits
    from service.store.quota_store import Decision

    limits = QuotaLimits(requests_per_minute=600, tokens_per_minute=None)
    h = rate_limit_headers(limits, Decision(True, remaining_requests=590, remaining_tokens=None))
    assert h == {
        "x-ratelimit-limit-requests": "600",
        "x-ratelimit-remaining-requests": "590",
        "x-ratelimit-reset-requests": "1s",  # 10 requests at 10 per second
    }
    h = rate_limit_headers(QuotaLimits(tokens_per_minute=1000),
                           Decision(True, remaining_tokens=-5))  # a bucket in debt
    assert h["x-ratelimit-remaining-tokens"] == "0"
    assert h["x-ratelimit-reset-tokens"] == "1m0s"
    h = rate_limit_headers(QuotaLimits(tokens_per_minute=1000),
                           Decision(True, remaining_tokens=999))
    assert h["x-ratelimit-reset-tokens"] == "60ms"

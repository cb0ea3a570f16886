"""A quota's 429 reads and heads like OpenAI's: the limit, the usage and when to retry in the
message; Retry-After and the x-ratelimit-* headers of every limit that applies."""

from __future__ import annotations

from service.quotas.refusal import refusal
from service.store.quota_limits import QuotaLimits
from service.store.quota_store import Decision

LIMITS = QuotaLimits(requests_per_minute=3, tokens_per_minute=1000, concurrent_requests=2,
                     monthly_tokens=5000)


def test_requests_per_minute_names_limit_usage_and_retry() -> None:
    err = refusal(Decision(False, "requests_per_minute", 20, remaining_requests=0,
                           remaining_tokens=400), LIMITS, requested=50)
    assert err.status == 429 and err.code == "rate_limit_exceeded"
    assert err.message == ("Rate limit reached for requests per minute (RPM): Limit 3, Used 3, "
                           "Requested 1. Please try again in 20s.")
    assert err.headers == {
        "Retry-After": "20",
        "x-ratelimit-limit-requests": "3", "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1m0s",
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "400",
        "x-ratelimit-reset-tokens": "36s",
    }


def test_tokens_per_minute_says_what_was_asked() -> None:
    err = refusal(Decision(False, "tokens_per_minute", 3, remaining_requests=2,
                           remaining_tokens=100), LIMITS, requested=150)
    assert err.message.startswith("Rate limit reached for tokens per minute (TPM): Limit 1000, "
                                  "Used 900, Requested 150")
    assert err.message.endswith("Please try again in 3s.")
    assert err.headers is not None and err.headers["x-ratelimit-remaining-tokens"] == "100"


def test_a_request_larger_than_the_minute_says_it_can_never_fit() -> None:
    err = refusal(Decision(False, "tokens_per_minute_exceeds_limit", 60, remaining_tokens=1000),
                  LIMITS, requested=4000)
    assert "Limit 1000, Requested 4000" in err.message and "never fit" in err.message


def test_concurrency_and_month() -> None:
    conc = refusal(Decision(False, "concurrent_requests", 1, used=2), LIMITS)
    assert "Too many concurrent requests: Limit 2, Open 2." in conc.message
    month = refusal(Decision(False, "monthly_tokens", 7200, used=4990), LIMITS, requested=20)
    assert month.code == "insufficient_quota" and month.type == "insufficient_quota"
    assert month.message.startswith(
        "You exceeded your monthly token budget: Limit 5000, Used 4990, Requested 20.")
    assert "in 2h0m0s" in month.message
    assert month.headers is not None and month.headers["Retry-After"] == "7200"


def test_no_limits_known_still_says_when_to_retry() -> None:
    err = refusal(Decision(False, "requests_per_minute", 5))
    assert err.message == "Rate limit reached. Please try again in 5s."
    assert err.headers == {"Retry-After": "5"}

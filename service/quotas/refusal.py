"""A quota refusal as OpenAI words and heads it: 429 naming the limit, the usage and when to
retry ("Rate limit reached for requests per minute (RPM): Limit 3, Used 3, Requested 1.
Please try again in 20s."), with ``Retry-After`` and the ``x-ratelimit-*`` headers."""

from __future__ import annotations

from service.quotas.headers import duration, rate_limit_headers
from service.store.quota_limits import QuotaLimits
from service.store.quota_store import Decision
from service.web.errors import APIError


def _message(decision: Decision, limits: QuotaLimits, requested: int | None) -> str:
    reason, retry = decision.reason, decision.retry_after_s
    again = f"Please try again in {duration(retry)}."
    asked = f", Requested {requested}" if requested is not None else ""
    if reason == "requests_per_minute" and limits.requests_per_minute is not None:
        limit = limits.requests_per_minute
        used = limit - (decision.remaining_requests or 0)
        return (f"Rate limit reached for requests per minute (RPM): Limit {limit}, "
                f"Used {used}, Requested 1. {again}")
    if reason == "tokens_per_minute" and limits.tokens_per_minute is not None:
        limit = limits.tokens_per_minute
        used = limit - (decision.remaining_tokens or 0)
        return (f"Rate limit reached for tokens per minute (TPM): Limit {limit}, Used {used}"
                f"{asked} (the prompt's estimate plus max_tokens). {again}")
    if reason == "tokens_per_minute_exceeds_limit":
        return (f"Request too large for tokens per minute (TPM): Limit "
                f"{limits.tokens_per_minute}{asked} (the prompt's estimate plus max_tokens). "
                f"It can never fit: lower max_tokens or shorten the prompt.")
    if reason == "concurrent_requests":
        return (f"Too many concurrent requests: Limit {limits.concurrent_requests}, Open "
                f"{decision.used}. Please try again when one of your open requests ends "
                f"(in about {duration(retry)}).")
    if reason == "batch_enqueued_tokens":
        return (f"Enqueued batch token limit reached: Limit {limits.batch_enqueued_tokens}, "
                f"Enqueued {decision.used}{asked}. Please try again when enqueued batches "
                f"finish (in about {duration(retry)} or later).")
    return "Rate limit reached. " + again


def refusal(decision: Decision, limits: QuotaLimits | None = None,
            requested: int | None = None) -> APIError:
    """The 429 for a refused admission. ``limits``: what it was judged against (for the
    message and the x-ratelimit headers); ``requested``: the tokens it asked for."""
    limits = limits or QuotaLimits()
    headers = {"Retry-After": str(decision.retry_after_s),
               **rate_limit_headers(limits, decision)}
    if decision.reason == "monthly_tokens":
        used = f", Used {decision.used}" if decision.used is not None else ""
        asked = f", Requested {requested}" if requested is not None else ""
        budget = f": Limit {limits.monthly_tokens}{used}{asked}" if limits.monthly_tokens else ""
        return APIError(429, f"You exceeded your monthly token budget{budget}. It renews at the "
                             f"start of next month (UTC), in {duration(decision.retry_after_s)}.",
                        code="insufficient_quota", type_="insufficient_quota", headers=headers,
                        reason=decision.reason)
    return APIError(429, _message(decision, limits, requested), code="rate_limit_exceeded",
                    headers=headers, reason=decision.reason or "refused")

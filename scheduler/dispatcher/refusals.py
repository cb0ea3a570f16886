"""What a client reads when the policy refuses its queued job (a ``Reject``): a sentence, not
the policy's reason code (the code stays in metrics and logs). Load-dependent refusals are
429 + Retry-After; the job's error keeps the code ``slo_unattainable``."""

from __future__ import annotations

_SENTENCES = {
    "ttft_slo_unreachable": "The service is too busy to start this request within its "
                            "time-to-first-token target.",
    "queue_wait_exceeded": "The service is too busy to start this request within its plan's "
                           "longest queue wait.",
    "queue_wait_expired": "This request waited its plan's longest queue wait without "
                          "starting: the service is too busy.",
    "deadline_unreachable": "The service is too busy to start this request before its "
                            "deadline.",
    "flex_overload": "The service is busy with realtime traffic and is not taking flex "
                     "requests right now.",
    "flex_shed": "This flex request was set aside to make room for realtime traffic.",
    "flex_deadline": "This flex request could not start in time to meet its deadline.",
    "no_capacity_for_model": "This request needs more KV cache than any worker serving its "
                             "model has.",
}
REASONS = frozenset(_SENTENCES)


def refusal_message(reason: str, retry_after_s: int) -> str:
    sentence = _SENTENCES.get(reason, "The service cannot take this request right now.")
    return f"{sentence} Please try again in {retry_after_s}s."

"""A client refused by the policy reads a sentence, never the policy's reason code."""

from __future__ import annotations

import re
from pathlib import Path

from scheduler.dispatcher.refusals import REASONS, refusal_message

POLICIES = Path(__file__).resolve().parents[3] / "scheduler" / "policies"


def test_every_reason_the_policies_give_has_a_sentence() -> None:
    given = set()
    for source in POLICIES.glob("*.py"):
        text = source.read_text()
        given |= set(re.findall(r'Reject\([^,]+,\s*"(\w+)"', text))
        given |= set(re.findall(r'self\._reject\([^,]+,\s*"(\w+)"', text))
        given |= set(re.findall(r'self\._refuse_realtime\([^,]+,\s*"(\w+)"', text))
    assert {"ttft_slo_unreachable", "queue_wait_exceeded"} <= given <= REASONS, given - REASONS


def test_messages_are_sentences_without_codes() -> None:
    for reason in [*REASONS, "something_new"]:
        message = refusal_message(reason, 3)
        assert message.endswith("Please try again in 3s.")
        assert reason not in message and "_" not in message, message
        assert message[0].isupper()

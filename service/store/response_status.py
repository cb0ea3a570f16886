"""A Responses-API job's status as OpenAI's Response object says it, from the job row alone.

A job created by ``POST /v1/responses`` has ``endpoint = 'responses'`` (``RESPONSES_ENDPOINT``);
its Response status follows from the row's ``status``, ``finish_reason`` and ``started_at``:

| job status                 | response status                                   |
|----------------------------|---------------------------------------------------|
| queued, never started      | queued                                            |
| queued (parked), assigned, running | in_progress                               |
| succeeded                  | completed, or incomplete when finish_reason=length |
| failed                     | failed                                            |
| cancelled                  | cancelled                                         |

Pure and in the floor, so any process (the API, a webhook sender in the dispatcher or a
worker) tells a response's terminal status the same way.
"""

from __future__ import annotations

import datetime as dt

RESPONSES_ENDPOINT = "responses"
RESPONSE_PREFIX = "resp_"  # a response's public id is this + the job id's hex
# The endpoints whose stored request holds chat `messages` (the worker applies the chat
# template to them).
CHAT_ENDPOINTS = frozenset({"chat.completions", RESPONSES_ENDPOINT})
RESPONSE_TERMINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})


def response_status(status: str, finish_reason: str | None,
                    started_at: dt.datetime | None) -> str:
    if status == "succeeded":
        return "incomplete" if finish_reason == "length" else "completed"
    if status in ("failed", "cancelled"):
        return status
    if status == "queued" and started_at is None:
        return "queued"
    return "in_progress"

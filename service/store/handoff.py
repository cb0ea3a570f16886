"""The realtime hand-off: the message the dispatcher adds to a worker's hand-off stream
(``service.store.keys.handoff_stream``) for each realtime job it placed there, typed, with its
one wire format (a Redis stream entry's fields).

The stream is only the fast path. The job row is the truth: the claim that names the worker
and the attempt is committed before the entry is added (on the API's express path, while it
is added: the entry is marked ``ahead`` and the worker's claim waits for the row), the worker
starts the job only through ``lifecycle.START`` for that attempt (a duplicate or stale entry
starts nothing), and a job whose worker dies before or after reading its entry is re-queued
from its row (the dispatcher's dead-worker detection, or the lease).

A fresh job's entry also carries what its engine request is built from (``JobBody``: the
request as stored, as the dispatcher read it from the row), so the worker starts the engine
while its claim commits: the claim leaves the time to first token. Nothing of the
job is delivered before the claim is confirmed; a claim that fails aborts the engine request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A request larger than this (as JSON) is not carried: its prefill dwarfs the claim, and the
# dispatcher keeps each carried body in memory until the job is sent.
BODY_MAX_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class JobBody:
    """A fresh job's engine input, as its row stores it (no checkpoint: a first attempt)."""

    endpoint: str
    request: dict[str, Any]  # as stored (U+0000 escaped, service.store.nul_codec)
    max_tokens: int
    priority: int
    tenant_id: str


@dataclass(frozen=True, slots=True)
class Handoff:
    """Run this attempt of a claimed realtime job. ``trace``: W3C trace-context headers
    (``{"traceparent": ..., "tracestate": ...}``) of the job's trace, carried untouched.
    ``body``: the job's engine input, when the dispatcher had it (``JobBody``). ``ahead``:
    sent alongside the row's insert, not after its commit (the API's express path): the
    worker's claim waits for the row (worker.claim_ahead) instead of taking it for stale."""

    job_id: str
    attempt: int
    trace: dict[str, str] | None = None
    body: JobBody | None = None
    ahead: bool = False


def encode(message: Handoff) -> dict[str, str]:
    """The stream entry's fields (``XADD key * <fields>``)."""
    fields = {"job": message.job_id, "attempt": str(message.attempt)}
    if message.trace:
        fields["trace"] = json.dumps(message.trace, separators=(",", ":"))
    if message.body is not None:  # not asdict: it would deep-copy the request first
        b = message.body
        fields["body"] = json.dumps({"endpoint": b.endpoint, "request": b.request,
                                     "max_tokens": b.max_tokens, "priority": b.priority,
                                     "tenant_id": b.tenant_id}, separators=(",", ":"))
    if message.ahead:
        fields["ahead"] = "1"
    return fields


@dataclass(frozen=True, slots=True)
class ExpressEntry:
    """A realtime job's hand-off entry (``encode``'s fields) for whichever worker lent
    ``model``'s next express ticket: the door's quota script pops that ticket and adds the
    entry on admission (``quota_scripts.ADMIT_AND_HAND_OFF``, service.jobs.express_handoff)."""

    model: str
    fields: dict[str, str]


def carried_body(endpoint: str, request: dict[str, Any], *, max_tokens: int, priority: int,
                 tenant_id: str) -> JobBody | None:
    """The body a hand-off may carry, or None when the request is too large to."""
    if len(json.dumps(request, separators=(",", ":"))) > BODY_MAX_CHARS:
        return None
    return JobBody(endpoint, request, max_tokens, priority, tenant_id)


def decode(fields: Mapping[bytes | str, bytes | str]) -> Handoff | None:
    """The message back from an entry's fields, or None when they are not one of ours."""
    try:
        plain = {_text(k): _text(v) for k, v in fields.items()}
        trace = json.loads(plain["trace"]) if "trace" in plain else None
        if trace is not None and not (isinstance(trace, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in trace.items())):
            return None
        attempt = int(plain["attempt"])
        job_id = plain["job"]
        body = _body(plain["body"]) if "body" in plain else None
    except (KeyError, ValueError):
        return None
    if not job_id or attempt < 1:
        return None
    return Handoff(job_id, attempt, trace, body, ahead=plain.get("ahead") == "1")


def _body(text: str) -> JobBody | None:
    """A carried body back; one that does not parse is dropped, not the hand-off (the job
    then starts from its claim's row, as without a body)."""
    try:
        raw = json.loads(text)
        body = JobBody(**raw) if isinstance(raw, dict) else None
    except (ValueError, TypeError):
        return None
    if body is None or not (isinstance(body.request, dict) and isinstance(body.endpoint, str)
                            and type(body.max_tokens) is int and type(body.priority) is int
                            and isinstance(body.tenant_id, str)):
        return None
    return body


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
